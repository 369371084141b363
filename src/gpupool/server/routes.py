"""REST API v1 routes for tenants and operators: jobs, nodes, fabric, pools, tenants, quotas, tokens, usage.

Each handler authenticates, checks the principal may act, calls one store use case (one short transaction)
and wakes the scheduling loop when the queue changed. A tenant sees only its own jobs: another tenant's job
is a 404, exactly like a job that does not exist, so ids leak nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from gpupool.domain.containers import container_to_json
from gpupool.domain.errors import GpupoolError, InputError, NotFoundError
from gpupool.domain.events import HealthGrade, NodeLabelled
from gpupool.domain.jobs import DependencyKind
from gpupool.domain.sharing import Quota
from gpupool.domain.states import JobState, NodeState
from gpupool.fabric import jsonio
from gpupool.schemas import accounts, api
from gpupool.server.agentlogs import AgentUnreachableError, LogFetcher, log_key
from gpupool.server.auth import actor
from gpupool.server.convert import array_elements, attempt_out, job_out, to_spec
from gpupool.server.core import Server
from gpupool.server.poolview import pool_states
from gpupool.store import JobRecord, NodeRecord, Principal
from gpupool.store.server_ops import Submission, assignment_id

router = APIRouter(prefix="/v1")


class ForbiddenError(GpupoolError):
    code = "FORBIDDEN"


# Dependencies are async so that they run on the event loop: a sync one costs a trip through the threadpool
# on every request, which at a few thousand requests a second is most of a core.
async def server(request: Request) -> Server:
    srv: Server = request.app.state.server
    return srv


Srv = Annotated[Server, Depends(server)]


async def principal(srv: Srv, authorization: Annotated[str | None, Header()] = None) -> Principal:
    found = srv.auth.bootstrap(authorization)
    if found is not None:
        return found
    return await run_in_threadpool(srv.auth.principal, authorization)  # a store read: not on the event loop


Who = Annotated[Principal, Depends(principal)]


async def admin(who: Who) -> Principal:
    if not who.admin:
        raise ForbiddenError("this needs an admin token")
    return who


Admin = Annotated[Principal, Depends(admin)]


def _own_job(srv: Server, who: Principal, job_id: str) -> JobRecord:
    rec = srv.store.get_job(job_id)
    if not who.admin and rec.spec.tenant != who.tenant:
        raise NotFoundError(f"job {job_id!r} is not stored")
    return rec


# -- jobs ------------------------------------------------------------------------------------------------------
# The submit path is the API's hottest. ``SubmitFastPath`` (an ASGI middleware) answers JSON submits before
# FastAPI's routing and dependency solving, which cost more CPU than the submit itself; this route serves
# the rest (another content type) and documents the operation. Both end in ``accept_submit``, which answers
# with the JSON built once, not validated again against the response model.
_SUBMIT_HEADERS = {
    "parameters": [
        {"name": "authorization", "in": "header", "required": False, "schema": {"type": "string"}},
        {
            "name": "idempotency-key",
            "in": "header",
            "required": False,
            "schema": {"type": "string", "minLength": 1, "maxLength": 256},
        },
    ]
}


@router.post(
    "/jobs",
    response_model=api.SubmitOut,
    status_code=201,
    responses={200: {"model": api.SubmitOut, "description": "the idempotency key's earlier job"}},
    openapi_extra=_SUBMIT_HEADERS,
)
async def submit_job(body: api.JobSubmit, request: Request) -> Response:
    """Submit a job or a job array: checked against the spec and the cluster, then queued."""
    headers = request.headers
    srv: Server = request.app.state.server
    return await accept_submit(srv, body, headers.get("authorization"), headers.get("idempotency-key"))


async def accept_submit(
    srv: Server, body: api.JobSubmit, authorization: str | None, header_key: str | None
) -> Response:
    """Authenticate, check, queue for the group commit and answer once committed: 201 new, 200 the key's job."""
    who = srv.auth.bootstrap(authorization)
    if who is None:
        who = await run_in_threadpool(srv.auth.principal, authorization)  # a store read: not on the event loop
    if header_key is not None and not 0 < len(header_key) <= 256:
        raise InputError("an Idempotency-Key header has 1..256 characters", source="header.idempotency-key")
    if who.admin:
        if body.tenant is None:
            raise InputError("an admin submits on behalf of a tenant: give 'tenant'", source="body.tenant")
        tenant = body.tenant
    else:
        if body.tenant is not None and body.tenant != who.tenant:
            raise InputError("a tenant token submits for its own tenant only", source="body.tenant")
        assert who.tenant is not None
        tenant = who.tenant
    now = srv.clock()
    job_id = f"j-{int(now * 1000):x}-{secrets.token_hex(4)}"
    spec = to_spec(body, job_id, tenant, now)
    if not srv.fits.cached_ok(spec):
        # Refused when it can never run (an undefined pool, labels or a GPU model no node has, more GPUs than
        # the nodes have), checked against a fresh read first: else it would wait forever.
        await run_in_threadpool(srv.fits.check, spec)
    if body.after:  # the jobs it names, resolved (arrays to their elements); a name not stored is a 422
        wanted = [(DependencyKind(d.kind), d.jobs) for d in body.after]
        after = await run_in_threadpool(srv.store.resolve_dependencies, tenant, wanted, "body.after")
        spec = dataclasses.replace(spec, after=after)
    elements = array_elements(spec, body.array, srv.settings.max_array_size) if body.array else ()
    key = header_key or body.idempotency_key
    container = body.container()
    launch: dict[str, object] = {"container": container_to_json(container)} if container is not None else {}
    if body.slurm_env:
        launch["slurm"] = True
    first = elements[0] if elements else spec
    sub = Submission(first, tuple(body.command), body.env, key, actor(who), elements, launch)
    # Awaited, not blocked on: the writer thread commits this with whatever else was queued (group commit).
    rec, created = await asyncio.wrap_future(srv.submits.enqueue(sub))
    if created:
        srv.metrics.submits.inc(len(sub.jobs))  # the writer told the loop (a submit moves no node or assignment)
    out = api.SubmitOut(job=job_out(rec), created=created, array_id=rec.spec.array_id or None, jobs=len(sub.jobs))
    return Response(out.model_dump_json(), status_code=201 if created else 200, media_type="application/json")


