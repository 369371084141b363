"""``gpupool admin``: the operator's commands in one group: tenants and quotas (``admin_tenants``), pools and
calendars (``admin_pools``), API tokens and join tokens (``tokens``), and ``apply``, which makes a server hold
what one file describes.

Every command needs an admin token (``GPUPOOL_TOKEN``); every change is audited on the server, naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpupool.cli.admin_pools import calendars_app, pools_app
from gpupool.cli.admin_tenants import examples, quotas_app, tenants_app
from gpupool.cli.client_cmds import _client
from gpupool.cli.tokens import join_tokens_app, tokens_app
from gpupool.client import ApiError
from gpupool.client.adminfile import read_admin_file

admin_app = typer.Typer(help="Operator commands (need an admin token).", no_args_is_help=True)
admin_app.add_typer(tenants_app, name="tenants")
admin_app.add_typer(quotas_app, name="quotas")
admin_app.add_typer(pools_app, name="pools")
admin_app.add_typer(calendars_app, name="calendars")
admin_app.add_typer(tokens_app, name="tokens")
admin_app.add_typer(join_tokens_app, name="join-tokens")


@admin_app.command(
    "apply",
    epilog=examples(
        "gpupool admin apply -f deploy/examples/tenants.yaml -f deploy/examples/pools.yaml"
        " -f deploy/examples/quotas.yaml",
        "gpupool admin apply -f cluster.yaml   # one file with tenants:, pools: and quotas:",
    ),
)
def apply(
    files: Annotated[
        list[Path], typer.Option("--file", "-f", help="a YAML file with tenants:, pools:, quotas:", dir_okay=False)
    ],
) -> None:
    """Make the server hold what YAML files describe: tenants, pools with their calendars, quotas.

    Tenants are created (or their weight set), then pools (with their calendars), then quotas. Every file is read and checked before anything is sent; applying the same
    files again leaves the server as it was. What the files do not name is left alone (delete it by its own command)."""
    docs = [read_admin_file(f) for f in files]
    with _client() as c:
        for d in docs:
            for t in d.tenants:
                try:
                    c.create_tenant(t.name, t.weight)
                    typer.echo(f"tenant {t.name} created (weight {t.weight:g})")
                except ApiError as e:
                    if e.status != 409:
                        raise
                    c.update_tenant(t.name, t.weight)
                    typer.echo(f"tenant {t.name}: weight {t.weight:g}")
        for d in docs:
            for p in d.pools:
                out = c.put_pool(p.name, p.body())
                typer.echo(f"pool {out.name} set (version {out.version})")
        for d in docs:
            for q in d.quotas:
                c.set_quota(q.tenant, q.body())
                typer.echo(f"quota {q.tenant}/{q.pool}/{q.gpu_model or 'any'}: {q.nominal_gpus} GPUs")


__all__ = ["admin_app"]
