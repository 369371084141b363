"""The dashboard's own JSON endpoints under ``/ui/api``: what the REST API v1 does not give in one call.

They read the server's parts from ``request.app.state.server`` (the object ``create_app`` stores there) and
authenticate with its authenticator, so they take exactly the API's tokens. They reach the store only
through that object, never by import, and turn its records into the small views of ``views`` before any
payload is built: a tenant's token sees only its own jobs here as in the API.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request
from fastapi.responses import FileResponse, Response

from gpupool.domain.errors import NotFoundError
from gpupool.domain.states import JobState
from gpupool.web import simreport
from gpupool.web.fabricview import HostTelemetry, LiveCache, NodeView, RankView, fabric_live, fabric_static
from gpupool.web.views import JobView, host_payload, lending, pool_calendar, queue_payload

TelemetrySource = Callable[[], Mapping[str, HostTelemetry]]


def _server(request: Request) -> Any:
    # Typed Any on purpose: the web layer may not import the server or the store, only use what the app holds.
    return request.app.state.server


Srv = Annotated[Any, Depends(_server)]


def _tenant(srv: Srv, authorization: Annotated[str | None, Header()] = None) -> str | None:
    """The caller's tenant, or None for an admin; a missing or bad token is the API's own 401."""
    who = srv.auth.principal(authorization)
    if who.admin:
        return None
    tenant: str = who.tenant
    return tenant


Tenant = Annotated[str | None, Depends(_tenant)]


def _admin(tenant: Tenant) -> None:
    if tenant is not None:
        raise HTTPException(status_code=403, detail="this needs an admin token")


def _nodes(srv: Any) -> list[NodeView]:
    nodes, _ = srv.hosts.everything()
    return [NodeView(n.name, n.state.value, tuple(int(g) for g in n.health)) for n in nodes]


def _ranks(srv: Any, assignments: list[Any], cache: LiveCache) -> list[RankView]:
    """Ranks on hosts (from the server's host cache: what the agents are told), each with its job's tenant,
    pool and name (looked up once per job: they never change)."""
    missing = sorted({a.job_id for a in assignments} - cache.meta.keys())
    for r in srv.ops.specs(missing) if missing else ():
        cache.meta[r.job_id] = (r.spec.tenant, r.spec.pool, r.spec.name)
    out = []
    for a in assignments:
        tenant, pool, name = cache.meta.get(a.job_id, ("", "", ""))
        out.append(RankView(a.job_id, tenant, a.rank, a.host, tuple(a.gpus), pool, name))
    return out


def _job_view(rec: Any, expected_start_s: float | None = None) -> JobView:
    s = rec.spec
    return JobView(
        job_id=s.job_id,
        tenant=s.tenant,
        pool=s.pool,
        name=s.name,
        priority=int(s.priority),
        priority_name=s.priority.name.lower(),
        tasks=s.tasks,
        gpus_per_task=s.gpus_per_task,
        submit_time_s=s.submit_time_s,
        deadline_s=s.deadline_s,
        estimated_runtime_s=s.estimated_runtime_s,
        reason_code=rec.reason_code,
        reason=rec.reason,
        expected_start_s=expected_start_s,
    )


def build_router(telemetry: TelemetrySource | None = None) -> APIRouter:
    """The ``/ui/api`` routes; ``telemetry`` gives the latest GPU and port samples per host, if any are kept."""
    router = APIRouter(prefix="/ui/api")

    def samples() -> Mapping[str, HostTelemetry]:
        return {} if telemetry is None else telemetry()

    @router.get("/whoami")
    def whoami(tenant: Tenant) -> dict[str, Any]:
        """The dashboard's caller: tenant or admin."""
        return {"admin": tenant is None, "tenant": tenant}

    live_cache = LiveCache()

    @router.get("/fabric")
    def fabric(
        srv: Srv,
        tenant: Tenant,
        version: Annotated[int | None, Query()] = None,
        since: Annotated[str | None, Query(max_length=64)] = None,
        telemetry: bool = False,
    ) -> Response:
        """The fabric page: the static part when ``version`` is not the fabric's, and the live part, or only
        what changed in it since the digest ``since`` (nothing when nothing did). ``telemetry``: with each
        GPU's utilisation and temperature."""
        fab, key = srv.fabrics.current()
        if fab is None:
            raise NotFoundError("no fabric: none imported and no agent registered")
        # The cache's key starts with the stored fabric's version: reading the stored fabric itself would
        # parse the whole document (seconds at 1,000 hosts) just to learn that number.
        current = key[0] if key and isinstance(key[0], int) else 0
        nodes, assignments = srv.hosts.everything()
        tel = samples()
        # What the live part is made of, compared before it is rebuilt (~10x cheaper than building it): an open
        # tab polls every 2 s, and most polls find nothing changed. GPU telemetry changes with every beat.
        made_of = (
            key,
            [(n.name, n.state, n.health) for n in nodes],
            [(a.job_id, a.rank, a.host, a.gpus) for a in assignments],
            None if telemetry else [(h, t.ports) for h, t in tel.items()],
        )

        def build() -> dict[str, Any]:
            views = [NodeView(n.name, n.state.value, tuple(int(g) for g in n.health)) for n in nodes]
            ranks = _ranks(srv, assignments, live_cache)
            return fabric_live(fab, views, ranks, tel, tenant, live_cache.job_key, gpu_telemetry=telemetry)

        live, digest = live_cache.built((tenant, telemetry), None if telemetry else made_of, build)
        out: dict[str, Any] = {"version": current}
        if version != current:
            out["static"] = fabric_static(fab, current)
            since = None
        out.update(live_cache.answer(live, since, digest))
        # Serialised here: FastAPI's encoder walks every list item (~0.2 s for the whole payload at 1,000 hosts).
        return Response(json.dumps(out, separators=(",", ":")), media_type="application/json")

    @router.get("/hosts/{name}")
    def host(name: str, srv: Srv, tenant: Tenant) -> dict[str, Any]:
        """One host's detail for the dashboard: GPUs, ports, jobs."""
        fab, _ = srv.fabrics.current()
        node = next((n for n in _nodes(srv) if n.name == name), None)
        if node is None and (fab is None or not fab.has_host(name)):
            raise NotFoundError(f"host {name!r} is neither in the fabric nor registered")
        ranks = _ranks(srv, srv.hosts.everything()[1], live_cache)
        out = host_payload(fab, name, node, ranks, samples().get(name), tenant)
        # Why it is drained: the reason given with the last drain (the node's audit trail keeps it).
        if node is not None and node.state == "drained":
            drains = srv.store.list_audit(subject=f"node/{name}", action="node.drained", limit=100_000)
            out["drain_reason"] = str(drains[-1].data.get("reason", "")) if drains else ""
        return out

    @router.get("/queue")
    def queue(srv: Srv, tenant: Tenant) -> dict[str, Any]:
        """The queue page: pending jobs with why each waits."""
        pending = srv.store.list_jobs(tenant=tenant, state=JobState.PENDING, pool=None, limit=100_000)
        now = float(srv.clock())
        order = srv.queue.current()  # the policy's order as of the leader's last cycle (GET /v1/queue's too)
        eta = srv.eta.expected_start_s  # the server's projection of when each would start (server/eta.py)
        views = [_job_view(r, eta(r.job_id)) for r in pending]
        jobs = queue_payload(views, now, tenant, order.positions)
        return {"now_s": now, "policy": order.policy, "as_of_s": order.as_of_s, "jobs": jobs}

    @router.get("/jobs/{job_id}/placement")
    def placement(job_id: str, srv: Srv, tenant: Tenant) -> dict[str, Any]:
        """Where a job's ranks run, for the dashboard."""
        rec = srv.store.get_job(job_id)
        if tenant is not None and rec.spec.tenant != tenant:
            raise NotFoundError(f"job {job_id!r} is not stored")
        live = [{"rank": a.rank, "host": a.host, "gpus": list(a.gpus)} for a in srv.ops.job_assignments(job_id)]
        if live:
            return {"id": job_id, "live": True, "tasks": live}
        # A finished job's allocation is gone; its last placement is in the audit log.
        last: list[dict[str, Any]] = []
        for e in srv.store.list_audit(subject=f"job/{job_id}", limit=100_000):
            tasks = e.data.get("tasks") if e.action == "job.placed" else None
            if isinstance(tasks, list):
                last = [
                    {"rank": i, "host": str(t.get("host", "")), "gpus": [int(g) for g in t.get("gpus", [])]}
                    for i, t in enumerate(tasks)
                    if isinstance(t, dict)
                ]
        return {"id": job_id, "live": False, "tasks": last}

    @router.get("/pools")
    def pools(srv: Srv, tenant: Tenant) -> dict[str, Any]:
        """The pools page: capacity, use and calendars."""
        now = float(srv.clock())
        used: dict[tuple[str, str], float] = defaultdict(float)
        for state in (JobState.PLACED, JobState.RUNNING):
            for r in srv.store.list_jobs(tenant=tenant, state=state, pool=None, limit=100_000):
                share = 1.0 if r.spec.share is None else r.spec.share.milli_gpu / 1000.0
                used[(r.spec.tenant, r.spec.pool)] += r.spec.tasks * r.spec.gpus_per_task * share
        quotas = [(q.tenant, q.pool, q.gpu_model, q.nominal_gpus, q.cohort) for q in srv.store.list_quotas(tenant)]
        return {
            "now_s": now,
            "pools": [
                {
                    "name": p.name,
                    "version": p.version,
                    "default_pool": p.calendar.default_pool,
                    "timezone": p.calendar.timezone,
                    "rules": pool_calendar(p.calendar, now),
                }
                for p in srv.store.list_pools()
            ],
            "quotas": lending(quotas, used, tenant),
        }

    @router.get("/sim", dependencies=[Depends(_admin)])
    def sim(path: Annotated[str, Query(min_length=1, max_length=4096)]) -> dict[str, Any]:
        """A simulator report (a run folder's report.json) for the dashboard."""
        return simreport.read_report(path)

    @router.get("/sim/plot", dependencies=[Depends(_admin)], response_class=FileResponse)
    def sim_plot(
        path: Annotated[str, Query(min_length=1, max_length=4096)], name: Annotated[str, Query(max_length=256)]
    ) -> FileResponse:
        """A simulator run's plot (PNG)."""
        return FileResponse(simreport.plot_path(path, name), media_type="image/png")

    return router