@router.post("/jobs/{job_id}/cancel", response_model=api.JobOut)
def cancel_job(job_id: str, srv: Srv, who: Who) -> api.JobOut:
    """Cancel a job: pending ones leave the queue, running ones are stopped on their nodes."""
    for _ in range(5):
        rec = _own_job(srv, who, job_id)
        try:
            if rec.state is JobState.PLACED:
                # Placed -> cancelled is not an edge: it goes back to the queue, then out of it.
                rec = srv.store.release_allocation(job_id, rec.version, actor(who), reason="cancel requested")
            if rec.state in (JobState.PENDING, JobState.RUNNING):
                rec = srv.store.transition_job(job_id, rec.version, JobState.CANCELLED, "cancelled", actor(who))
            srv.loop.wake()
            return job_out(rec)
        except GpupoolError as e:
            if getattr(e, "code", "") != "STALE_VERSION":
                raise
    return job_out(_own_job(srv, who, job_id))


def _own_array(srv: Server, who: Principal, array_id: str) -> api.ArrayOut:
    a = srv.store.array_summary(array_id)
    if not who.admin and a.tenant != who.tenant:
        raise NotFoundError(f"array {array_id!r} is not stored")
    return api.ArrayOut(array_id=a.array_id, tenant=a.tenant, size=a.size, cap=a.cap, states=a.states)


@router.get("/arrays/{array_id}", response_model=api.ArrayOut)
def get_array(array_id: str, srv: Srv, who: Who) -> api.ArrayOut:
    """An array as one: its size, its cap and how many elements are in each state (list them with
    ``GET /v1/jobs?array=ID``)."""
    return _own_array(srv, who, array_id)


