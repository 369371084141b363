"""The sharing cycle: quotas, pools and their calendar, preemption, backfill and deadlines.

Order of one cycle:
1. Pool calendar: jobs placed on hosts whose owner pool changed since (a window opened or closed, or a
   demand target grew) are borrowers now; they get a CHECKPOINT signal and are preempted ``grace_s`` after
   the change (POOL_WINDOW_CLOSED, or POOL_RECLAIM for demand). Jobs that are not ``preemptible``
   (services) are never reclaimed, and never placed on another pool's hosts.
2. Jobs in policy order. A deadline job that cannot finish even if started now waits (DEADLINE_INFEASIBLE).
   Quota admission before placement (QUOTA_EXCEEDED with a sentence). Placement on the job's own pool's
   hosts first, then (``lend_pools``) on other pools' idle hosts. With backfill, hosts reserved for an
   earlier job are off limits unless the job is expected to end before the reservation starts. A deadline
   job with ``min_tasks`` may take fewer tasks when the smaller size still meets the deadline.
3. A job that does not fit may preempt: borrowers of its pool's hosts (POOL_RECLAIM), borrowers of its
   cohort when it is within its nominal quota (QUOTA_RECLAIM), preemptible lower-priority jobs (PRIORITY).
   Reclaims give grace counted from the preemptor's submission (a CHECKPOINT signal until then); priority
   preemption needs the victim to have run ``min_runtime_s``. Kueue's model: victims are preempted now and
   the preemptor is placed in a later cycle, once the caller has applied the preemptions; their capacity
   is not handed to anyone in this cycle (the victims still hold it here), so the preemptor is first in line.
4. Otherwise, with backfill, the job gets a reservation (WAITING_FOR_RESERVATION); else its diagnosis.

Refusals are remembered (``refusals.Refusals``): a shape that did not fit on a mask is not searched again,
and a job refused like an earlier one while nothing changed gets the same answer, so a queue of thousands
of blocked jobs of a few shapes costs lookups. ``schedule_shared(..., remember_refusals=False)`` decides
every job afresh; the tests hold the two to identical results.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpupool.cluster.snapshot import RunningJob
from gpupool.domain.errors import JobSpecError
from gpupool.domain.jobs import MILLI_PER_GPU, Allocation, JobSpec
from gpupool.scheduler.backfill import expected_end, reserve
from gpupool.scheduler.capacity import BoolArray, Capacity
from gpupool.scheduler.diagnose import diagnose
from gpupool.scheduler.fragmentation import cycle_mix
from gpupool.scheduler.gittins import GittinsView
from gpupool.scheduler.placement import Need, TaskPick, make_need
from gpupool.scheduler.placers import CycleContext, Placer, get_placer
from gpupool.scheduler.policies import get_policy, gittins_view, order, service_rank
from gpupool.scheduler.pools import PoolMap, pool_busy, pool_map
from gpupool.scheduler.preemption import Candidate, candidate, find_victims
from gpupool.scheduler.quotas import QuotaBook, job_keys
from gpupool.scheduler.refusals import Refusals
from gpupool.scheduler.shapes import Shape, allocation, host_mask, shape
from gpupool.scheduler.telemetry import penalties
from gpupool.scheduler.types import (
    BackfillMode,
    Preemption,
    ReasonCode,
    Reservation,
    ScheduleRequest,
    ScheduleResult,
    SharingPolicy,
    Signal,
    SignalKind,
    Waiting,
)

_RESERVABLE = {
    ReasonCode.NO_CAPACITY,
    ReasonCode.FRAGMENTED,
    ReasonCode.TOPOLOGY,
    ReasonCode.CPU_MEMORY,
    ReasonCode.RAIL_ALIGNMENT,
}
_RECLAIMS = {ReasonCode.POOL_RECLAIM, ReasonCode.QUOTA_RECLAIM, ReasonCode.POOL_WINDOW_CLOSED}


def _and(a: BoolArray | None, b: BoolArray | None) -> BoolArray | None:
    if a is None:
        return b
    if b is None:
        return a
    out: BoolArray = a & b
    return out


def _hosts(cap: Capacity, r: RunningJob) -> tuple[int, ...]:
    return tuple(dict.fromkeys(cap.index.host_index(t.host) for t in r.allocation.tasks))


def _window_reclaims(
    request: ScheduleRequest, sh: SharingPolicy, cap: Capacity, pools: PoolMap
) -> tuple[list[Preemption], list[Signal]]:
    now, grace = request.now_s, sh.preemption.grace_s
    demand_since = {d.pool: d.since_s for d in sh.pool_demand}
    pre: list[Preemption] = []
    sig: list[Signal] = []
    # Only jobs placed before some host changed owner can be on a changed host: most skip on one compare.
    latest = float(pools.since.max()) if pools.since.size else -np.inf
    changed_hosts = {cap.index.host_name(int(h)) for h in np.flatnonzero(np.isfinite(pools.since))}
    running = request.snapshot.running
    for job_id in sorted(running):
        r = running[job_id]
        # A service (not preemptible) is never reclaimed: it keeps the host until it ends (its SLO).
        if (
            not r.spec.preemptible
            or r.placed_at_s >= latest
            or not any(t.host in changed_hosts for t in r.allocation.tasks)
        ):
            continue
        code = pools.code(r.spec.pool)
        changed = [h for h in _hosts(cap, r) if pools.owner[h] != code and pools.since[h] > r.placed_at_s]
        if not changed:
            continue
        h = max(changed, key=lambda x: (float(pools.since[x]), x))
        since, owner = float(pools.since[h]), pools.names[int(pools.owner[h])]
        reason = ReasonCode.POOL_RECLAIM if demand_since.get(owner) == since else ReasonCode.POOL_WINDOW_CLOSED
        due = since + grace
        host = cap.index.host_name(h)
        if now >= due:
            pre.append(Preemption(job_id, reason, f"pool {owner} holds {host} since t={since:.0f}; grace ended"))
        else:
            msg = f"pool {owner} holds {host} since t={since:.0f}; checkpoint: preempted at t={due:.0f}"
            sig.append(Signal(job_id, SignalKind.CHECKPOINT, reason, msg, due))
    return pre, sig


class _Wide:
    """A job's ``Need`` on its host mask alone (no pool, no reservations), made on first use."""

    __slots__ = ("_need", "base", "cap", "job")

    def __init__(self, job: JobSpec, cap: Capacity, base: BoolArray | None) -> None:
        self.job, self.cap, self.base = job, cap, base
        self._need: Need | None = None

    @property
    def need(self) -> Need:
        if self._need is None:
            self._need = make_need(self.job, self.cap, self.base)
        return self._need


