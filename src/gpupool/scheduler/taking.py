"""Taking room for a waiting job, the parts the ``preempt`` and ``backfill`` stages (``scheduler.stages``) share:
whose GPUs it may take (``candidates``), taking them (``take``), holding hosts for it (``hold``), and what a
deadline job at risk does when taking jobs without a deadline cannot make room in time.

A deadline job is at risk (``at_risk``) with little slack left, its start delay counted (``start_delay``: the
launch, and a restart for a job that was preempted before). At risk, it may preempt ``preemptible`` jobs
without a deadline (``candidates``, the preempt stage); if that cannot make it fit now, it holds the hosts
it can have soonest by its latest start (``deadline_reservation``, counting those jobs as gone); if none are
whole by then (on a busy cluster every host may run a strict deadline job that ends later), it preempts,
besides, deadline jobs that still meet their own deadlines if restarted from scratch and can be placed again
by their latest start (``restart_victims``: Chronus MIX1 on 960 GPUs, jobs 14887, 26967, 15565 and 27881).
A deadline job restarts at most once for another's sake, so one rescue cannot start a chain of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpupool.cluster.snapshot import RunningJob
from gpupool.domain.jobs import MILLI_PER_GPU, JobSpec
from gpupool.scheduler.backfill import expected_end, reserve
from gpupool.scheduler.cyclestate import Ask, Cycle
from gpupool.scheduler.deadlines import RESTART_S
from gpupool.scheduler.deadlines import at_risk as deadline_at_risk
from gpupool.scheduler.deadlines import start_delay as deadline_start_delay
from gpupool.scheduler.diagnose import never_fits
from gpupool.scheduler.placement import Need, TaskPick, make_need
from gpupool.scheduler.preemption import Candidate, candidate, find_victims, give
from gpupool.scheduler.quotas import job_keys
from gpupool.scheduler.refusals import VictimKey, Who
from gpupool.scheduler.types import Preemption, ReasonCode, Reservation, Signal, SignalKind, Waiting

RECLAIMS = frozenset({ReasonCode.POOL_RECLAIM, ReasonCode.QUOTA_RECLAIM, ReasonCode.POOL_WINDOW_CLOSED})


def start_delay(cy: Cycle, job: JobSpec) -> float:
    """``deadlines.start_delay`` in this cycle: the launch, and a restart for a job preempted before."""
    return deadline_start_delay(job, cy.request.snapshot, cy.sh.launch_latency_s)


def at_risk(cy: Cycle, ask: Ask) -> bool:
    """A deadline job that can still meet its deadline if placed now, with little slack (``deadlines.at_risk``):
    waiting for running jobs to end would likely make it late, so it may preempt."""
    dl = ask.job.deadline_s
    if dl is None:
        return False
    slack = dl - cy.now - start_delay(cy, ask.job) - ask.runtime_s
    return deadline_at_risk(slack, ask.runtime_s, cy.sh.deadline_at_risk)


def latest_start(cy: Cycle, ask: Ask) -> float | None:
    """The latest start of a deadline job at risk (``at_risk``), else None."""
    dl = ask.job.deadline_s
    if dl is None or not at_risk(cy, ask):
        return None
    return dl - start_delay(cy, ask.job) - ask.runtime_s


def candidates(cy: Cycle, ask: Ask, risk: bool | None = None, restarts: bool = False) -> list[Candidate]:
    """Running jobs this job may preempt, each with its reason: borrowers of its pool's hosts (POOL_RECLAIM),
    borrowers of its cohort when it is within its nominal quota (QUOTA_RECLAIM), preemptible jobs of lower
    priority (PRIORITY), preemptible jobs without a deadline when it is a deadline job at risk (DEADLINE: they
    checkpoint and run again later, it would miss; however young they are, as the cheapest victims, those
    with the least work to lose, go first), preemptible jobs ranked after it by service
    (ATTAINED_SERVICE). ``risk``: whether it is at risk (None: ``at_risk``). ``restarts``: at risk, preemptible
    deadline jobs that can restart (``restartable``) too (DEADLINE, ranked after the jobs without a deadline
    of their priority)."""
    job, pre, cap, now = ask.job, cy.sh.preemption, cy.cap, cy.now
    if risk is None:
        risk = at_risk(cy, ask)
    pools, book = cy.pools, cy.book
    own = pools.code(job.pool) if pools is not None else -1
    reclaim_quota = book is not None and book.within_nominal(job, job.gpu_milli)
    key = job_keys(job)[0]
    mine = cy.pending_rank(job) if pre.by_service else 0.0
    out = []
    for job_id, r in cy.request.snapshot.running.items():
        if job_id in cy.victims:
            continue
        reason: ReasonCode | None = None
        if (
            pools is not None
            and own >= 0
            and r.spec.preemptible  # a pool reclaim never preempts a service (its SLO)
            and r.spec.pool != job.pool
            and any(int(pools.owner[h]) == own for h in cy.running_hosts(r))
        ):
            reason = ReasonCode.POOL_RECLAIM
        if (
            reason is None
            and reclaim_quota
            and book is not None
            and r.spec.tenant != job.tenant
            and key in book.quotas
            and book.is_borrower(r.spec, key)
        ):
            reason = ReasonCode.QUOTA_RECLAIM
        if (
            reason is None
            and pre.by_priority
            and r.spec.preemptible
            and r.spec.priority < job.priority
            and r.runtime_s(now) >= pre.min_runtime_s
        ):
            reason = ReasonCode.PRIORITY
        if (
            reason is None
            and risk
            and r.spec.preemptible
            and r.spec.deadline_s is None
            and r.spec.priority <= job.priority
        ):  # no min runtime: the youngest victims go first, they lose the least work
            reason = ReasonCode.DEADLINE
        if (
            reason is None
            and risk
            and restarts
            and r.spec.preemptible
            and r.spec.priority <= job.priority
            and restartable(cy, r)
        ):
            out.append(candidate(r, ReasonCode.DEADLINE, cap, now, float(r.spec.priority) + 0.5))
            continue
        if reason is None and pre.by_service and r.spec.preemptible:
            rank = cy.running_rank(r)
            if (
                rank > mine
                and r.runtime_s(now) >= pre.min_runtime_s
                and (pre.max_lost_s is None or r.work_lost_s(now) <= pre.max_lost_s)
            ):
                out.append(candidate(r, ReasonCode.ATTAINED_SERVICE, cap, now, -rank))
            continue
        if reason is not None:
            out.append(candidate(r, reason, cap, now))
    return out


def restartable(cy: Cycle, r: RunningJob) -> bool:
    """A running deadline job, never preempted before, that would still meet its deadline if preempted now and
    run again from scratch (its restart counted), and not even be at risk then."""
    if r.spec.deadline_s is None or r.preemptions:
        return False
    runtime = r.spec.runtime_with(r.spec.tasks, cy.sh.default_runtime_s)
    slack = restarted_latest_start(cy, r.spec) - cy.now
    return slack >= 0 and not deadline_at_risk(slack, runtime, cy.sh.deadline_at_risk)


def restarted_latest_start(cy: Cycle, spec: JobSpec) -> float:
    """The latest start of a deadline job placed again after a preemption (whole, its restart counted)."""
    assert spec.deadline_s is not None
    return spec.deadline_s - cy.sh.launch_latency_s - RESTART_S - spec.runtime_with(spec.tasks, cy.sh.default_runtime_s)


def take(cy: Cycle, job: JobSpec, victims: Sequence[Candidate]) -> Waiting:
    """Preempt ``victims`` for ``job`` now (or, for a reclaim within its grace, signal them to checkpoint)."""
    pre = cy.sh.preemption
    cy.preemptors += 1
    due = job.submit_time_s + pre.grace_s
    names = ", ".join(v.running.spec.job_id for v in victims)
    gpus = sum(v.running.gpu_milli for v in victims) / MILLI_PER_GPU
    waits = False
    for v in victims:
        vid = v.running.spec.job_id
        cy.victims.add(vid)
        why = f"preempted for {job.job_id} ({v.reason.value}): frees {gpus:g} GPUs with {names}"
        if v.reason in RECLAIMS and cy.now < due:
            waits = True
            if vid not in cy.signalled:
                cy.signalled.add(vid)
                cy.signals.append(Signal(vid, SignalKind.CHECKPOINT, v.reason, why, due))
        else:
            cy.preemptions.append(Preemption(vid, v.reason, why))
    cy.victims_changed()
    msg = (
        f"signalled {len(victims)} job(s) ({names}) to checkpoint; they are preempted at t={due:.0f}"
        if waits
        else f"preempted {len(victims)} job(s) ({names}) to free {gpus:g} GPUs; placed once they are gone"
    )
    return Waiting(job.job_id, ReasonCode.PREEMPTING, msg)


def hold(cy: Cycle, job: JobSpec, start: float, picks: Sequence[TaskPick]) -> str:
    """Reserve the hosts of ``picks`` for ``job`` from ``start`` on (a state change); what it holds, in words."""
    hosts = sorted({h for h, _ in picks})
    cy.reservations.append(Reservation(job.job_id, start, tuple(cy.cap.index.host_name(h) for h in hosts)))
    cy.reserved_from[hosts] = np.minimum(cy.reserved_from[hosts], start)
    cy.seen.bump()
    return f"holds a reservation of {len(hosts)} host(s) from t={start:.0f} (in {start - cy.now:.0f} s)"


def deadline_reservation(cy: Cycle, ask: Ask, asker: Who, latest: float) -> Waiting | None:
    """A deadline job at risk, whose ``latest_start`` is ``latest``, holds the hosts (none held by another reservation) that are
    free soonest, if that is by its latest start: nobody is placed there who would still run then. When
    waiting for the running jobs' ends is too late (on a busy cluster every host it could take also runs jobs
    it may not preempt: strict deadline jobs), it counts the jobs it may preempt (``candidates``) as ending
    now, holds the hosts that frees soonest, and preempts those there that would still run at the
    reservation's start. A reservation without victims comes first, so that it keeps the hosts it emptied in
    an earlier cycle. Only while it has candidates (the kept queue's cycle visits such a job one by one:
    ``grouped._Bounds``). None when nothing frees room by its latest start (it waits as any other job, and
    admission refuses it once it cannot make it)."""
    job = ask.job
    mask = cy.reserved_from == np.inf
    if ask.base is not None:
        mask &= ask.base
    need = make_need(job, cy.cap, mask)
    cands = candidates(cy, ask, risk=True)
    if not cands or never_fits(cy.cap, need) is not None:
        return None
    victims: list[Candidate] = []
    got = _reserve_memo(cy, ("plain", ask.shape), need, None, latest)
    if got is None:
        key = VictimKey(ask.shape, job.pool, asker._replace(at_risk=True), job.gpu_milli)
        got = _reserve_memo(cy, key, need, cands, latest)
        if got is None:
            return None
        victims = _in_the_way(cy, cands, got[0], got[1])
    msg = hold(cy, job, got[0], got[1])
    if victims:
        msg = f"{take(cy, job, victims).message}; {msg}"
    return Waiting(job.job_id, ReasonCode.WAITING_FOR_RESERVATION, f"to meet its deadline: {msg}")


def restart_victims(cy: Cycle, ask: Ask, asker: Who) -> Waiting | None:
    """The last resort of a deadline job at risk that neither fits by preempting jobs without a deadline nor
    holds a deadline reservation by its latest start: preempt, besides those, running deadline jobs that
    still meet their own deadlines if restarted from scratch (``restartable``), so that it fits now."""
    job, seen = ask.job, cy.seen
    key = VictimKey(ask.shape, job.pool, asker._replace(at_risk=True), job.gpu_milli, restarts=True)
    if seen.holds(seen.no_victims, key):
        return None
    cands = candidates(cy, ask, risk=True, restarts=True)
    victims = None
    if any(c.running.spec.deadline_s is not None for c in cands):
        # Its pool's hosts, as the preempt stage searches.
        need = make_need(job, cy.cap, cy.narrowed(ask, job.pool) if cy.owned(job.pool) is not None else ask.base)
        victims = find_victims(cy.cap, need, cy.placer, cy.ctx, cands, cy.sh.preemption.max_victims_per_job)
        if victims and not _placed_again(cy, need, victims, cands):
            victims = None
    if not victims:
        seen.note(seen.no_victims, key)
        return None
    seen.bump()
    return take(cy, job, victims)


def _placed_again(cy: Cycle, need: Need, victims: Sequence[Candidate], cands: Sequence[Candidate]) -> bool:
    """Whether, once ``victims`` are gone and ``need`` took their room, every deadline job among them can be
    placed again by its latest start (its restart counted): by the running jobs' expected ends, counting as
    gone now the jobs without a deadline it may preempt once at risk (the candidates not taken, of no higher
    priority than it). Each is asked alone; the job placed for ``need`` is not counted on to end."""
    cap, placer, ctx, now = cy.cap, cy.placer, cy.ctx, cy.now
    mark = cap.mark()
    try:
        for v in victims:
            give(cap, v.running)
        if placer.place(cap, need, ctx) is None:
            return False
        gone = {v.running.spec.job_id for v in victims}
        free = [c.running for c in cands if c.running.spec.deadline_s is None and c.running.spec.job_id not in gone]
        gone.update(r.spec.job_id for r in free)
        ends = [e for e in cy.ends() if e[1].spec.job_id not in gone]
        for back in (v.running.spec for v in victims if v.running.spec.deadline_s is not None):
            spec = cy.placed_as(back)
            latest = restarted_latest_start(cy, spec)
            mine = [r for r in free if r.spec.priority <= back.priority]
            again = make_need(spec, cap, cy.mask(spec)[1])
            if not cy.fits(again) and reserve(cap, again, placer, ctx, ends, mine, now, latest) is None:
                return False
        return True
    finally:
        cap.undo(mark)


def _reserve_memo(
    cy: Cycle, key: tuple[object, ...], need: Need, cands: Sequence[Candidate] | None, until_s: float
) -> tuple[float, list[TaskPick]] | None:
    """``reserve`` for ``need`` by ``until_s`` from the running jobs' ends, with ``cands`` ending now (remembered
    by ``key`` until the state changes: a reservation found answers any later ``until_s``, none found any
    earlier one)."""
    seen = cy.seen
    known = seen.answer(seen.reservation, key)
    if known is not None:
        got, searched = known
        if got is not None:
            return got if got[0] <= until_s else None
        if until_s <= searched:
            return None
    if cands is None:
        got = reserve(cy.cap, need, cy.placer, cy.ctx, cy.ends(), until_s=until_s)
    else:
        ids = {c.running.spec.job_id for c in cands}
        ends = [e for e in cy.ends() if e[1].spec.job_id not in ids]
        got = reserve(cy.cap, need, cy.placer, cy.ctx, ends, [c.running for c in cands], cy.now, until_s)
    seen.answered(seen.reservation, key, (got, until_s))
    return got


def _in_the_way(cy: Cycle, cands: Sequence[Candidate], start: float, picks: Sequence[TaskPick]) -> list[Candidate]:
    """The candidates that hold a GPU of ``picks`` and are expected to run past ``start``."""
    taken = {(h, g) for h, gpus in picks for g in gpus}
    ix, now, default = cy.cap.index, cy.now, cy.sh.default_runtime_s
    return [
        c
        for c in cands
        if expected_end(c.running, now, default) > start
        and any((ix.host_index(t.host), g) in taken for t in c.running.allocation.tasks for g in t.gpus)
    ]