@router.post("/arrays/{array_id}/cancel", response_model=api.ArrayOut)
def cancel_array(array_id: str, srv: Srv, who: Who) -> api.ArrayOut:
    """Cancel every element still pending, placed or running, in one transaction."""
    _own_array(srv, who, array_id)
    for attempt in range(5):  # the loop may place an element meanwhile: read again and cancel what is left
        try:
            srv.store.cancel_array(array_id, actor(who))
            break
        except GpupoolError as e:
            if getattr(e, "code", "") != "STALE_VERSION" or attempt == 4:
                raise
    srv.loop.wake()
    return _own_array(srv, who, array_id)


@router.get("/jobs/{job_id}/events", response_model=api.EventList)
def job_events(job_id: str, srv: Srv, who: Who) -> api.EventList:
    """The job's audit events, oldest first."""
    _own_job(srv, who, job_id)
    events = srv.store.list_audit(subject=f"job/{job_id}", limit=10_000)
    return api.EventList(
        events=[api.EventOut(id=e.id, at_s=e.at_s, actor=e.actor, action=e.action, data=e.data) for e in events]
    )


@router.get("/jobs/{job_id}/attempts", response_model=api.AttemptList)
def job_attempts(job_id: str, srv: Srv, who: Who) -> api.AttemptList:
    """Every run of the job (retries, requeues), first first, with how each ended."""
    _own_job(srv, who, job_id)
    return api.AttemptList(job_id=job_id, attempts=[attempt_out(a) for a in srv.store.attempts(job_id)])


@router.get("/jobs/{job_id}/why", response_model=api.WhyOut)
def why_pending(job_id: str, srv: Srv, who: Who) -> api.WhyOut:
    """Why a job waits: the scheduler's reason code and sentence from its last cycle."""
    rec = _own_job(srv, who, job_id)
    deadline = detail = finish = None
    if rec.spec.deadline_s is not None and rec.state is JobState.PENDING:
        answer = srv.loop.admission(rec.spec)
        if answer is not None:
            deadline, detail = answer.verdict.value, answer.message
            finish = answer.earliest_finish_s if answer.earliest_finish_s != float("inf") else None
        elif rec.reason_code == "deadline_infeasible":
            deadline = "infeasible"  # no cycle ran here yet (a standby): the leader's refusal is stored
    return api.WhyOut(
        id=job_id,
        state=rec.state.value,
        reason_code=rec.reason_code,
        reason=rec.reason,
        deadline=deadline,
        deadline_detail=detail,
        earliest_finish_s=finish,
    )


def _placement_of(srv: Server, job_id: str, rank: int) -> tuple[str, str]:
    """(assignment id, host) of ``rank``'s latest placement, from the live allocation or the audit log.

    Every job state change bumps the version by one and writes one audit event, and a placement's number is
    the version it creates: counting the job's state events recovers it after the allocation is gone.
    """
    for a in srv.ops.job_assignments(job_id):
        if a.rank == rank:
            return a.assignment_id, a.host
    version, found = 1, None
    for e in srv.store.list_audit(subject=f"job/{job_id}", limit=100_000):
        if e.action.startswith("job.") and e.action != "job.submitted":
            version += 1
            tasks = e.data.get("tasks") if e.action == "job.placed" else None
            if isinstance(tasks, list) and 0 <= rank < len(tasks):
                found = (assignment_id(job_id, version, rank), str(tasks[rank]["host"]))
    if found is None:
        raise NotFoundError(f"job {job_id} has no rank {rank} that was ever placed")
    return found


@dataclass(frozen=True, slots=True)
class _LogSource:
    host: str
    aid: str
    base_url: str
    key: str


def _log_source(srv: Server, who: Principal, job_id: str, rank: int) -> _LogSource:
    """Where ``rank``'s log is and the key to ask for it with: store reads only (the thread pool's part)."""
    _own_job(srv, who, job_id)
    aid, host = _placement_of(srv, job_id, rank)
    agent = srv.ops.agent(host)
    if not agent.agent_url:
        raise AgentUnreachableError(f"node {host} serves no logs (its agent gave no URL)")
    stored = srv.ops.node_token_hash(host)
    if stored is None:
        raise AgentUnreachableError(f"node {host} has no node token: its agent has not registered")
    return _LogSource(host, aid, agent.agent_url, log_key(stored[1]))


