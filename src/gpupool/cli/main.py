"""Entry point of the ``gpupool`` command.

Commands load lazily: the command named on the line is imported, the others are listed from ``COMMANDS``
only. So ``gpupool jobs`` imports the client and never the server, agent, simulator or fabric code, and
``gpupool --version`` and ``gpupool --help`` import none of them (``benchmarks/cli_start.py``). Each command
names the extra that installs what it needs; when that is missing it says which to install (exit 2).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import typer

from gpupool import __version__
from gpupool.cli.errors import run_guarded


@dataclass(frozen=True, slots=True)
class Entry:
    """Where a command lives and what ``gpupool --help`` says of it without importing it."""

    module: str
    attr: str  # a typer.Typer (a command group) or a function (one command)
    help: str  # the command's own help (a test holds them equal)
    extra: str = ""  # the extra that installs its dependencies; "" = the base install
    panel: str = "Jobs"
    raw_args: bool = False  # its arguments reach it as given, options too (sbatch's own, before the script)


# What a raw_args command's parser does: every word after the command is an argument, none an option of ours.
_RAW = {"ignore_unknown_options": True, "allow_interspersed_args": False}


_CLI = "gpupool.cli.client_cmds"
_VIEWS = "gpupool.cli.views"
_RUN, _OFFLINE, _OPS = "Run", "Offline tools", "Cluster"
# The one list of commands. A new command is a line here; tests/cli/test_cli_main.py checks each line
# against the command it names.
COMMANDS: dict[str, Entry] = {
    "submit": Entry(
        _CLI, "submit", "Submit a job: flags and an argv after --, or a YAML job file (flags override the file)."
    ),
    "sbatch": Entry(
        "gpupool.cli.sbatch",
        "sbatch",
        "Submit a Slurm batch script: its #SBATCH lines (and sbatch options before it) as a gpupool job.",
        raw_args=True,
    ),
    "spec": Entry("gpupool.cli.spec", "app", "The job spec: its JSON Schema, and a check of job files."),
    "jobs": Entry(
        _VIEWS, "jobs", "List jobs like squeue: active ones by default, newest first (an admin sees every tenant's)."
    ),
    "job": Entry(
        _VIEWS, "job", "Show one job: its state, times, ranks, why it waits or how it ended, its runs and events."
    ),
    "cancel": Entry(
        _CLI,
        "cancel",
        "Cancel a job, or every element of an array (a running one is stopped on its nodes' next heartbeat).",
    ),
    "logs": Entry(
        _CLI, "logs", "Print a job's output through the server, from every rank's stdout or stderr (-f: follow)."
    ),
    "usage": Entry(_CLI, "usage", "GPU-seconds per tenant, GPU model and pool in a window."),
    "acct": Entry("gpupool.cli.acct", "app", "Accounting: one record per run of a job, and monthly statements."),
    "nodes": Entry(
        _VIEWS,
        "nodes",
        "List nodes like sinfo: GPUs total, allocated and free, state and why (a drain's reason), health.",
        panel=_OPS,
    ),
    "drain": Entry(_CLI, "drain", "Keep a node out of new placements (admin).", panel=_OPS),
    "undrain": Entry(_CLI, "undrain", "Return a drained node to service (admin).", panel=_OPS),
    "label": Entry(
        _CLI, "label", "Show a node's labels; set (key=value) and remove (key-) its admin labels (admin).", panel=_OPS
    ),
    "pools": Entry(
        _VIEWS,
        "pools",
        "List pools: GPUs owned now, used, lent and borrowed, and the calendar's current share and next change.",
        panel=_OPS,
    ),
    "admin": Entry("gpupool.cli.admin", "admin_app", "Operator commands (need an admin token).", panel=_OPS),
    "server": Entry(
        "gpupool.cli.server",
        "server",
        "Run the gpupool server: REST API, agent gateway and (when leader) the scheduling loop.",
        "server",
        _RUN,
    ),
    "agent": Entry(
        "gpupool.cli.agent",
        "agent",
        "Run the node agent: register with the server, report telemetry and health, run what it places here.",
        "agent",
        _RUN,
    ),
    "demo": Entry(
        "gpupool.cli.demo",
        "demo",
        "Start a server and emulated GPU nodes on loopback, submit a mixed workload, run until Ctrl-C.",
        "server,agent",
        _RUN,
    ),
    "fabric": Entry(
        "gpupool.cli.fabric", "app", "Discover, generate, inspect and export InfiniBand GPU fabrics.", "sim", _OFFLINE
    ),
    "sim": Entry(
        "gpupool.cli.sim", "app", "Simulate the scheduler on real or synthetic GPU-cluster traces.", "sim", _OFFLINE
    ),
}


def _print_version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit


def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """GPU pool manager and compute scheduler for InfiniBand GPU data centres."""


def _listed_only() -> None:
    """Stands in for a command in the listing; the command named on the line is always the real one."""
    raise AssertionError("a listed-only command was invoked")


def command_name(argv: Sequence[str]) -> str | None:
    """The command on the line: the first word that is not an option (the root takes no option values)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build(argv: Sequence[str]) -> typer.Typer:
    """The ``gpupool`` app for this command line: the named command imported, every other one listed only."""
    app = typer.Typer(name="gpupool", no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
    app.callback()(_root)
    wanted = command_name(argv)
    for name, e in COMMANDS.items():
        if name != wanted:
            app.command(name, help=e.help, rich_help_panel=e.panel)(_listed_only)
            continue
        target = getattr(importlib.import_module(e.module), e.attr)
        if isinstance(target, typer.Typer):
            app.add_typer(target, name=name, rich_help_panel=e.panel)
        else:
            app.command(name, rich_help_panel=e.panel, context_settings=_RAW if e.raw_args else None)(target)
    return app


def main() -> None:
    argv = sys.argv[1:]
    entry = COMMANDS.get(command_name(argv) or "")
    app = lambda: build(argv)(args=argv, prog_name="gpupool", standalone_mode=False)  # noqa: E731
    sys.exit(run_guarded(app, entry.extra if entry else ""))
