"""``gpupool acct``: per-run accounting records (sacct's view) and ``gpupool acct statement``: a tenant's
monthly statement priced by the server's rate card. Windows in human dates: ``2026-11-01``, ``now-7days``, ISO."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from gpupool.cli.client_cmds import Fmt, FmtOpt, _client, _emit
from gpupool.cli.human import read_when, when
from gpupool.domain.units import format_duration
from gpupool.schemas.accounts import AccountingOut

app = typer.Typer(help="Accounting: one record per run of a job, and monthly statements.")

COLS = ["job_id", "attempt", "tenant", "user", "pool", "gpu_model", "gpus", "hosts", "submit", "start", "end"]
COLS += ["elapsed", "state", "exit_code", "gpu_hours"]


def _row(r: AccountingOut) -> list[Any]:
    return [
        r.job_id, r.attempt, r.tenant, r.user, r.pool, r.gpu_model, f"{r.gpus:g}", ",".join(r.hosts),
        when(r.submit_s), when(r.start_s), when(r.end_s), format_duration(r.elapsed_s), r.state,
        "" if r.exit_code is None else r.exit_code, f"{r.gpu_hours:.4f}",
    ]  # fmt: skip


@app.callback(invoke_without_command=True)
def acct(
    ctx: typer.Context,
    since: Annotated[str, typer.Option("--since", "-S", help="window start: 2026-11-01, now-7days, ISO")] = "now-1day",
    until: Annotated[str, typer.Option("--until", "-E", help="window end (default: now)")] = "now",
    tenant: Annotated[str | None, typer.Option(help="one tenant's (admin tokens; a tenant sees its own)")] = None,
    fmt: FmtOpt = Fmt.TABLE,
) -> None:
    """Accounting: one record per run of a job, and monthly statements."""
    if ctx.invoked_subcommand is not None:
        return
    now = time.time()
    start, end = read_when(since, now, "--since"), read_when(until, now, "--until")
    records: list[AccountingOut] = []
    offset: int | None = 0
    with _client() as c:
        while offset is not None:
            page = c.accounting(start, end, tenant, offset=offset)
            records += page.records
            offset = page.next_offset
    _emit(fmt, COLS, [_row(r) for r in records], [r.model_dump() for r in records])


@app.command("statement")
def statement(
    month: Annotated[str, typer.Option(help="the UTC month: 2026-11")],
    tenant: Annotated[str | None, typer.Option(help="one tenant's (admin tokens; a tenant sees its own)")] = None,
    fmt: FmtOpt = Fmt.TABLE,
) -> None:
    """A monthly statement per tenant: GPU-hours per GPU model and pool, priced by the rate card."""
    with _client() as c:
        out = c.statement(month, tenant)
    rows: list[list[Any]] = []
    for t in out.tenants:
        for ln in t.lines:
            rate = "" if ln.per_gpu_hour is None else f"{ln.per_gpu_hour:.4f}"
            cost = "unpriced" if ln.cost is None else f"{ln.cost:.2f}"
            rows.append([t.tenant, ln.gpu_model, ln.pool, f"{ln.gpu_hours:.4f}", rate, cost])
        total = f"{t.total:.2f}" + (" + unpriced" if t.unpriced else "")
        rows.append([t.tenant, "total", "", f"{t.gpu_hours:.4f}", "", total])
    headers = ["tenant", "gpu_model", "pool", "gpu_hours", f"per_gpu_hour_{out.currency}", f"cost_{out.currency}"]
    _emit(fmt, headers, rows, out.model_dump())
