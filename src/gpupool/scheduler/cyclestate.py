"""The state of one scheduling cycle, and the per-cycle facts the stages share (masks, expected ends, ranks).

``Cycle`` is built from the request once; the stages (``scheduler.stages``) read it and record their
decisions in it. Everything here is for one cycle only and is dropped with it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from gpupool.cluster.snapshot import RunningJob
from gpupool.domain.jobs import MILLI_PER_GPU, Allocation, JobSpec, TopologyRequirement
from gpupool.scheduler.backfill import expected_end
from gpupool.scheduler.capacity import BoolArray, Capacity
from gpupool.scheduler.placement import Need, TaskPick, make_need
from gpupool.scheduler.placers import CycleContext, Placer, get_placer
from gpupool.scheduler.policies import QueuePolicy, ServiceRanker, get_policy
from gpupool.scheduler.pools import PoolMap, pool_busy, pool_map
from gpupool.scheduler.quotas import QuotaBook
from gpupool.scheduler.refusals import Refusals
from gpupool.scheduler.shapes import Shape, host_mask
from gpupool.scheduler.telemetry import penalties
from gpupool.scheduler.topowait import TopologyWait
from gpupool.scheduler.types import (
    BackfillMode,
    Ending,
    Preemption,
    QueueView,
    ReasonCode,
    Reservation,
    ScheduleRequest,
    Signal,
    Waiting,
)


class MaskKey(NamedTuple):
    """What a job's host mask depends on: allowed GPU models and the labels it selects."""

    gpu_models: tuple[str, ...]
    node_selector: tuple[tuple[str, str], ...]


ANY_HOST = MaskKey((), ())
UNDIAGNOSED = Waiting("", ReasonCode.NO_CAPACITY, "")  # a place in ``Cycle.waiting`` the last stage fills


class Ask(NamedTuple):
    """One job's question to this cycle, worked out once: the typed input of every stage."""

    job: JobSpec
    shape: int  # the cycle's small number for the job's shape (``Cycle.shape_ids``)
    base: BoolArray | None  # its host mask: allowed models and selected labels (None: every host)
    base_key: MaskKey
    runtime_s: float  # at its full size (the default runtime without an estimate)


def and_masks(a: BoolArray | None, b: BoolArray | None) -> BoolArray | None:
    if a is None:
        return b
    if b is None:
        return a
    out: BoolArray = a & b
    return out


def job_hosts(cap: Capacity, r: RunningJob) -> tuple[int, ...]:
    return tuple(dict.fromkeys(cap.index.host_index(t.host) for t in r.allocation.tasks))


class Wide:
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


def held_back(request: ScheduleRequest, view: QueueView | None) -> bool:
    """Whether some pending job has dependencies or an array cap (the kept queue counts them)."""
    if view is not None:
        return view.held > 0
    return any(j.after or j.array_cap for j in request.pending)