@router.get(
    "/jobs/{job_id}/logs",
    response_model=api.LogsOut,
    responses={502: {"model": api.ErrorOut}, 503: {"model": api.ErrorOut}},
)
async def job_logs(
    job_id: str,
    request: Request,
    srv: Srv,
    who: Who,
    stream: Literal["stdout", "stderr"] = "stdout",
    tail: Annotated[int, Query(ge=1, le=100_000)] = 200,
    rank: Annotated[int, Query(ge=0, le=4096)] = 0,
    offset: Annotated[int | None, Query(ge=0, le=1 << 62)] = None,
) -> api.LogsOut:
    """The last ``tail`` lines of a rank's stdout or stderr, or (``offset``) what its log holds from that byte
    on, at most a MiB; ``next_offset`` is where to ask next (``gpupool logs -f`` polls with it)."""
    src = await run_in_threadpool(_log_source, srv, who, job_id, rank)
    params: dict[str, str | int] = {"stream": stream, **({"tail": tail} if offset is None else {"offset": offset})}
    fetcher: LogFetcher = request.app.state.log_fetcher
    got = await fetcher.fetch(src.host, src.base_url, src.key, src.aid, params)
    if got.status == 404:
        raise NotFoundError(f"the agent of {src.host} has no {stream} for {src.aid}")
    if got.status != 200:
        raise AgentUnreachableError(f"the agent of {src.host} answered {got.status}: {got.text.strip()[:200]}")
    return api.LogsOut(job_id=job_id, rank=rank, stream=stream, text=got.text, next_offset=got.next_offset)


# -- nodes and fabric ------------------------------------------------------------------------------------------
@router.get("/nodes", response_model=api.NodeList)
def list_nodes(srv: Srv, who: Who) -> api.NodeList:
    """Every registered node with its state, GPUs, labels and last heartbeat."""
    agents = {a.host: a for a in srv.ops.agents()}
    now = srv.clock()
    out = []
    listed = srv.store.list_nodes()
    held = srv.store.gpus_held()
    reasons = srv.store.node_reasons([n.name for n in listed if n.state is not NodeState.UP])
    for n in listed:
        a = agents.get(n.name)
        inv: dict[str, Any] = a.inventory if a is not None else {}
        grades = [g.name.lower() for g in n.health]
        gpus = [
            api.GpuOut(
                index=int(g["index"]),
                model=str(g.get("model", "")),
                memory_mib=int(g.get("memory_mib", 0)),
                health=grades[int(g["index"])] if int(g["index"]) < len(grades) else "unknown",
            )
            for g in inv.get("gpus", [])
        ]
        hcas = [
            api.HcaOut(name=str(h.get("name", "")), guid=str(h.get("guid", "")), rate_gbps=float(h.get("rate_gbps", 0)))
            for h in inv.get("hcas", [])
        ]
        age = None if n.last_heartbeat_s is None else max(0.0, now - n.last_heartbeat_s)
        bad = sum(1 for g in n.health if g is HealthGrade.BAD)
        used = held.get(n.name, 0.0)
        free = max(0.0, n.gpu_count - bad - used) if n.state is NodeState.UP else 0.0
        out.append(
            api.NodeOut(
                name=n.name,
                state=n.state.value,
                gpu_model=n.gpu_model,
                gpu_count=n.gpu_count,
                labels=dict(n.labels),
                gpus=gpus,
                hcas=hcas,
                last_heartbeat_s=n.last_heartbeat_s,
                heartbeat_age_s=age,
                agent_url=a.agent_url if a is not None else "",
                agent_labels=dict(n.agent_labels),
                admin_labels=dict(n.admin_labels),
                gpus_allocated=used,
                gpus_free=free,
                state_reason=reasons.get(n.name, ""),
            )
        )
    return api.NodeList(nodes=out)


