"""The ``gpupool`` console script and ``python -m gpupool``: ``gpupool --version`` is answered here, before the
command line's framework (typer, click, rich: about 50 ms of imports) is loaded; every other line goes to
``gpupool.cli.main``. Scripts and health checks call ``--version`` in loops, and on a loaded login node the
imports are what a user waits for.
"""

from __future__ import annotations

import importlib
import sys

from gpupool import __version__


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        print(__version__)
        return
    importlib.import_module("gpupool.cli.main").main()