class Cycle:
    """Mutable state of one cycle: capacity, what was decided so far, and per-cycle memos."""

    def __init__(self, request: ScheduleRequest, *, remember: bool = True, view: QueueView | None = None) -> None:
        """``view``: the request's kept queue, when the cycle may use it (it says what the queue holds)."""
        self.request, self.sh, self.now = request, request.sharing, request.now_s
        cfg, snap, sh = request.config, request.snapshot, request.sharing
        self.policy: QueuePolicy = get_policy(cfg.policy)
        self.placer: Placer = get_placer(cfg.placer)
        self.cap = Capacity(snap, penalties(snap, cfg.telemetry))
        ix = snap.index
        # Gangs' topology for this cycle, decided on the capacity the cycle starts with (``scheduler.topowait``).
        self.topo = TopologyWait(snap, self.cap.free_whole, self.now, cfg.topology_wait_s)
        self.pools: PoolMap | None = (
            pool_map(ix, sh.calendar, self.now, request.inputs.pool_demand, pool_busy(ix, snap.running))
            if sh.calendar is not None
            else None
        )
        self.book = QuotaBook(sh.quotas, snap.running, require=sh.require_quota) if sh.quotas else None
        self.allocs: list[Allocation] = []
        self.preemptions: list[Preemption] = []
        self.signals: list[Signal] = []
        self.signalled: set[str] = set()
        self.waiting: list[Waiting] = []
        # The jobs the cycle did not visit (its placement limit, or strict ordering behind a job that does not
        # fit), all waiting with one reason and sentence: made into ``Waiting``s only when the result is read.
        self.unvisited: tuple[Sequence[JobSpec], ReasonCode, str] | None = None
        # Jobs waiting for want of capacity, with their place in ``waiting`` and their shape id: diagnosed at
        # the end. Three lists, not a list of tuples: a long blocked queue adds one entry per job per cycle.
        self.undiagnosed_at: list[int] = []
        self.undiagnosed_jobs: list[JobSpec] = []
        self.undiagnosed_shapes: list[int] = []
        self.endings: list[Ending] = []
        self._arrays: Counter[str] | None = None  # capped arrays' elements placed or running, made on first use
        self.masks: dict[MaskKey, BoolArray | None] = {ANY_HOST: None}  # host masks, made on first use
        self.victims: set[str] = set()
        self.reservations: list[Reservation] = []
        self.reserved_from = np.full(ix.n_hosts, np.inf, dtype=np.float64)
        self.preemptors = 0
        self.ctx = CycleContext(ix, np.arange(ix.n_hosts, dtype=np.int64), cfg.max_domains_tried, None)
        self.seen = Refusals(self.cap, enabled=remember)
        # Which stages can do anything in this cycle (a stage that cannot is not asked).
        # Deadline admission only asks deadline jobs; EASY or conservative backfill only reserves from running
        # jobs with estimates (``backfill.reserve``): without either, the defaults decide as the plain cycle.
        deadlines = sh.deadline_admission and (
            view.deadlines > 0
            if view is not None and view.deadlines is not None
            else any(j.deadline_s is not None for j in request.pending)
        )
        self.admits = self.book is not None or deadlines or held_back(request, view)
        reserves = sh.backfill is not BackfillMode.NONE and any(
            r.spec.estimated_runtime_s is not None for r in snap.running.values()
        )
        # Preemption needs a victim: a quota borrower (a reclaim) or a ``preemptible`` running job.
        self.may_preempt = sh.preemption.enabled and (
            self.book is not None or any(r.spec.preemptible for r in snap.running.values())
        )
        # Without pools, admission, preemption or backfill, whether a job is placed depends on its shape alone:
        # a shape refused is refused again (for as long as its place refusals hold, ``Refusals.blocked``).
        self.by_shape = self.pools is None and not self.admits and not self.may_preempt and not reserves
        self._ends: list[tuple[float, RunningJob]] | None = None
        # Per-cycle masks: a pool's hosts, and a host mask narrowed to a pool (both fixed for the cycle).
        self._owned: dict[str, BoolArray] = {}
        self._narrowed: dict[tuple[MaskKey, str], BoolArray | None] = {}
        self._lent: dict[tuple[MaskKey, str], BoolArray | None] = {}
        self._run_hosts: dict[str, tuple[int, ...]] = {}
        # A small number per shape: keys built from it hash in one step, not through the whole shape.
        self.shape_ids: dict[Shape, int] = {}
        self._ranker: ServiceRanker | None = None
        self._run_rank: dict[str, float] = {}

    def array_held(self, array_id: str) -> int:
        """How many elements of a capped array are placed or running, those placed by this cycle included."""
        if self._arrays is None:
            self._arrays = Counter(r.spec.array_id for r in self.request.snapshot.running.values() if r.spec.array_cap)
        return self._arrays[array_id]

    def array_placed(self, array_id: str) -> None:
        self.array_held(array_id)
        assert self._arrays is not None
        self._arrays[array_id] += 1

    def wait_for_capacity(self, job: JobSpec, shape_id: int) -> None:
        """The job waits; its reason comes from the capacity left at the end of the cycle."""
        self.undiagnosed_at.append(len(self.waiting))
        self.undiagnosed_jobs.append(job)
        self.undiagnosed_shapes.append(shape_id)
        self.waiting.append(UNDIAGNOSED)

    def ends(self) -> list[tuple[float, RunningJob]]:
        """Running jobs not preempted in this cycle, by expected end (backfill)."""
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

    def victims_changed(self) -> None:
        self._ends = None

    def placed_as(self, job: JobSpec) -> JobSpec:
        """The job as this cycle places it: with its topology for this cycle (``scheduler.topowait``)."""
        t = self.topology_for(job)
        return job if t is None else replace(job, topology=t)

    def topology_for(self, job: JobSpec) -> TopologyRequirement | None:
        """The topology the job is placed by in this cycle when not its own (None): what ``placed_as`` gives it,
        without the copy (a blocked queue needs only the job's shape)."""
        if job.tasks == 1:
            return None
        mkey, mask = self.mask(job)
        return self.topo.decision(job, mkey, mask)

    def mask(self, job: JobSpec) -> tuple[MaskKey, BoolArray | None]:
        """The job's host mask (allowed GPU models, selected labels; None: every host) and its key."""
        mkey = MaskKey(job.gpu_models, job.node_selector) if job.gpu_models or job.node_selector else ANY_HOST
        if mkey not in self.masks:
            self.masks[mkey] = host_mask(self.cap, job, self.request.snapshot.host_labels)
        return mkey, self.masks[mkey]

    def owned(self, pool: str) -> BoolArray | None:
        if self.pools is None:
            return None
        got = self._owned.get(pool)
        if got is None:
            got = self._owned[pool] = self.pools.owned_by(pool)
        return got

    def narrowed(self, ask: Ask, pool: str) -> BoolArray | None:
        """The job's host mask and the pool's hosts."""
        key = (ask.base_key, pool)
        if key not in self._narrowed:
            self._narrowed[key] = and_masks(ask.base, self.owned(pool))
        return self._narrowed[key]

    def lent(self, ask: Ask) -> BoolArray | None:
        """The job's host mask and the hosts a job of its pool may use beyond its own: none kept for another's
        demand."""
        if self.pools is None or self.pools.kept is None:
            return ask.base
        key = (ask.base_key, ask.job.pool)
        if key not in self._lent:
            self._lent[key] = and_masks(ask.base, self.pools.lendable_to(ask.job.pool))
        return self._lent[key]

    def running_hosts(self, r: RunningJob) -> tuple[int, ...]:
        got = self._run_hosts.get(r.spec.job_id)
        if got is None:
            got = self._run_hosts[r.spec.job_id] = job_hosts(self.cap, r)
        return got

    def try_place(self, need: Need) -> list[TaskPick] | None:
        """The placer's picks for ``need``, taken from capacity; None leaves capacity as it was."""
        cap = self.cap
        if not need.share and need.total > cap.total_free_whole():
            return None
        mark = cap.mark()
        picks = self.placer.place(cap, need, self.ctx)
        if picks is None:
            cap.undo(mark)  # a placer must leave nothing behind; this makes sure
        return picks

    def fits(self, need: Need) -> bool:
        mark = self.cap.mark()
        picks = self.try_place(need)
        self.cap.undo(mark)
        return picks is not None

    def sizes(self, ask: Ask) -> tuple[int, ...]:
        """Task counts to try: all of them; with deadline admission, fewer for an elastic deadline job while
        the smaller size still meets its deadline."""
        job = ask.job
        if job.deadline_s is None or job.fewest_tasks >= job.tasks or not self.sh.deadline_admission:
            return (job.tasks,)
        dl, default, start = job.deadline_s, self.sh.default_runtime_s, self.now + self.sh.launch_latency_s
        smaller = (
            k for k in range(job.tasks - 1, job.fewest_tasks - 1, -1) if start + job.runtime_with(k, default) <= dl
        )
        return (job.tasks, *smaller)

    def ranker(self) -> ServiceRanker:
        """The policy's service rank for this cycle, made on first use (preemption by service only)."""
        if self._ranker is None:
            self._ranker = self.policy.service_ranker(self.request)
        return self._ranker

    def pending_rank(self, job: JobSpec) -> float:
        """A waiting job's service rank, from the service it had before."""
        return self.ranker()(job, self.request.snapshot.attained_gpu_s.get(job.job_id, 0.0), False)

    def running_rank(self, r: RunningJob) -> float:
        """A running job's service rank, counting the service of its current run."""
        jid = r.spec.job_id
        got = self._run_rank.get(jid)
        if got is None:
            service = self.request.snapshot.attained_gpu_s.get(jid, 0.0)
            service += r.runtime_s(self.now) * r.gpu_milli / MILLI_PER_GPU
            got = self._run_rank[jid] = self.ranker()(r.spec, service, True)
        return got
