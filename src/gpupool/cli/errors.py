"""One place that turns gpupool's errors into a clear message and exit code 2, never a traceback.

Every message is one line on stderr: ``error: WHERE: WHAT``. That holds for gpupool's own errors, for
click's usage errors (typer's boxed form spreads one over five lines, so the app runs with
``standalone_mode=False`` and they are printed here), for a file the operating system refuses (a missing
folder, a directory where a file was expected, a read-only file system: the path is named) and for a
dependency that an extra installs.

No rich here: every command loads this module, and the message needs only click's colours.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

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


def one_line(message: str) -> str:
    """``message`` on one line: drivers' and tools' messages carry newlines and tabs (psycopg's hint)."""
    return " ".join(message.split())


def _error(message: str) -> None:
    typer.echo(f"{typer.style('error', fg='red', bold=True)}: {one_line(message)}", err=True)


def _click_class(name: str) -> type[Exception]:
    """click's exception class ``name``, found through typer's BadParameter: typer vendors click from 0.2x
    (``typer._click``), older typers use click itself, and either way these are the classes it raises."""
    found = next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)
    assert issubclass(found, Exception)
    return found


_USAGE_ERROR = _click_class("UsageError")
_CLICK_ERROR = _click_class("ClickException")


def _usage(e: Any) -> str:
    """A usage error as one line: the command, the problem, where help is."""
    ctx, what = e.ctx, str(e.format_message())
    return what if ctx is None else f"{ctx.command_path}: {what} (see {ctx.command_path} --help)"


def run_guarded(run: Callable[[], object], extra: str = "") -> int:
    """Run the command line; its exit code. ``run`` calls the app with ``standalone_mode=False``, so it
    returns (a command's return value, or the code of a ``typer.Exit``) or raises what went wrong.

    A gpupool error, a usage error, or a file the system refuses prints one line, exit 2; so does a dependency
    that an extra installs, naming the extra (``extra``: the command's own)."""
    try:
        code = run()
    except _USAGE_ERROR as e:
        if type(e).__name__ == "NoArgsIsHelpError":
            return 2  # no_args_is_help: the help was printed already
        _error(_usage(e))
        return 2
    except _CLICK_ERROR as e:
        _error(e.format_message())  # type: ignore[attr-defined]
        return int(getattr(e, "exit_code", 1))
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 130
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
    except OSError as e:
        # A path the command was given that the system refuses (a missing folder, a directory where a file
        # goes, /proc): the commands check their paths first, and this is the net under those checks.
        if e.filename is None:
            raise  # not about a path: a bug to see, not to hide
        what = e.strerror or os.strerror(e.errno or 0)
        _error(f"{e.filename}: {what}")
        return 2
    return code if isinstance(code, int) else 0
