"""``gpupool admin tenants`` and ``gpupool admin quotas``: who may use the cluster, and how much of each pool.

A tenant has a fair-share weight; a quota gives it a nominal number of GPUs in a pool (of one GPU model, or
any), and with a cohort it may borrow what the cohort's other tenants leave idle (up to its borrowing limit)
and lend its own idle GPUs (keeping back what its lending limit does not give away); a borrower is preempted
when the lender wants its GPUs back. docs/operations.md, "Tenants and quotas", says more.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gpupool.cli.admin_common import FileOpt, FormatOpt, checked, file_or_flags
from gpupool.cli.client_cmds import Fmt, _client, _emit
from gpupool.client.adminfile import QuotaEntry, read_admin_file
from gpupool.domain.errors import InputError
from gpupool.schemas import admin, api


def examples(*lines: str) -> str:
    """An epilog of example command lines, one per line as typed (typer joins lines of one paragraph)."""
    return "Examples:\n\n" + "\n\n".join(f"  {ln}" for ln in lines)


tenants_app = typer.Typer(help="Tenants: list, create, change their weight, delete.", no_args_is_help=True)
quotas_app = typer.Typer(help="Quotas: GPUs per tenant and pool, with borrowing and lending.", no_args_is_help=True)

Weight = Annotated[float | None, typer.Option("--weight", help="fair-share weight (> 0; default 1)")]
TenantArg = Annotated[str | None, typer.Argument(help="the tenant's name", show_default=False)]
_TENANT_FLAGS = {"name": "NAME", "weight": "--weight"}


@tenants_app.command("list", epilog=examples("gpupool admin tenants list", "gpupool admin tenants list --format json"))
def tenants_list(fmt: FormatOpt = Fmt.TABLE) -> None:
    """List the tenants and their weights."""
    with _client() as c:
        out = c.tenants().tenants
    _emit(fmt, ["tenant", "weight"], [[t.name, f"{t.weight:g}"] for t in out], [t.model_dump() for t in out])


@tenants_app.command(
    "create",
    epilog=examples(
        "gpupool admin tenants create vision --weight 2",
        "gpupool admin tenants create -f deploy/examples/tenants.yaml   # every tenant in its tenants: list",
    ),
)
def tenants_create(name: TenantArg = None, weight: Weight = None, file: FileOpt = None) -> None:
    """Create a tenant, or every tenant of a file's tenants: list; one that exists is refused (see update)."""
    file_or_flags(file, name, "NAME")
    todo = _tenants_of(file) if file else [checked(api.TenantIn, _TENANT_FLAGS, name=name, weight=weight or 1.0)]
    with _client() as c:
        for t in todo:
            made = c.create_tenant(t.name, t.weight)
            typer.echo(f"tenant {made.name} created (weight {made.weight:g})")


@tenants_app.command(
    "update",
    epilog=examples(
        "gpupool admin tenants update vision --weight 3",
        "gpupool admin tenants update -f deploy/examples/tenants.yaml   # each listed tenant's weight",
    ),
)
def tenants_update(name: TenantArg = None, weight: Weight = None, file: FileOpt = None) -> None:
    """Change a tenant's fair-share weight (or each weight a file lists); the scheduler uses it next cycle."""
    file_or_flags(file, name, "NAME")
    if file is None and weight is None:
        raise InputError("give the new --weight", source="--weight")
    todo = _tenants_of(file) if file else [checked(api.TenantIn, _TENANT_FLAGS, name=name, weight=weight)]
    for t in todo:
        checked(admin.TenantPatch, _TENANT_FLAGS, weight=t.weight)
    with _client() as c:
        for t in todo:
            out = c.update_tenant(t.name, t.weight)
            typer.echo(f"tenant {out.name}: weight {out.weight:g}")


@tenants_app.command(
    "delete", epilog=examples("gpupool admin tenants delete trial-team   # refused once it has had a job")
)
def tenants_delete(name: Annotated[str, typer.Argument(help="the tenant's name")]) -> None:
    """Delete a tenant that never had a job, with its quotas and tokens.

    One that had jobs stays (its jobs' history and accounting name it): set its quotas to 0 and revoke its
    tokens instead."""
    with _client() as c:
        c.delete_tenant(name)
    typer.echo(f"tenant {name} deleted")


def _tenants_of(file: Path) -> list[api.TenantIn]:
    return list(read_admin_file(file, ("tenants",)).tenants)


