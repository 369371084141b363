"""The stages of one cycle, each a small function over the cycle's state (``Cycle``) and one job's ``Ask``.

For each job in policy order (``scheduler.cycle``): **admit** (deadline admission, quota) -> **place** (its
pool's hosts, then lent hosts; each size an elastic deadline job may take) -> **preempt** (victims whose
removal lets it fit) -> **backfill** (a reservation from the earliest time it fits) -> **diagnose** (why it
waits: a reason code and a sentence). Before the queue, **reclaim** takes back hosts a pool calendar gave to
another pool. A stage whose feature is off (no quotas, no calendar, preemption or backfill off) returns at
once, so a cycle without sharing rules only orders, places and diagnoses. What preempt and backfill share
(whose GPUs a job may take, taking them, holding hosts, a deadline job at risk) is ``scheduler.taking``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpupool.domain.dependencies import Verdict, dependency_verdict
from gpupool.domain.jobs import JobSpec
from gpupool.scheduler.backfill import reserve
from gpupool.scheduler.cyclestate import Ask, Cycle, Wide
from gpupool.scheduler.diagnose import diagnose, never_fits
from gpupool.scheduler.placement import make_need
from gpupool.scheduler.preemption import find_victims
from gpupool.scheduler.refusals import (
    LATER,
    Diagnosis,
    Outcome,
    OutcomeKey,
    PlaceKey,
    ReservationKey,
    VictimKey,
    Who,
)
from gpupool.scheduler.shapes import allocation
from gpupool.scheduler.taking import (
    at_risk,
    candidates,
    deadline_reservation,
    hold,
    latest_start,
    restart_victims,
    start_delay,
    take,
)
from gpupool.scheduler.types import (
    BackfillMode,
    Ending,
    Preemption,
    ReasonCode,
    Reservation,
    Signal,
    SignalKind,
    Waiting,
)

# ---------------------------------------------------------------------------------------------- reclaim


def reclaim(cy: Cycle) -> None:
    """Jobs placed on hosts whose owner pool changed since (a window opened or closed, or a demand target
    grew) are borrowers now: a CHECKPOINT signal, and preemption ``grace_s`` after the change. A job that is
    not ``preemptible`` (a service) is never reclaimed."""
    pools = cy.pools
    if pools is None:
        return
    now, grace, cap = cy.now, cy.sh.preemption.grace_s, cy.cap
    demand_since = {d.pool: d.since_s for d in cy.request.inputs.pool_demand}
    # Only jobs placed before some host changed owner can be on a changed host: most skip on one compare.
    latest = float(pools.since.max()) if pools.since.size else -np.inf
    changed_hosts = {cap.index.host_name(int(h)) for h in np.flatnonzero(np.isfinite(pools.since))}
    running = cy.request.snapshot.running
    for job_id in sorted(running):
        r = running[job_id]
        if (
            not r.spec.preemptible
            or r.placed_at_s >= latest
            or not any(t.host in changed_hosts for t in r.allocation.tasks)
        ):
            continue
        code = pools.code(r.spec.pool)
        changed = [h for h in cy.running_hosts(r) if pools.owner[h] != code and pools.since[h] > r.placed_at_s]
        if not changed:
            continue
        h = max(changed, key=lambda x: (float(pools.since[x]), x))
        since, owner = float(pools.since[h]), pools.names[int(pools.owner[h])]
        reason = ReasonCode.POOL_RECLAIM if demand_since.get(owner) == since else ReasonCode.POOL_WINDOW_CLOSED
        due, host = since + grace, cap.index.host_name(h)
        if now >= due:
            cy.preemptions.append(
                Preemption(job_id, reason, f"pool {owner} holds {host} since t={since:.0f}; grace ended")
            )
            cy.victims.add(job_id)
        else:
            msg = f"pool {owner} holds {host} since t={since:.0f}; checkpoint: preempted at t={due:.0f}"
            cy.signals.append(Signal(job_id, SignalKind.CHECKPOINT, reason, msg, due))
            cy.signalled.add(job_id)


# ----------------------------------------------------------------------------------------------- limits


def limits(cy: Cycle) -> None:
    """Running jobs with a time limit: within its lead (the job's ``signal_lead_s``, else the config's), a
    CHECKPOINT signal saying when; past it, ended (TIME_LIMIT: the world stops them, state timeout), with the
    signal still listed, so a job whose lead no cycle saw (a stalled loop) is signalled before its stop."""
    now, default_lead = cy.now, cy.request.config.time_limit_lead_s
    for job_id, r in cy.request.snapshot.running.items():
        limit = r.spec.time_limit_s
        if limit is None or r.started_at_s is None:
            continue
        end = r.started_at_s + limit
        lead = r.spec.signal_lead_s if r.spec.signal_lead_s is not None else default_lead
        if now >= end - lead:
            msg = f"its time limit of {limit:.0f} s ends at t={end:.0f}: save your work"
            cy.signals.append(Signal(job_id, SignalKind.CHECKPOINT, ReasonCode.TIME_LIMIT, msg, end))
            cy.signalled.add(job_id)
        if now >= end:
            msg = f"ran {now - r.started_at_s:.0f} s, past its time limit of {limit:.0f} s"
            cy.endings.append(Ending(job_id, ReasonCode.TIME_LIMIT, msg))
            cy.victims.add(job_id)  # it stops: no preemption may count on it or take it again


# ----------------------------------------------------------------------------------------------- decide


def decide(cy: Cycle, ask: Ask) -> None:
    """One job through the stages: placed (``cy.allocs``), or waiting with its reason (``cy.waiting``)."""
    if cy.by_shape:
        # No admission, pools, preemption or backfill: the shape alone decides, so the refusal of a shape is
        # its outcome (no outcome memo, no later stages to ask).
        if not place(cy, ask, (ask.job.tasks,), None):
            cy.seen.refuse(cy.seen.blocked, ask.shape, Wide(ask.job, cy.cap, ask.base).need)
            cy.wait_for_capacity(ask.job, ask.shape)
        return
    if cy.admits:
        refused = admit(cy, ask)
        if isinstance(refused, Ending):
            cy.endings.append(refused)
            return
        if refused is not None:
            cy.waiting.append(refused)
            return
    seen = cy.seen
    sizes, resv = cy.sizes(ask), reservation_key(cy, ask) if cy.reservations else None
    okey = outcome_key(cy, ask, sizes, resv)
    known = seen.answer(seen.outcome, okey)
    if known is None:
        if place(cy, ask, sizes, resv):
            return
        wide = Wide(ask.job, cy.cap, ask.base)  # the job on its host mask alone, made only if a stage needs it
        waits = reserved(cy, ask, wide)
        if waits is not None:
            seen.answered(seen.outcome, okey, Outcome(waits.reason, waits.message))
        else:
            waits = preempt(cy, ask, okey.who) or backfill(cy, ask, wide, okey.who)
            if waits is None:
                seen.answered(seen.outcome, okey, LATER)
        if waits is not None:
            cy.waiting.append(waits)
            return
        known = LATER
    if known.reason is None:
        cy.wait_for_capacity(ask.job, ask.shape)
    else:
        cy.waiting.append(Waiting(ask.job.job_id, known.reason, known.message))


# ------------------------------------------------------------------------------------------------ admit


def depends(cy: Cycle, job: JobSpec) -> Waiting | Ending | None:
    """A job's dependencies against the states of the jobs they name: all met (None), one not yet (it waits,
    DEPENDENCY), or one that never can be (it ends, cancelled: DEPENDENCY_NEVER_SATISFIED)."""
    states = cy.request.snapshot.job_states
    waits: str | None = None
    for dep in job.after:
        verdict, why = dependency_verdict(dep, states)
        if verdict is Verdict.NEVER:
            return Ending(job.job_id, ReasonCode.DEPENDENCY_NEVER_SATISFIED, f"dependency never satisfied: {why}")
        if verdict is Verdict.WAIT and waits is None:
            waits = why
    return None if waits is None else Waiting(job.job_id, ReasonCode.DEPENDENCY, waits)


def admit(cy: Cycle, ask: Ask) -> Waiting | Ending | None:
    """Its dependencies, its array's cap, deadline admission (a job that cannot finish in time even if started
    now waits), then its quota."""
    job, now = ask.job, cy.now
    if job.after:
        refused = depends(cy, job)
        if refused is not None:
            return refused
    if job.array_cap:
        held = cy.array_held(job.array_id)
        if held >= job.array_cap:
            msg = f"array {job.array_id} has {held} elements placed or running, its cap (%{job.array_cap})"
            return Waiting(job.job_id, ReasonCode.ARRAY_LIMIT, msg)
    if (
        job.deadline_s is not None
        and cy.sh.deadline_admission
        and now + start_delay(cy, job) + ask.runtime_s > job.deadline_s
    ):
        return infeasible(cy, job, ask.runtime_s)
    if cy.book is not None:
        verdict = cy.book.check(job, job.gpu_milli)
        if not verdict.ok:
            return Waiting(job.job_id, ReasonCode.QUOTA_EXCEEDED, verdict.message)
    return None


def infeasible(cy: Cycle, job: JobSpec, runtime_s: float) -> Waiting:
    """A deadline job refused by admission: placed now (``runtime_s`` at its full size) it would end late."""
    launch, dl = cy.sh.launch_latency_s, job.deadline_s
    restart = start_delay(cy, job) - launch
    after = f"a launch of {launch:g} s" + (f" and a restart of {restart:g} s" if restart else "")
    # No time that moves with the clock: the server stores a reason only when it changes, and a backlog of such
    # jobs would rewrite every one of them each cycle.
    msg = f"needs {runtime_s:.0f} s after {after}, more than is left before its deadline t={dl:.0f}"
    return Waiting(job.job_id, ReasonCode.DEADLINE_INFEASIBLE, msg)


def who(cy: Cycle, ask: Ask) -> Who | None:
    """What preempting for this job would depend on; None when it may not preempt in this cycle."""
    pre = cy.sh.preemption
    if not cy.may_preempt or cy.preemptors >= pre.max_preemptors_per_cycle:
        return None
    job = ask.job
    return Who(job.tenant, int(job.priority), cy.pending_rank(job) if pre.by_service else 0.0, at_risk(cy, ask))


def reservation_key(cy: Cycle, ask: Ask) -> ReservationKey | None:
    """The reservation mask changes only when a reservation is added; its key says which one it is."""
    return ReservationKey(len(cy.reservations), cy.now + ask.runtime_s) if cy.reservations else None


def outcome_key(cy: Cycle, ask: Ask, sizes: tuple[int, ...], resv: ReservationKey | None) -> OutcomeKey:
    job, asker = ask.job, who(cy, ask)
    latest = latest_start(cy, ask) if asker is not None else None  # ``deadline_reservation`` depends on it
    return OutcomeKey(ask.shape, job.pool, job.preemptible, resv, sizes, asker, latest)


# ------------------------------------------------------------------------------------------------ place


def place(cy: Cycle, ask: Ask, sizes: tuple[int, ...], resv: ReservationKey | None) -> bool:
    """Each size, on the job's own pool's hosts and then (``lend_pools``) on other pools' idle hosts, kept
    off reserved hosts unless it ends before their reservation. True when it was placed."""
    job, cap, seen = ask.job, cy.cap, cy.seen
    free_of_resv = cy.reserved_from >= cy.now + ask.runtime_s if resv is not None else None
    own = cy.owned(job.pool)
    pools: list[str | None] = [job.pool] if own is not None else []  # None: any host it may use
    # Lent hosts are only for preemptible work: a service placed there would be a borrower the owner
    # reclaims, which its SLO forbids.
    if own is None or (cy.sh.lend_pools and job.preemptible):
        pools.append(None)
    # Lent hosts depend on the job's pool when some pool keeps hosts for its demand.
    lent_for = job.pool if cy.pools is not None and cy.pools.kept is not None else None
    for k in sizes:
        for pool in pools:
            key = PlaceKey(ask.shape, k, pool, None if pool is not None else lent_for, resv)
            if seen.refused(seen.place, key):
                continue
            mask = cy.narrowed(ask, pool) if pool is not None else cy.lent(ask)
            if free_of_resv is not None:
                mask = free_of_resv if mask is None else mask & free_of_resv
            need = make_need(job, cap, mask)
            if k != job.tasks:
                need = dataclasses.replace(need, tasks=k)
            picks = cy.try_place(need)
            if picks is not None:
                cy.allocs.append(allocation(cap, need, picks))
                if job.array_cap:
                    cy.array_placed(job.array_id)
                if cy.book is not None:
                    cy.book.add(job, job.gpu_milli * k // job.tasks)
                seen.bump()
                return True
            seen.refuse(seen.place, key, need)
    return False


def reserved(cy: Cycle, ask: Ask, wide: Wide) -> Waiting | None:
    """A job kept off reserved hosts that would fit without them waits for the reservation (RESERVED)."""
    if not cy.reservations or not _fits_wide(cy, ask, wide):
        return None
    return reserved_waiting(cy, ask.job, ask.runtime_s)


def reserved_waiting(cy: Cycle, job: JobSpec, runtime_s: float, first: Reservation | None = None) -> Waiting:
    """Why a job that fits waits: expected to run past the earliest reservation (of those made so far; the
    caller may pass it)."""
    if first is None:
        first = min(cy.reservations, key=lambda r: r.start_s)
    return Waiting(
        job.job_id,
        ReasonCode.RESERVED,
        f"fits now, but its {runtime_s:.0f} s would run past the reservation of {first.job_id} from "
        f"t={first.start_s:.0f}",
    )


def _fits_wide(cy: Cycle, ask: Ask, wide: Wide) -> bool:
    """Whether the job would fit if it ignored reservations (remembered both ways until a change)."""
    seen = cy.seen
    if seen.holds(seen.fits, ask.shape):
        return True
    if seen.refused(seen.fits_not, ask.shape):
        return False
    if cy.fits(wide.need):
        seen.note(seen.fits, ask.shape)
        return True
    seen.refuse(seen.fits_not, ask.shape, wide.need)
    return False


# ---------------------------------------------------------------------------------------------- preempt


def preempt(cy: Cycle, ask: Ask, asker: Who | None) -> Waiting | None:
    """The fewest whole running jobs whose removal lets the job fit, preempted now (or, for a reclaim within
    its grace, signalled to checkpoint). Kueue's model: the job itself is placed in a later cycle, once the
    caller applied the preemptions; their capacity goes to nobody in this cycle. ``asker``: ``who(cy, ask)``."""
    pre = cy.sh.preemption
    if asker is None:
        return None
    job, seen = ask.job, cy.seen
    key = VictimKey(ask.shape, job.pool, asker, job.gpu_milli)
    if seen.holds(seen.no_victims, key):
        return None
    cands = candidates(cy, ask)
    mask = cy.narrowed(ask, job.pool) if cy.owned(job.pool) is not None else ask.base
    victims = (
        find_victims(cy.cap, make_need(job, cy.cap, mask), cy.placer, cy.ctx, cands, pre.max_victims_per_job)
        if cands
        else None
    )
    if not victims:
        seen.note(seen.no_victims, key)
        return None
    seen.bump()
    return take(cy, job, victims)


# ------------------------------------------------------------------------------- backfill and diagnose


def backfill(cy: Cycle, ask: Ask, wide: Wide, asker: Who | None = None) -> Waiting | None:
    """With backfill, a job that waits for capacity gets a reservation of the hosts it could have from the
    earliest expected end on (EASY: the first such job only; conservative: up to ``max_reservations``):
    it waits WAITING_FOR_RESERVATION. A deadline job at risk may hold one besides
    (``deadline_reservation``). None without a reservation. ``asker``: ``who(cy, ask)``."""
    mode, seen = cy.sh.backfill, cy.seen
    if mode is BackfillMode.NONE:
        return None
    latest = latest_start(cy, ask) if asker is not None else None
    if asker is not None and latest is not None:
        held = deadline_reservation(cy, ask, asker, latest) or restart_victims(cy, ask, asker)
        if held is not None:
            return held
    if not (
        (mode is BackfillMode.EASY and not cy.reservations)
        or (mode is BackfillMode.CONSERVATIVE and len(cy.reservations) < cy.sh.max_reservations)
    ):
        return None
    if seen.holds(seen.no_reservation, ask.shape) or never_fits(cy.cap, wide.need) is not None:
        return None
    got = reserve(cy.cap, wide.need, cy.placer, cy.ctx, cy.ends())
    if got is None:
        seen.note(seen.no_reservation, ask.shape)
        return None
    msg = hold(cy, ask.job, got[0], got[1])
    return Waiting(ask.job.job_id, ReasonCode.WAITING_FOR_RESERVATION, f"{diagnose(cy.cap, wide.need)[1]}; {msg}")


def diagnose_waiting(cy: Cycle) -> None:
    """The last stage: every job left waiting for want of capacity gets its reason and sentence from the
    capacity as the cycle leaves it (what it waits for now), one diagnosis per shape (capacity no longer
    changes, so a local memo is exact; without ``remember_refusals``, each job is diagnosed)."""
    cap, waiting = cy.cap, cy.waiting
    memo: dict[int, Diagnosis] = {}
    remember = cy.seen.enabled
    for pos, job, sk in zip(cy.undiagnosed_at, cy.undiagnosed_jobs, cy.undiagnosed_shapes, strict=True):
        why = memo.get(sk)
        if why is None:
            why = diagnose(cap, make_need(cy.placed_as(job), cap, cy.mask(job)[1]))
            if remember:
                memo[sk] = why
        waiting[pos] = Waiting(job.job_id, why[0], why[1])
