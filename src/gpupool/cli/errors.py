"""One place that turns gpupool's errors into a clear message and exit code 2, never a traceback."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

from gpupool.domain.errors import GpupoolError


def run_guarded(app: typer.Typer) -> int:
    """Run the typer app. Usage errors are typer's own (exit 2); a gpupool error prints one line, exit 2."""
    try:
        app()  # standalone mode: exits through SystemExit with typer's code
    except GpupoolError as e:
        Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error[/]: {escape(str(e))}")
        return 2
    return 0