# -- quotas ----------------------------------------------------------------------------------------------------
_QUOTA_COLS = ["tenant", "pool", "gpu_model", "nominal", "borrow_limit", "lend_limit", "cohort"]
_QUOTA_FLAGS = {"tenant": "TENANT", "pool": "--pool", "gpu_model": "--gpu-model", "nominal_gpus": "--nominal",
                "borrowing_limit_gpus": "--borrowing-limit", "lending_limit_gpus": "--lending-limit",
                "cohort": "--cohort"}  # fmt: skip


def _limit(n: int | None) -> str:
    return "none" if n is None else str(n)


@quotas_app.command(
    "list",
    epilog=examples("gpupool admin quotas list", "gpupool admin quotas list --tenant vision --format csv"),
)
def quotas_list(
    tenant: Annotated[str | None, typer.Option(help="only this tenant's")] = None, fmt: FormatOpt = Fmt.TABLE
) -> None:
    """List quotas: nominal GPUs, borrowing and lending limits ("none": unlimited) and cohort."""
    with _client() as c:
        out = c.quotas(tenant).quotas
        if tenant is not None and not out and tenant not in {t.name for t in c.tenants().tenants}:
            raise InputError(f"unknown tenant {tenant!r}", source="--tenant")  # a typo is not "no quotas"
    rows: list[list[Any]] = [
        [q.tenant, q.pool, q.gpu_model or "any", q.nominal_gpus, _limit(q.borrowing_limit_gpus),
         _limit(q.lending_limit_gpus), q.cohort or "-"]
        for q in out
    ]  # fmt: skip
    _emit(fmt, _QUOTA_COLS, rows, [q.model_dump() for q in out])


@quotas_app.command(
    "set",
    epilog=examples(
        "gpupool admin quotas set vision --pool training --nominal 64",
        "gpupool admin quotas set vision --pool training --gpu-model H100 --nominal 64 --cohort lab"
        " --borrowing-limit 32 --lending-limit 16",
        "gpupool admin quotas set -f deploy/examples/quotas.yaml   # every quota in its quotas: list",
    ),
)
def quotas_set(
    tenant: TenantArg = None,
    pool: Annotated[str | None, typer.Option(help="the pool")] = None,
    nominal: Annotated[int | None, typer.Option("--nominal", help="GPUs the tenant is guaranteed there")] = None,
    gpu_model: Annotated[str, typer.Option("--gpu-model", help='only this GPU model ("": any)')] = "",
    borrowing_limit: Annotated[
        int | None, typer.Option("--borrowing-limit", help="GPUs it may borrow past nominal (default: no limit)")
    ] = None,
    lending_limit: Annotated[
        int | None, typer.Option("--lending-limit", help="of its idle GPUs, most it lends (default: all)")
    ] = None,
    cohort: Annotated[str, typer.Option(help="the tenants that lend to each other")] = "",
    file: FileOpt = None,
) -> None:
    """Create or replace a tenant's quota in a pool (for one GPU model, or any), or every quota of a file."""
    file_or_flags(file, tenant, "TENANT")
    if file is not None:
        todo = list(read_admin_file(file, ("quotas",)).quotas)
    else:
        if pool is None or nominal is None:
            raise InputError("give --pool and --nominal", source="--pool" if pool is None else "--nominal")
        fields = {"tenant": tenant, "pool": pool, "gpu_model": gpu_model, "nominal_gpus": nominal,
                  "borrowing_limit_gpus": borrowing_limit, "lending_limit_gpus": lending_limit, "cohort": cohort}  # fmt: skip
        todo = [checked(QuotaEntry, _QUOTA_FLAGS, **fields)]
    with _client() as c:
        for q in todo:
            out = c.set_quota(q.tenant, q.body())
            typer.echo(
                f"quota {out.tenant}/{out.pool}/{out.gpu_model or 'any'}: {out.nominal_gpus} GPUs, borrow"
                f" {_limit(out.borrowing_limit_gpus)}, lend {_limit(out.lending_limit_gpus)}"
                + (f", cohort {out.cohort}" if out.cohort else "")
            )


@quotas_app.command(
    "delete",
    epilog=examples(
        "gpupool admin quotas delete vision --pool training",
        "gpupool admin quotas delete vision --pool training --gpu-model H100",
    ),
)
def quotas_delete(
    tenant: Annotated[str, typer.Argument(help="the tenant")],
    pool: Annotated[str, typer.Option(help="the pool")],
    gpu_model: Annotated[str, typer.Option("--gpu-model", help='the quota\'s GPU model ("": any)')] = "",
) -> None:
    """Delete a tenant's quota in a pool; without one it is bound by no nominal share there."""
    with _client() as c:
        c.delete_quota(tenant, pool, gpu_model)
    typer.echo(f"quota {tenant}/{pool}/{gpu_model or 'any'} deleted")
