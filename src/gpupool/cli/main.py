"""Entry point of the ``gpupool`` command."""

from __future__ import annotations

import sys

import typer

from gpupool import __version__
from gpupool.cli import client_cmds
from gpupool.cli.agent import agent as agent_cmd
from gpupool.cli.demo import demo as demo_cmd
from gpupool.cli.errors import run_guarded
from gpupool.cli.fabric import app as fabric_app
from gpupool.cli.server import server
from gpupool.cli.sim import app as sim_app

app = typer.Typer(
    name="gpupool",
    help="GPU pool manager and compute scheduler for InfiniBand GPU data centres.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(fabric_app, name="fabric")
app.add_typer(sim_app, name="sim")
app.command()(server)
client_cmds.register(app)
app.command("agent")(agent_cmd)
app.command("demo")(demo_cmd)


@app.command()
def version() -> None:
    """Print the gpupool version."""
    typer.echo(__version__)


def main() -> None:
    sys.exit(run_guarded(app))