def _labels_out(n: NodeRecord) -> api.LabelsOut:
    return api.LabelsOut(
        node=n.name, labels=dict(n.labels), agent_labels=dict(n.agent_labels), admin_labels=dict(n.admin_labels)
    )


@router.get("/nodes/{name}/labels", response_model=api.LabelsOut)
def get_labels(name: str, srv: Srv, who: Who) -> api.LabelsOut:
    """A node's labels: its agent's, the admins', and the merged set the scheduler matches."""
    return _labels_out(srv.store.get_node(name))


@router.patch("/nodes/{name}/labels", response_model=api.LabelsOut)
def set_labels(name: str, body: api.LabelsIn, srv: Srv, who: Admin) -> api.LabelsOut:
    """Set and remove admin labels (audited as ``node.labels``); the scheduler sees them at its next cycle."""
    both = sorted(set(body.set) & set(body.remove))
    if both:
        raise InputError(f"label {both[0]} is both set and removed", source="body")
    n = srv.store.set_node_labels(name, body.set, body.remove, actor(who))
    srv.fits.invalidate()
    srv.loop.deliver([NodeLabelled(n.name, n.labels, srv.clock())])  # after the commit, as every live event
    return _labels_out(n)


@router.post("/nodes/{name}/drain", response_model=api.NodeList)
def drain_node(name: str, srv: Srv, who: Admin, body: api.DrainIn | None = None) -> api.NodeList:
    """Drain a node (admin): no new placements; running work may finish."""
    srv.store.drain_node(name, (body or api.DrainIn()).reason, actor(who))
    srv.loop.wake()
    return list_nodes(srv, who)


@router.post("/nodes/{name}/undrain", response_model=api.NodeList)
def undrain_node(name: str, srv: Srv, who: Admin) -> api.NodeList:
    """Return a drained node to service (admin)."""
    srv.store.undrain_node(name, actor(who))
    srv.loop.wake()
    return list_nodes(srv, who)


@router.get("/fabric", response_model=api.FabricOut, responses={404: {"model": api.ErrorOut}})
def get_fabric(srv: Srv, who: Who) -> api.FabricOut:
    """The stored fabric topology (switches, hosts, links) as JSON."""
    fabric, _ = srv.fabrics.current()
    if fabric is None:
        raise NotFoundError("no fabric: none imported and no agent registered")
    stored = srv.store.get_fabric()
    return api.FabricOut(version=0 if stored is None else stored.version, document=jsonio.to_dict(fabric))


@router.put("/fabric", response_model=api.FabricOut)
def put_fabric(document: dict[str, Any], srv: Srv, who: Admin) -> api.FabricOut:
    """Store a new fabric topology (admin); the scheduler uses it from its next cycle."""
    fabric = jsonio.from_dict(document, source="request body")
    version = srv.store.put_fabric(fabric, actor(who))
    srv.loop.wake()
    return api.FabricOut(version=version, document=jsonio.to_dict(fabric))


# -- pools, tenants, quotas, tokens ------------------------------------------------------------------------------
@router.get("/pools", response_model=api.PoolList)
def list_pools(srv: Srv, who: Who) -> api.PoolList:
    """The pools with their calendars, and as of the leader's last cycle what each owns, uses, lends and borrows."""
    stored = {p.name: p for p in srv.store.list_pools()}
    run = srv.loop.last_run
    states = pool_states(run) if run is not None else {}
    out = []
    for name in sorted(set(stored) | set(states)):
        p, st = stored.get(name), states.get(name)
        live: dict[str, Any] = {}
        if st is not None and run is not None:
            live = {"gpus": st.gpus, "gpus_used": st.used, "gpus_lent": st.lent, "gpus_borrowed": st.borrowed,
                    "share": st.share, "share_since_s": st.share_since_s, "next_change_s": st.next_change_s,
                    "as_of_s": run.request.now_s}  # fmt: skip
        text, version = ("", 0) if p is None else (p.calendar_toml, p.version)
        out.append(api.PoolOut(name=name, calendar_toml=text, version=version, **live))
    return api.PoolList(pools=out)