class _Cycle:
    """State of one sharing cycle; ``run`` is the whole of it."""

    def __init__(self, request: ScheduleRequest, sh: SharingPolicy, *, remember: bool = True) -> None:
        self.request, self.sh, self.now = request, sh, request.now_s
        cfg, snap = request.config, request.snapshot
        self.policy = get_policy(cfg.policy)
        self.placer: Placer = get_placer(cfg.placer)
        self.cap = Capacity(snap, penalties(snap, cfg.telemetry))
        ix = snap.index
        self.pools = (
            pool_map(ix, sh.calendar, self.now, sh.pool_demand, pool_busy(ix, snap.running))
            if sh.calendar is not None
            else None
        )
        self.book = QuotaBook(sh.quotas, snap.running, require=sh.require_quota) if sh.quotas else None
        self.allocs: list[Allocation] = []
        self.preemptions: list[Preemption] = []
        self.signals: list[Signal] = []
        self.signalled: set[str] = set()
        self.waiting: list[Waiting] = []
        self.victims: set[str] = set()
        self.reservations: list[Reservation] = []
        self.reserved_from = np.full(ix.n_hosts, np.inf, dtype=np.float64)
        self.preemptors = 0
        self._ends: list[tuple[float, RunningJob]] | None = None
        self.ctx = CycleContext(ix, np.arange(ix.n_hosts, dtype=np.int64), cfg.max_domains_tried, None)
        self.refusals = Refusals(self.cap, enabled=remember)
        # Per-cycle masks: a pool's hosts, and a host mask narrowed to a pool (both fixed for the cycle).
        self._owned: dict[str, BoolArray] = {}
        self._narrowed: dict[tuple[Shape, str], BoolArray | None] = {}
        self._lent: dict[tuple[Shape, str], BoolArray | None] = {}
        self._run_hosts: dict[str, tuple[int, ...]] = {}
        self._shape_ids: dict[Shape, int] = {}
        self._run_queue: dict[str, float] = {}
        self._view: GittinsView | None = None

    # ------------------------------------------------------------ helpers

    def ends(self) -> list[tuple[float, RunningJob]]:
        if self._ends is None:
            run = self.request.snapshot.running
            self._ends = sorted(
                (
                    (expected_end(r, self.now, self.sh.default_runtime_s), r)
                    for j, r in run.items()
                    if j not in self.victims
                ),
                key=lambda e: (e[0], e[1].spec.job_id),
            )
        return self._ends

    def shape_id(self, job: JobSpec) -> int:
        """A small number per shape: keys built from it hash in one step, not through the whole shape."""
        sk = shape(job)
        got = self._shape_ids.get(sk)
        if got is None:
            got = self._shape_ids[sk] = len(self._shape_ids)
        return got

    def owned(self, pool: str) -> BoolArray | None:
        if self.pools is None:
            return None
        got = self._owned.get(pool)
        if got is None:
            got = self._owned[pool] = self.pools.owned_by(pool)
        return got

    def narrowed(self, base: BoolArray | None, base_key: Shape, pool: str) -> BoolArray | None:
        """``base`` (the host mask of ``base_key``) and the pool's hosts."""
        key = (base_key, pool)
        if key not in self._narrowed:
            self._narrowed[key] = _and(base, self.owned(pool))
        return self._narrowed[key]

    def lent(self, base: BoolArray | None, base_key: Shape, pool: str) -> BoolArray | None:
        """``base`` and the hosts a job of ``pool`` may use beyond its own: none kept for another's demand."""
        if self.pools is None or self.pools.kept is None:
            return base
        key = (base_key, pool)
        if key not in self._lent:
            self._lent[key] = _and(base, self.pools.lendable_to(pool))
        return self._lent[key]

    def running_hosts(self, r: RunningJob) -> tuple[int, ...]:
        got = self._run_hosts.get(r.spec.job_id)
        if got is None:
            got = self._run_hosts[r.spec.job_id] = _hosts(self.cap, r)
        return got

    def try_place(self, need: Need) -> list[TaskPick] | None:
        cap = self.cap
        if not need.share and need.total > cap.total_free_whole():
            return None
        mark = cap.mark()
        picks = self.placer.place(cap, need, self.ctx)
        if picks is None:
            cap.undo(mark)
        return picks

    def fits(self, need: Need) -> bool:
        mark = self.cap.mark()
        picks = self.try_place(need)
        self.cap.undo(mark)
        return picks is not None

    def sizes(self, job: JobSpec) -> list[int]:
        """Task counts to try: all of them; fewer for an elastic deadline job while the deadline holds."""
        out = [job.tasks]
        if job.deadline_s is not None and job.fewest_tasks < job.tasks:
            dl = job.deadline_s
            out += [
                k
                for k in range(job.tasks - 1, job.fewest_tasks - 1, -1)
                if self.now + job.runtime_with(k, self.sh.default_runtime_s) <= dl
            ]
        return out

    def candidates(self, job: JobSpec, milli: int) -> list[Candidate]:
        pre, cap, now = self.sh.preemption, self.cap, self.now
        pools, book = self.pools, self.book
        own = pools.code(job.pool) if pools is not None else -1
        reclaim_quota = book is not None and book.within_nominal(job, milli)
        key = job_keys(job)[0]
        mine = self.pending_rank(job) if pre.by_service else 0.0
        out = []
        for job_id, r in self.request.snapshot.running.items():
            if job_id in self.victims:
                continue
            hosts = self.running_hosts(r)
            reason: ReasonCode | None = None
            if (
                pools is not None
                and own >= 0
                and r.spec.preemptible  # a pool reclaim never preempts a service (its SLO)
                and r.spec.pool != job.pool
                and any(int(pools.owner[h]) == own for h in hosts)
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
            if reason is None and pre.by_service and r.spec.preemptible:
                rank = self.running_rank(r)
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

    def view(self) -> GittinsView | None:
        """The cycle's Gittins ranking (made once, for ``gittins`` only)."""
        req = self.request
        if req.config.policy != "gittins":
            return None
        if self._view is None:
            self._view = gittins_view(req.snapshot, self.now, req.config, self.sh)
        return self._view

    def pending_rank(self, job: JobSpec) -> float:
        """The job's service rank (``policies.service_rank``; the LAS queue unless the policy is ``gittins``)
        from the service it had before."""
        snap, req = self.request.snapshot, self.request
        return service_rank(job, snap.attained_gpu_s.get(job.job_id, 0.0), req.config, self.sh, view=self.view())

    def running_rank(self, r: RunningJob) -> float:
        """A running job's service rank, counting the service of its current run."""
        got = self._run_queue.get(r.spec.job_id)
        if got is None:
            snap, jid = self.request.snapshot, r.spec.job_id
            service = snap.attained_gpu_s.get(jid, 0.0) + r.runtime_s(self.now) * r.gpu_milli / MILLI_PER_GPU
            got = self._run_queue[jid] = service_rank(
                r.spec, service, self.request.config, self.sh, running=True, view=self.view()
            )
        return got

    # ------------------------------------------------------------ one job

    def one(self, job: JobSpec, base: BoolArray | None, base_key: Shape) -> None:
        sh, now, cap, seen = self.sh, self.now, self.cap, self.refusals
        runtime = job.runtime_with(job.tasks, sh.default_runtime_s)
        if job.deadline_s is not None and sh.refuse_infeasible_deadlines and now + runtime > job.deadline_s:
            msg = (
                f"needs {runtime:.0f} s; started now it ends at t={now + runtime:.0f}, "
                f"after its deadline t={job.deadline_s:.0f}"
            )
            self.waiting.append(Waiting(job.job_id, ReasonCode.DEADLINE_INFEASIBLE, msg))
            return
        milli = job.gpu_milli
        if self.book is not None:
            verdict = self.book.check(job, milli)
            if not verdict.ok:
                self.waiting.append(Waiting(job.job_id, ReasonCode.QUOTA_EXCEEDED, verdict.message))
                return
        sk = self.shape_id(job)
        own = self.owned(job.pool)
        # The reservation mask changes only when a reservation is added; its key says which one it is.
        resv_key = (len(self.reservations), now + runtime) if self.reservations else None
        sizes = self.sizes(job)
        pre = sh.preemption
        # Everything else a refusal of this job depends on, besides the cycle's state: while nothing changes,
        # a job like an earlier refused one is refused alike. Tenant and priority only matter to preemption.
        who = (
            (job.tenant, int(job.priority), self.pending_rank(job) if pre.by_service else 0.0)
            if pre.enabled and self.preemptors < pre.max_preemptors_per_cycle
            else None
        )
        # A service (not preemptible) never borrows another pool's hosts, so it may be refused where others fit.
        outcome_key = ("outcome", sk, job.pool, job.preemptible, resv_key, tuple(sizes), who)
        known = seen.answer(outcome_key)
        if known is not None:
            self.waiting.append(Waiting(job.job_id, known[0], known[1]))
            return
        free_of_resv: BoolArray | None = None
        if resv_key is not None:
            free_of_resv = self.reserved_from >= now + runtime
        pools: list[str | None] = [job.pool] if own is not None else []  # None: any host
        # Lent hosts are only for preemptible work: a service placed there would be a borrower the owner
        # reclaims, which its SLO forbids.
        if own is None or (sh.lend_pools and job.preemptible):
            pools.append(None)
        for k in sizes:
            for pool in pools:
                # Lent hosts depend on the job's pool when some pool keeps hosts for its demand.
                lent_key = None if pool is not None or self.pools is None or self.pools.kept is None else job.pool
                key = ("place", sk, k, pool, lent_key, resv_key)
                if seen.refused(key):
                    continue
                mask = self.narrowed(base, base_key, pool) if pool is not None else self.lent(base, base_key, job.pool)
                need = make_need(job, cap, _and(mask, free_of_resv))
                if k != job.tasks:
                    need = dataclasses.replace(need, tasks=k)
                picks = self.try_place(need)
                if picks is not None:
                    self.allocs.append(allocation(cap, need, picks))
                    if self.book is not None:
                        self.book.add(job, milli * k // job.tasks)
                    seen.bump()
                    return
                seen.refuse(key, need)
        wide = _Wide(job, cap, base)  # the job on its host mask alone, built only where a question needs it
        if free_of_resv is not None and self.fits_wide(wide, sk):
            first = min(self.reservations, key=lambda r: r.start_s)
            self.waiting.append(
                Waiting(
                    job.job_id,
                    ReasonCode.RESERVED,
                    f"fits now, but expected to run until t={now + runtime:.0f}, past the reservation of "
                    f"{first.job_id} from t={first.start_s:.0f}",
                )
            )
            seen.answered(outcome_key, (self.waiting[-1].reason, self.waiting[-1].message))
            return
        if self.preempt(job, milli, self.narrowed(base, base_key, job.pool) if own is not None else base, sk):
            return
        diagnosis = seen.answer(sk)
        if diagnosis is None:
            diagnosis = diagnose(cap, wide.need)
            seen.answered(sk, diagnosis)
        reason, msg = diagnosis
        mode = sh.backfill
        if reason in _RESERVABLE and (
            (mode is BackfillMode.EASY and not self.reservations)
            or (mode is BackfillMode.CONSERVATIVE and len(self.reservations) < sh.max_reservations)
        ):
            got = None
            if not seen.holds(("no reservation", sk)):
                got = reserve(cap, wide.need, self.placer, self.ctx, self.ends())
            if got is None:
                seen.note(("no reservation", sk))
            else:
                start, hosts = got
                names = tuple(cap.index.host_name(h) for h in hosts)
                self.reservations.append(Reservation(job.job_id, start, names))
                self.reserved_from[list(hosts)] = np.minimum(self.reserved_from[list(hosts)], start)
                msg = f"{msg}; holds a reservation of {len(hosts)} host(s) from t={start:.0f} (in {start - now:.0f} s)"
                reason = ReasonCode.WAITING_FOR_RESERVATION
                seen.bump()
        if reason is not ReasonCode.WAITING_FOR_RESERVATION:
            seen.answered(outcome_key, (reason, msg))
        self.waiting.append(Waiting(job.job_id, reason, msg))

    def fits_wide(self, wide: _Wide, sk: int) -> bool:
        """Whether the job would fit if it ignored reservations (remembered both ways until a change)."""
        seen = self.refusals
        if seen.holds(("fits", sk)):
            return True
        if seen.refused(("fits not", sk)):
            return False
        if self.fits(wide.need):
            seen.note(("fits", sk))
            return True
        seen.refuse(("fits not", sk), wide.need)
        return False

    def preempt(self, job: JobSpec, milli: int, mask: BoolArray | None, sk: int) -> bool:
        pre = self.sh.preemption
        if not pre.enabled or self.preemptors >= pre.max_preemptors_per_cycle:
            return False
        # Everything the candidates and the victim search depend on, besides the cycle's state.
        queue = self.pending_rank(job) if pre.by_service else 0.0
        key = ("no victims", sk, job.pool, job.tenant, int(job.priority), queue, milli)
        if self.refusals.holds(key):
            return False
        cands = self.candidates(job, milli)
        if not cands:
            self.refusals.note(key)
            return False
        need = make_need(job, self.cap, mask)
        victims = find_victims(self.cap, need, self.placer, self.ctx, cands, pre.max_victims_per_job)
        if not victims:
            self.refusals.note(key)
            return False
        self.refusals.bump()
        self.preemptors += 1
        due = job.submit_time_s + pre.grace_s
        names = ", ".join(v.running.spec.job_id for v in victims)
        gpus = sum(v.running.gpu_milli for v in victims) / MILLI_PER_GPU
        waits = False
        for v in victims:
            vid = v.running.spec.job_id
            self.victims.add(vid)
            why = f"preempted for {job.job_id} ({v.reason.value}): frees {gpus:g} GPUs with {names}"
            if v.reason in _RECLAIMS and self.now < due:
                waits = True
                if vid not in self.signalled:
                    self.signalled.add(vid)
                    self.signals.append(Signal(vid, SignalKind.CHECKPOINT, v.reason, why, due))
            else:
                self.preemptions.append(Preemption(vid, v.reason, why))
        self._ends = None
        msg = (
            f"signalled {len(victims)} job(s) ({names}) to checkpoint; they are preempted at t={due:.0f}"
            if waits
            else f"preempted {len(victims)} job(s) ({names}) to free {gpus:g} GPUs; placed once they are gone"
        )
        self.waiting.append(Waiting(job.job_id, ReasonCode.PREEMPTING, msg))
        return True

    # ------------------------------------------------------------ the cycle

    def run(self) -> ScheduleResult:
        req, cfg, snap = self.request, self.request.config, self.request.snapshot
        if self.pools is not None:
            pre, sig = _window_reclaims(req, self.sh, self.cap, self.pools)
            self.preemptions += pre
            self.signals += sig
            self.signalled.update(s.job_id for s in sig)
            self.victims.update(p.job_id for p in pre)
        queue = order(self.policy, req.pending, self.now, snap, cfg, self.sh)
        if self.placer.uses_mix:
            self.ctx = dataclasses.replace(self.ctx, mix=cycle_mix(req.workload_mix, queue, snap.index))
        masks: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], BoolArray | None] = {}
        for pos, job in enumerate(queue):
            if len(self.allocs) >= cfg.max_placements_per_cycle:
                msg = f"not considered: this cycle placed its limit of {cfg.max_placements_per_cycle} jobs first"
                self.waiting.extend(Waiting(j.job_id, ReasonCode.CYCLE_LIMIT, msg) for j in queue[pos:])
                break
            key = (job.gpu_models, job.node_selector)
            if key not in masks:
                masks[key] = host_mask(self.cap, job, snap.host_labels)
            before = len(self.allocs)
            self.one(job, masks[key], key)
            if cfg.strict and len(self.allocs) == before:
                msg = f"waits behind {job.job_id}, which does not fit (strict ordering)"
                self.waiting.extend(Waiting(j.job_id, ReasonCode.BLOCKED, msg) for j in queue[pos + 1 :])
                break
        return ScheduleResult(
            tuple(self.allocs),
            tuple(self.preemptions),
            tuple(self.waiting),
            snap.version,
            tuple(self.signals),
            tuple(self.reservations),
        )


def schedule_shared(request: ScheduleRequest, *, remember_refusals: bool = True) -> ScheduleResult:
    """The sharing cycle. ``remember_refusals=False`` decides every job afresh: slower, the same result
    (tests compare the two)."""
    sh = request.sharing
    if sh is None:
        raise JobSpecError("the sharing cycle needs request.sharing", source="schedule request")
    seen: set[str] = set()
    for job in request.pending:
        if job.job_id in seen:
            raise JobSpecError(f"job {job.job_id} is pending twice in one request", source="schedule request")
        seen.add(job.job_id)
    return _Cycle(request, sh, remember=remember_refusals).run()
