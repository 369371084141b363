"""Reading jobs: ``GET /v1/jobs`` (filtered, searched, sorted, paged), ``GET /v1/jobs/{id}`` (with its ranks) and
``GET /v1/queue`` (the pending jobs in the order the configured policy takes them).

A tenant sees only its own jobs, whatever it asks for: its ``tenant`` parameter is replaced by its own.
Positions in the queue are over every tenant's pending jobs (a tenant learns how many wait before its job,
never whose). A bad parameter is a 422 naming it (``detail[0].loc``: ``["query", name]``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from gpupool.domain.errors import InputError
from gpupool.domain.states import JobState
from gpupool.schemas import api
from gpupool.schemas.jobs import JobSortName, RankState
from gpupool.server.convert import Run, job_out
from gpupool.server.core import Server
from gpupool.server.routes import Srv, Who, _own_job
from gpupool.store.joblist import MAX_PAGE, JobQuery, JobSort, RankRecord

router = APIRouter(prefix="/v1")

Epoch = Annotated[float | None, Query(ge=0, le=1e12, description="seconds since the epoch (UTC)")]
Name = Annotated[str | None, Query(min_length=1, max_length=128)]


@router.get("/jobs", response_model=api.JobList)
def list_jobs(
    srv: Srv,
    who: Who,
    state: Annotated[list[api.StateName] | None, Query(description="any of these states (repeat it)")] = None,
    active: Annotated[
        bool | None, Query(description="true: pending, placed, running, or ranks still releasing; false: the rest")
    ] = None,
    tenant: Name = None,
    pool: Name = None,
    array: Name = None,
    q: Annotated[
        str | None, Query(min_length=1, max_length=256, description="a part of the name (any case), or an id's start")
    ] = None,
    submitted_after: Epoch = None,
    submitted_before: Epoch = None,
    sort: Annotated[JobSortName, Query(description="default: active first, newest first")] = "default",
    order: Annotated[Literal["asc", "desc"] | None, Query(description="default: the sort's own")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0,
) -> api.JobList:
    """Jobs, one page at a time: ``total`` counts every match; a tenant sees its own, an admin every tenant's."""
    if not who.admin:
        tenant = who.tenant  # a tenant lists its own jobs, whatever it asks for
    if submitted_after is not None and submitted_before is not None and submitted_after >= submitted_before:
        raise InputError("submitted_after must be before submitted_before", source="query.submitted_after")
    query = JobQuery(
        states=frozenset(JobState(s) for s in state or ()),
        active=active,
        tenant=tenant,
        pool=pool,
        array_id=array,
        text=q,
        submitted_after=submitted_after,
        submitted_before=submitted_before,
        sort=JobSort(sort),
        descending=None if order is None else order == "desc",
        limit=limit,
        offset=offset,
    )
    page = srv.store.job_page(query)
    now, positions, eta = srv.clock(), srv.queue.current().positions, srv.eta.expected_start_s
    jobs = [
        job_out(
            j.record,
            Run(j.started_s, j.ended_s, j.exit_code, now),
            positions.get(j.record.job_id),
            eta(j.record.job_id) if j.record.state is JobState.PENDING else None,
        )
        for j in page.jobs
    ]
    return api.JobList(jobs=jobs, total=page.total, offset=offset)


def _rank_state(r: RankRecord) -> RankState:
    if r.releasing_s is not None:
        return "releasing"
    if r.lost:
        return "lost"
    if r.exited_s is not None:
        return "exited"
    if r.started_s is not None:
        return "started"
    return "launched" if r.launched_s is not None else "placed"


def _ranks(srv: Server, job_id: str) -> list[api.RankOut]:
    """The latest placement's ranks from their rows; once the job is over they are gone, and its placement is
    read from the audit log (host and GPUs only)."""
    rows = srv.store.job_ranks(job_id)
    if rows:
        return [
            api.RankOut(
                rank=r.rank,
                host=r.host,
                gpus=list(r.gpus),
                state=_rank_state(r),
                exit_code=r.exit_code,
                placed_s=r.placed_s,
                launched_s=r.launched_s,
                started_s=r.started_s,
                exited_s=r.exited_s,
                releasing_s=r.releasing_s,
            )
            for r in rows
        ]
    last: list[api.RankOut] = []
    for e in srv.store.list_audit(subject=f"job/{job_id}", limit=100_000):
        tasks = e.data.get("tasks") if e.action == "job.placed" else None
        if isinstance(tasks, list):
            last = [
                api.RankOut(
                    rank=i, host=str(t.get("host", "")), gpus=[int(g) for g in t.get("gpus", [])], state="ended"
                )
                for i, t in enumerate(tasks)
                if isinstance(t, dict)
            ]
    return last


@router.get("/jobs/{job_id}", response_model=api.JobDetail)
def get_job(job_id: str, srv: Srv, who: Who) -> api.JobDetail:
    """One job: its spec, state, current run (start, end, exit code), queue position and ranks."""
    rec = _own_job(srv, who, job_id)
    run = next((a for a in srv.store.attempts(job_id) if a.attempt == rec.attempt), None)
    facts = (
        Run(None, None, None, srv.clock())
        if run is None
        else Run(run.started_s, run.ended_s, run.exit_code, srv.clock())
    )
    expected = srv.eta.expected_start_s(job_id) if rec.state is JobState.PENDING else None
    out = job_out(rec, facts, srv.queue.current().positions.get(job_id), expected)
    ranks = _ranks(srv, job_id) if rec.attempt else []
    return api.JobDetail(**out.model_dump(), ranks=ranks)


@router.get("/queue", response_model=api.QueueOut)
def queue(
    srv: Srv,
    who: Who,
    tenant: Name = None,
    pool: Name = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0,
) -> api.QueueOut:
    """Pending jobs in the order the configured policy takes them, as of the leader's last cycle (``as_of_s``);
    on a standby, or before the first cycle, in submit order with no positions (``as_of_s`` null)."""
    if not who.admin:
        tenant = who.tenant
    snap = srv.queue.current()
    now = srv.clock()
    if snap.as_of_s is None:
        page = srv.store.job_page(
            JobQuery(
                states=frozenset({JobState.PENDING}),
                tenant=tenant,
                pool=pool,
                sort=JobSort.SUBMITTED,
                descending=False,
                limit=limit,
                offset=offset,
            )
        )
        eta = srv.eta.expected_start_s
        jobs = [job_out(j.record, Run(None, None, None, now), None, eta(j.record.job_id)) for j in page.jobs]
        return api.QueueOut(policy=snap.policy, as_of_s=None, jobs=jobs, total=page.total, offset=offset)
    shown = [j for j in snap.jobs if (tenant is None or j.tenant == tenant) and (pool is None or j.pool == pool)]
    ids = [j.job_id for j in shown[offset : offset + limit]]
    records = {r.job_id: r for r in srv.store.jobs_by_id(ids)}
    jobs = [
        job_out(records[i], Run(None, None, None, now), snap.positions[i], srv.eta.expected_start_s(i))
        for i in ids
        if i in records and records[i].state is JobState.PENDING  # cancelled since the cycle: gone
    ]
    return api.QueueOut(policy=snap.policy, as_of_s=snap.as_of_s, jobs=jobs, total=len(shown), offset=offset)
