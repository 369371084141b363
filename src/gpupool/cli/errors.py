"""One place that turns gpupool's errors into a clear message and exit code 2, never a traceback.

No rich here: every command loads this module, and the message needs only click's colours.
"""

from __future__ import annotations

from collections.abc import Callable

import typer

from gpupool.domain.errors import GpupoolError

# The third-party modules that only one extra installs (pyproject.toml). NumPy comes with several
# (server, agent, sim); for it the command's own extra is named.
EXTRA_OF_MODULE = {
    "fastapi": "server",
    "starlette": "server",
    "uvicorn": "server",
    "sqlalchemy": "server",
    "alembic": "server",
    "psycopg": "server",
    "prometheus_client": "server",
    "pynvml": "agent",
    "matplotlib": "draw",
}


def _error(message: str) -> None:
    typer.echo(f"{typer.style('error', fg='red', bold=True)}: {message}", err=True)


def run_guarded(run: Callable[[], object], extra: str = "") -> int:
    """Run the command line. Usage errors are typer's own (exit 2); a gpupool error prints one line, exit 2;
    so does a dependency that an extra installs, naming the extra (``extra``: the command's own)."""
    try:
        run()  # standalone mode: exits through SystemExit with typer's code
    except GpupoolError as e:
        _error(str(e))
        return 2
    except ModuleNotFoundError as e:
        module = (e.name or "").partition(".")[0]
        need = EXTRA_OF_MODULE.get(module, extra)
        if module in ("", "gpupool") or not need:
            raise  # a broken install, not a missing extra
        _error(f"this command needs {module}, which is not installed: pip install 'gpupool[{need}]'")
        return 2
    return 0
