"""REST API v1 accounting: per-run records (``GET /v1/accounting/jobs``, paged) and monthly statements priced
by the rate card (``GET /v1/accounting/statement``). A tenant sees its own; an admin every tenant's, or one.

The records of a window sum to ``GET /v1/usage`` of the same window (both are the store's clipped usage
intervals); a statement is that usage per tenant, GPU model and pool, priced by ``domain.rates``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import yaml
from fastapi import APIRouter, Query

from gpupool.domain.errors import InputError, ParseError
from gpupool.domain.rates import RateCard, parse_rate_card, statement, totals
from gpupool.domain.units import month_window
from gpupool.schemas import accounts
from gpupool.server.routes import ForbiddenError, Srv, Who
from gpupool.store import Principal
from gpupool.store.accounting import MAX_OFFSET
from gpupool.store.records import AccountingRecord

router = APIRouter(prefix="/v1/accounting")


def _tenant(who: Principal, asked: str | None) -> str | None:
    """Whose records: an admin's choice (None: all); a tenant's own, whatever it asked."""
    if who.admin:
        return asked
    if asked is not None and asked != who.tenant:
        raise ForbiddenError("a tenant token sees its own tenant's accounting only")
    return who.tenant


def _out(r: AccountingRecord, now: float) -> accounts.AccountingOut:
    run = r.run
    end = run.ended_s if run.ended_s is not None else now
    return accounts.AccountingOut(
        job_id=run.job_id,
        attempt=run.attempt,
        name=r.name,
        tenant=run.tenant,
        user=r.user,
        pool=run.pool,
        gpu_model=run.gpu_model,
        gpus=run.milli_gpu / 1000,
        hosts=list(dict.fromkeys(run.hosts)),  # each host once, in first-use order (sacct's NodeList)
        submit_s=r.submit_s,
        start_s=run.started_s,
        end_s=run.ended_s,
        elapsed_s=0.0 if run.started_s is None else max(0.0, end - run.started_s),
        state=run.state,
        exit_code=run.exit_code,
        gpu_hours=r.gpu_seconds / 3600.0,
    )


@router.get("/jobs", response_model=accounts.AccountingPage)
def accounting_jobs(
    srv: Srv,
    who: Who,
    from_s: Annotated[float | None, Query(alias="from", ge=0, le=1e12)] = None,
    to_s: Annotated[float | None, Query(alias="to", ge=0, le=1e12)] = None,
    tenant: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> accounts.AccountingPage:
    """Per-run accounting records in a window, paged; a tenant sees its own."""
    now = srv.clock()
    to = now if to_s is None else to_s
    start = max(0.0, to - 86_400.0) if from_s is None else from_s
    records = srv.store.accounting(start, to, _tenant(who, tenant), offset=offset, limit=limit + 1)
    return accounts.AccountingPage(
        from_s=start,
        to_s=to,
        records=[_out(r, now) for r in records[:limit]],
        next_offset=offset + limit if len(records) > limit else None,
    )


def load_rate_card(path: str) -> RateCard:
    """The card in the server's ``rate_card_path``; a statement without one is refused, saying so."""
    if not path:
        raise InputError("no rate card is configured (server setting rate_card_path)", source="rate card")
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ParseError(f"cannot read the rate card: {e}", source=path) from None
    return parse_rate_card(data, path)


@router.get("/statement", response_model=accounts.StatementOut)
def monthly_statement(
    srv: Srv,
    who: Who,
    month: Annotated[str, Query(min_length=7, max_length=7, description="YYYY-MM, UTC")],
    tenant: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
) -> accounts.StatementOut:
    """A month's usage priced by the rate card, per tenant."""
    start, end = month_window(month, "query.month")
    card = load_rate_card(srv.settings.rate_card_path)
    whose = _tenant(who, tenant)
    usage = [(u.tenant, u.gpu_model, u.pool, u.gpu_seconds) for u in srv.store.usage(start, end)]
    lines = statement([u for u in usage if whose is None or u[0] == whose], card)
    sums = totals(lines)
    return accounts.StatementOut(
        month=month,
        from_s=start,
        to_s=end,
        currency=card.currency,
        tenants=[
            accounts.TenantStatement(
                tenant=t,
                lines=[
                    accounts.StatementLineOut(
                        gpu_model=ln.gpu_model,
                        pool=ln.pool,
                        gpu_hours=ln.gpu_hours,
                        per_gpu_hour=ln.per_gpu_hour,
                        cost=ln.cost,
                    )
                    for ln in lines
                    if ln.tenant == t
                ],
                gpu_hours=hours,
                total=cost,
                unpriced=unpriced,
            )
            for t, (hours, cost, unpriced) in sorted(sums.items())
        ],
    )