@router.put("/pools/{name}", response_model=api.PoolOut)
def put_pool(name: str, body: api.PoolIn, srv: Srv, who: Admin) -> api.PoolOut:
    """Create or replace a pool and its calendar (admin)."""
    p = srv.store.put_pool(name, body.calendar_toml, actor(who), expected_version=body.expected_version)
    srv.fits.invalidate()  # the pools in use changed: a cached "pools are not in use" must not let a job in
    srv.loop.wake()
    return api.PoolOut(name=p.name, calendar_toml=p.calendar_toml, version=p.version)


@router.get("/tenants", response_model=api.TenantList)
def list_tenants(srv: Srv, who: Who) -> api.TenantList:
    """The tenants and their fair-share weights."""
    rows = [t for t in srv.store.list_tenants() if who.admin or t.name == who.tenant]
    return api.TenantList(tenants=[api.TenantOut(name=t.name, weight=t.weight) for t in rows])


@router.post("/tenants", response_model=api.TenantOut, status_code=201)
def create_tenant(body: api.TenantIn, srv: Srv, who: Admin) -> api.TenantOut:
    """Create a tenant (admin)."""
    t = srv.store.create_tenant(body.name, actor(who), weight=body.weight)
    return api.TenantOut(name=t.name, weight=t.weight)


@router.get("/tenants/{tenant}/quotas", response_model=api.QuotaList)
def list_quotas(tenant: str, srv: Srv, who: Who) -> api.QuotaList:
    """A tenant's quotas per pool and GPU model."""
    if not who.admin and tenant != who.tenant:
        raise NotFoundError(f"tenant {tenant!r} is not stored")
    return api.QuotaList(quotas=[quota_out(q) for q in srv.store.list_quotas(tenant)])


@router.put("/tenants/{tenant}/quotas", response_model=api.QuotaOut)
def set_quota(tenant: str, body: api.QuotaIn, srv: Srv, who: Admin) -> api.QuotaOut:
    """Set a tenant's quota in a pool (admin): nominal GPUs, cohort, borrowing and lending limits."""
    q = Quota(
        tenant=tenant,
        pool=body.pool,
        nominal_gpus=body.nominal_gpus,
        borrowing_limit_gpus=body.borrowing_limit_gpus,
        lending_limit_gpus=body.lending_limit_gpus,
        cohort=body.cohort,
        gpu_model=body.gpu_model,
    )
    srv.store.set_quota(q, actor(who))
    srv.fits.invalidate()
    srv.loop.wake()
    return quota_out(q)


def quota_out(q: Quota) -> api.QuotaOut:
    return api.QuotaOut(
        tenant=q.tenant,
        pool=q.pool,
        gpu_model=q.gpu_model,
        nominal_gpus=q.nominal_gpus,
        borrowing_limit_gpus=q.borrowing_limit_gpus,
        lending_limit_gpus=q.lending_limit_gpus,
        cohort=q.cohort,
    )


# -- usage -----------------------------------------------------------------------------------------------------
@router.get("/usage", response_model=accounts.UsageOut)
def usage(
    srv: Srv,
    who: Who,
    from_s: Annotated[float | None, Query(alias="from", ge=0, le=1e12)] = None,
    to_s: Annotated[float | None, Query(alias="to", ge=0, le=1e12)] = None,
) -> accounts.UsageOut:
    """GPU-seconds per tenant, GPU model and pool in a time window."""
    to = srv.clock() if to_s is None else to_s
    start = max(0.0, to - 86_400.0) if from_s is None else from_s
    rows = [u for u in srv.store.usage(start, to) if who.admin or u.tenant == who.tenant]
    return accounts.UsageOut(
        from_s=start,
        to_s=to,
        usage=[
            accounts.UsageRow(tenant=u.tenant, gpu_model=u.gpu_model, pool=u.pool, gpu_seconds=u.gpu_seconds)
            for u in rows
        ],
    )
