"""The operator's routes beyond creating: change and delete tenants, list and delete quotas, delete pools, and
read a pool's calendar at a time (``gpupool admin tenants|quotas|pools|calendars``).

Every change needs an admin token, is one store use case (one short transaction that writes its audit event,
naming the admin who made it) and wakes the scheduling loop, which reads tenants, quotas and calendars at its
next cycle. Creating tenants, setting quotas and putting pools are ``server.routes``' (the API had them first).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpupool.schemas import admin, api
from gpupool.server.auth import actor
from gpupool.server.routes import Admin, Srv, quota_out

router = APIRouter(prefix="/v1")

Name = Annotated[str, Query(min_length=1, max_length=128)]


@router.patch("/tenants/{name}", response_model=api.TenantOut)
def update_tenant(name: str, body: admin.TenantPatch, srv: Srv, who: Admin) -> api.TenantOut:
    """Change a tenant's fair-share weight (admin); audited as ``tenant.weight``."""
    t = srv.store.set_tenant_weight(name, body.weight, actor(who))
    srv.loop.wake()
    return api.TenantOut(name=t.name, weight=t.weight)


@router.delete("/tenants/{name}", response_model=admin.DeletedOut)
def delete_tenant(name: str, srv: Srv, who: Admin) -> admin.DeletedOut:
    """Delete a tenant that never had a job, with its quotas and tokens (admin); one with jobs is a 409:
    its history names it (set its quotas to 0 and revoke its tokens instead)."""
    srv.store.delete_tenant(name, actor(who))
    srv.loop.wake()
    return admin.DeletedOut(kind="tenant", name=name)


@router.get("/quotas", response_model=api.QuotaList)
def list_all_quotas(srv: Srv, who: Admin) -> api.QuotaList:
    """Every tenant's quotas (admin), by tenant, pool and GPU model."""
    return api.QuotaList(quotas=[quota_out(q) for q in srv.store.list_quotas()])


@router.delete("/tenants/{tenant}/quotas/{pool}", response_model=admin.QuotaKeyOut)
def delete_quota(
    tenant: str, pool: str, srv: Srv, who: Admin, gpu_model: Annotated[str, Query(max_length=128)] = ""
) -> admin.QuotaKeyOut:
    """Delete a tenant's quota in a pool (for one GPU model; "" = any model) (admin). Without a quota the
    tenant is bound by no nominal share there: it runs on what is free, like a tenant with no quota at all."""
    srv.store.delete_quota(tenant, pool, gpu_model, actor(who))
    srv.fits.invalidate()  # the pools in use may be fewer: a cached one must not let a job in (server.feasible)
    srv.loop.wake()
    return admin.QuotaKeyOut(tenant=tenant, pool=pool, gpu_model=gpu_model)


@router.delete("/pools/{name}", response_model=admin.DeletedOut)
def delete_pool(name: str, srv: Srv, who: Admin) -> admin.DeletedOut:
    """Delete a pool and its calendar (admin); one that quotas still name is a 409."""
    srv.store.delete_pool(name, actor(who))
    srv.fits.invalidate()
    srv.loop.wake()
    return admin.DeletedOut(kind="pool", name=name)


@router.get("/pools/{name}/calendar", response_model=admin.CalendarOut)
def pool_calendar(
    name: str, srv: Srv, who: Admin, at: Annotated[float | None, Query(ge=0, le=1e11)] = None
) -> admin.CalendarOut:
    """A pool's calendar read at ``at`` (seconds since the epoch; default now): each rule's share then,
    since when, and when the next change comes (admin)."""
    p = srv.store.get_pool(name)
    now = srv.clock() if at is None else at
    return admin.calendar_out(name, p.version, p.calendar, now)
