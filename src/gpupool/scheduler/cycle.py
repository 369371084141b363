"""``schedule(request) -> result``: the one cycle the server's loop and the simulator's engine both run.

1. **limits**: running jobs past their time limit end (timeout); those close to it are signalled to checkpoint.
   **reclaim**: a pool calendar's borrowers of hosts whose owner changed are signalled, then preempted.
2. The pending jobs in policy order; for each (``scheduler.stages``): **admit** (dependencies: a job waits
   for them, and ends, cancelled, when one can never be met; an array's cap; deadlines; quotas) -> **place** -> **preempt**
   -> **backfill** -> **diagnose**, until ``max_placements_per_cycle`` placements (the rest wait with
   CYCLE_LIMIT) or, with ``strict``, the first job that is not placed (the rest wait with BLOCKED).

With ``request.sharing`` at ``NO_SHARING`` (no quotas, pools, preemption, backfill or deadline admission),
every stage but place and diagnose returns at once: the cycle orders, places and says why the rest wait.

Refusals are remembered (``refusals.Refusals``): a shape that did not fit on a mask is not searched again,
and a job refused like an earlier one while nothing changed gets the same answer, so a queue of thousands
of blocked jobs of a few shapes costs lookups. With the queue kept between cycles (``request.queue``) and no
pools, quotas, held jobs or conservative backfill, the cycle visits only the jobs whose outcome their shape's
last visited job does not decide (``scheduler.grouped``): a long queue with nothing placeable costs one visit
per shape. ``schedule(..., remember_refusals=False)`` decides every job afresh; the tests hold the three to
identical results.
"""

from __future__ import annotations

import dataclasses

from gpupool.domain.errors import JobSpecError
from gpupool.domain.jobs import JobSpec
from gpupool.scheduler.cyclestate import UNDIAGNOSED, Ask, Cycle
from gpupool.scheduler.fragmentation import cycle_mix
from gpupool.scheduler.grouped import groups_decide, run_groups
from gpupool.scheduler.policies import order
from gpupool.scheduler.shapes import shape
from gpupool.scheduler.stages import decide, diagnose_waiting, limits, reclaim
from gpupool.scheduler.types import ReasonCode, ScheduleRequest, ScheduleResult, Waiting, Waits


def schedule(request: ScheduleRequest, *, remember_refusals: bool = True) -> ScheduleResult:
    """One cycle. ``remember_refusals=False`` decides every job afresh: slower, the same result (tests
    compare the two)."""
    view = request.queue
    if view is not None and not (
        remember_refusals and view.policy == request.config.policy and view.count == len(request.pending)
    ):
        view = None
    cy = Cycle(request, remember=remember_refusals, view=view)
    limits(cy)
    if view is not None and groups_decide(cy, view):
        # The caller keeps the queue ordered and grouped (its jobs' ids are unique by construction), and a
        # job's fate follows its shape and a few numbers of its own: the cycle visits only the jobs whose
        # outcome can differ from what is known (``scheduler.grouped``). No reclaim: it needs no pools.
        waits = run_groups(cy, view)
    else:
        _unique(request)
        reclaim(cy)
        queue = order(cy.policy, request)
        if cy.placer.uses_mix:
            cy.ctx = dataclasses.replace(cy.ctx, mix=cycle_mix(request.workload_mix, queue, request.snapshot.index))
        _run(cy, queue)
        diagnose_waiting(cy)
        waits = _waits(cy)
    return ScheduleResult(
        tuple(cy.allocs),
        tuple(cy.preemptions),
        waits,
        request.snapshot.version,
        tuple(cy.signals),
        tuple(cy.reservations),
        tuple(cy.endings),
    )


def _waits(cy: Cycle) -> Waits:
    """The cycle's waiting jobs: those it visited, then those it did not (made when read: a cycle that stops
    at its placement limit leaves most of a long queue unvisited, and the simulator never reads them)."""
    if cy.unvisited is None:
        return Waits(cy.waiting)
    visited, (rest, reason, msg) = cy.waiting, cy.unvisited
    return Waits(
        count=len(visited) + len(rest), make=lambda: (*visited, *[Waiting(j.job_id, reason, msg) for j in rest])
    )


def _unique(request: ScheduleRequest) -> None:
    ids = [job.job_id for job in request.pending]
    if len(set(ids)) == len(ids):
        return  # the usual answer, from one set built in C
    seen: set[str] = set()
    for job_id in ids:
        if job_id in seen:
            raise JobSpecError(f"job {job_id} is pending twice in one request", source="schedule request")
        seen.add(job_id)


def _run(cy: Cycle, queue: list[JobSpec]) -> None:
    cfg, default_runtime, by_shape = cy.request.config, cy.sh.default_runtime_s, cy.by_shape
    waiting, ids, seen, cap = cy.waiting, cy.shape_ids, cy.seen, cy.cap
    # The blocked shapes' sets, read inline below: asked once per job of a long blocked queue. They are
    # cleared, never replaced, and hold only while capacity has not grown (``releases``).
    blocked, releases = seen.blocked, cap.releases
    lasting, until_change = blocked.lasting, blocked.until_change
    remember = seen.enabled
    at, jobs, shapes = cy.undiagnosed_at.append, cy.undiagnosed_jobs.append, cy.undiagnosed_shapes.append
    for pos, job in enumerate(queue):
        if len(cy.allocs) >= cfg.max_placements_per_cycle:
            msg = f"not considered: this cycle placed its limit of {cfg.max_placements_per_cycle} jobs first"
            cy.unvisited = (queue[pos:], ReasonCode.CYCLE_LIMIT, msg)
            return
        topology = cy.topology_for(job) if job.tasks > 1 else None
        sh = shape(job, topology)
        sk = ids.get(sh)
        if sk is None:
            sk = ids[sh] = len(ids)
        before = len(cy.allocs)
        if (
            by_shape
            and remember
            and (sk in lasting or sk in until_change)
            and (cap.releases == releases or seen.blocked_shape(sk))
        ):
            # This cycle's rules make a job's fate its shape's: one like it waits for capacity, so this one
            # does (the hot path of a long blocked queue: ``Cycle.wait_for_capacity`` inlined; the job as
            # submitted, not copied with its topology for this cycle: the diagnosis asks ``placed_as``).
            at(len(waiting))
            jobs(job)
            shapes(sk)
            waiting.append(UNDIAGNOSED)
        else:
            if topology is not None:
                job = cy.placed_as(job)
            mkey, mask = cy.mask(job)
            decide(cy, Ask(job, sk, mask, mkey, job.runtime_with(job.tasks, default_runtime)))
        if cfg.strict and len(cy.allocs) == before and not _held_back(cy, job):
            msg = f"waits behind {job.job_id}, which does not fit (strict ordering)"
            cy.unvisited = (queue[pos + 1 :], ReasonCode.BLOCKED, msg)
            return


def _held_back(cy: Cycle, job: JobSpec) -> bool:
    """Whether ``job`` waits for something other than capacity (its dependencies, its array's cap) or was
    ended: strict ordering keeps later jobs behind a job that does not fit, not behind one that may not run."""
    if not (job.after or job.array_cap):
        return False
    if cy.endings and cy.endings[-1].job_id == job.job_id:
        return True
    last = cy.waiting[-1] if cy.waiting else None
    return last is not None and last.job_id == job.job_id and last.reason in HELD_BACK


HELD_BACK = frozenset({ReasonCode.DEPENDENCY, ReasonCode.ARRAY_LIMIT})
