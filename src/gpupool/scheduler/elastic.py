"""Elastic deadline jobs, ElasticFlow's way (ASPLOS'23): the fewest GPUs that still meet each deadline.

Each cycle, before ``schedule()``, the driver asks ``ElasticPlanner.plan`` what size every elastic job should
run at now (``domain/elastic.py``: its sizes and its throughput curve):

1. **Minimum satisfactory share.** Deadline jobs already admitted, earliest deadline first, each take the
   fewest GPUs of its curve that finish its remaining work by its deadline, on a profile of the GPUs free
   over time (running non-elastic jobs hold theirs until their expected end). A running job starts now (a
   new size costs the restart); a waiting one at the earliest moment its GPUs are free.
2. **Admission.** A new deadline job is admitted only if it, too, gets such a share with every admitted job
   still holding its own; otherwise it is ended now (``DEADLINE_INFEASIBLE``): a strict deadline missed is
   worth nothing, and the GPUs it would hold are others' deadlines. So the admitted set is the most jobs
   that can all meet their deadlines, in arrival order.
3. **What is left** goes first to best-effort elastic jobs (no deadline) at their smallest size, then, one
   step of a curve at a time, to the job whose completion rate (1 / remaining time) gains most per GPU,
   as long as every reservation of step 1 still fits. A running job keeps a size above its share while
   the GPUs allow (a resize costs a restart), and grows only when that saves more than the restart.

A running job whose size changes is resized at a checkpoint: a CHECKPOINT signal now, then a stop
(``RESIZE``) and a placement at the new size, whose restart the world charges. Progress is counted by the
curve: the work of each run is ``rate(size) x seconds run``, credited when the run ends at a checkpoint.
Deterministic: no clock, no randomness; the planner keeps only what it was told across cycles.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from gpupool.cluster.snapshot import NODE_UP, ClusterSnapshot, RunningJob
from gpupool.domain.elastic import Elastic
from gpupool.domain.jobs import JobSpec, Scope, TopologyMode, TopologyRequirement
from gpupool.scheduler.backfill import expected_end
from gpupool.scheduler.deadlines import RESTART_S
from gpupool.scheduler.types import Ending, Preemption, ReasonCode, Signal, SignalKind, Waiting


@dataclass(frozen=True, slots=True)
class ElasticConfig:
    """What the planner assumes of the world. ``restart_s``: a resize's stop + relaunch + checkpoint load (the
    simulator's default restart overhead); ``margin_s``: kept between a planned finish and its deadline;
    ``min_saving``: a running job is grown only if that cuts its remaining time by at least this share."""

    restart_s: float = RESTART_S
    margin_s: float = 5.0
    min_saving: float = 0.1
    default_runtime_s: float = 3600.0  # an elastic job without an estimate (no deadline) is planned as this long


@dataclass(frozen=True, slots=True)
class ElasticPlan:
    """``sizes``: GPUs each elastic job runs at from now (running or to be placed now); ``resizes``: running
    jobs whose size changes; ``rejected``: deadline jobs refused (or no longer able to finish in time);
    ``held``: waiting jobs not placed now (admitted ones whose share starts later, best-effort ones that
    found no room)."""

    sizes: Mapping[str, int] = field(default_factory=dict)
    resizes: tuple[str, ...] = ()
    rejected: tuple[str, ...] = ()
    held: frozenset[str] = frozenset()
    messages: Mapping[str, str] = field(default_factory=dict)


def useful_sizes(elastic: Elastic, gpus_per_task: int) -> tuple[int, ...]:
    """The job's sizes that run faster than every smaller one (a curve past its peak only costs GPUs)."""
    out: list[int] = []
    best = 0.0
    for g in elastic.sizes(gpus_per_task):
        r = elastic.curve.rate(g)
        if r > best:
            out.append(g)
            best = r
    return tuple(out)


class Profile:
    """GPUs in use over time from ``now``: a step function (breakpoints ascending, use on [t_i, t_i+1))."""

    __slots__ = ("capacity", "times", "used")

    def __init__(self, capacity: int, now_s: float) -> None:
        self.capacity = capacity
        self.times: list[float] = [now_s]
        self.used: list[int] = [0]

    def _cut(self, t: float) -> int:
        i = bisect.bisect_right(self.times, t) - 1
        if self.times[i] != t:
            self.times.insert(i + 1, t)
            self.used.insert(i + 1, self.used[i])
            i += 1
        return i

    def add(self, start: float, end: float, gpus: int) -> None:
        if end <= start or gpus == 0:
            return
        i, j = self._cut(start), self._cut(end)
        for k in range(i, j):
            self.used[k] += gpus

    def peak(self, start: float, end: float) -> int:
        i = max(0, bisect.bisect_right(self.times, start) - 1)
        j = bisect.bisect_left(self.times, end)
        return max(self.used[i:j], default=self.used[i])

    def earliest(self, start: float, length: float, gpus: int, latest_end: float) -> float | None:
        """The earliest moment >= ``start`` with ``gpus`` free for ``length`` seconds, ending by ``latest_end``."""
        i = max(0, bisect.bisect_right(self.times, start) - 1)
        candidates = [start] + [t for t in self.times[i + 1 :] if t > start]
        for s in candidates:
            if s + length > latest_end:
                return None
            if self.peak(s, s + length) + gpus <= self.capacity:
                return s
        return None


@dataclass(slots=True)
class _Job:
    spec: JobSpec
    elastic: Elastic
    sizes: tuple[int, ...]
    rate0: float  # fraction of the work per second at the asked size
    remaining: float  # fraction of the work left
    current: int  # GPUs held now (0: waiting)
    restarted: bool  # a waiting job that ran before pays the restart when placed again

    def rate(self, gpus: int) -> float:
        return self.rate0 * self.elastic.curve.rate(gpus) / self.elastic.curve.rate(self.spec.total_gpus)

    def duration(self, gpus: int, cfg: ElasticConfig) -> float:
        """Seconds from now to its finish at ``gpus``, the restart included when it costs one."""
        cost = cfg.restart_s if (self.current and gpus != self.current) or (not self.current and self.restarted) else 0
        return cost + self.remaining / self.rate(gpus)


class ElasticPlanner:
    """Owned by the cycle driver: what it was told across cycles (work done per job, who was admitted)."""

    __slots__ = ("_admitted", "_done", "_seen", "config")

    def __init__(self, config: ElasticConfig | None = None) -> None:
        self.config = config or ElasticConfig()
        self._done: dict[str, float] = {}  # fraction of the work done by runs that ended
        self._admitted: set[str] = set()
        self._seen: dict[str, RunningJob] = {}  # elastic jobs running at the last plan

    def active(self, snapshot: ClusterSnapshot | None = None) -> bool:
        """Whether elastic jobs ran at the last plan or run now: a cycle may resize them even with an empty
        queue (a finished job's GPUs go to the others)."""
        if self._seen:
            return True
        return snapshot is not None and any(r.spec.elastic is not None for r in snapshot.running.values())

    def runtime(self, spec: JobSpec, gpus: int) -> float:
        """Seconds its remaining work takes at ``gpus`` by its curve (no restart), for the cycle's estimate."""
        el = spec.elastic
        assert el is not None
        done = self._done.get(spec.job_id, 0.0)
        return max(0.0, 1.0 - done) / (self._rate0(spec) * el.curve.rate(gpus) / el.curve.rate(spec.total_gpus))

    # ------------------------------------------------------------------ progress

    def _rate0(self, spec: JobSpec) -> float:
        est = spec.estimated_runtime_s if spec.estimated_runtime_s is not None else self.config.default_runtime_s
        return 1.0 / est

    def _run_work(self, r: RunningJob, until_s: float) -> float:
        """Fraction of the work the run ``r`` did by ``until_s``, by its curve at its size."""
        el = r.spec.elastic
        if el is None or r.started_at_s is None:
            return 0.0
        gpus = r.gpu_milli // 1000
        if not el.curve.has(gpus):
            return 0.0
        rate = self._rate0(r.spec) * el.curve.rate(gpus) / el.curve.rate(r.spec.total_gpus)
        return rate * max(0.0, until_s - r.started_at_s)

    def _settle(self, snapshot: ClusterSnapshot) -> None:
        """Credit the runs that ended since the last plan (not by a resize: those were credited then) up to
        their last checkpoint, and forget jobs that left."""
        pending = {s.job_id for s in snapshot.pending}
        for key, r in list(self._seen.items()):
            if key in snapshot.running:
                continue
            del self._seen[key]
            if key in pending and r.last_checkpoint_s is not None:
                self._done[key] = self._done.get(key, 0.0) + self._run_work(r, r.last_checkpoint_s)
            elif key not in pending:
                self._done.pop(key, None)
                self._admitted.discard(key)

    def resized(self, r: RunningJob, now_s: float) -> None:
        """A running job is stopped at a checkpoint now to change its size: its run's work is saved."""
        self._done[r.spec.job_id] = self._done.get(r.spec.job_id, 0.0) + self._run_work(r, now_s)
        self._seen.pop(r.spec.job_id, None)

    # ------------------------------------------------------------------ the plan

    def plan(self, snapshot: ClusterSnapshot, pending: Sequence[JobSpec], now_s: float) -> ElasticPlan:
        self._settle(snapshot)
        cfg = self.config
        ix = snapshot.index
        capacity = int(ix.host_gpus[snapshot.node_state == NODE_UP].sum())
        profile = Profile(capacity, now_s)
        jobs: list[_Job] = []
        for r in snapshot.running.values():
            gpus = r.gpu_milli // 1000
            if r.spec.elastic is None:
                profile.add(now_s, expected_end(r, now_s, cfg.default_runtime_s), max(1, gpus))
                continue
            self._seen[r.spec.job_id] = r
            jobs.append(self._job(r.spec, gpus, self._run_work(r, now_s), snapshot))
        jobs.extend(self._job(s, 0, 0.0, snapshot) for s in pending if s.elastic is not None)
        if not jobs:
            return ElasticPlan()
        jobs.sort(
            key=lambda j: (j.spec.deadline_s is None, j.spec.deadline_s or 0.0, j.spec.submit_time_s, j.spec.job_id)
        )
        base: dict[str, tuple[int, float]] = {}  # job -> (GPUs, start)
        rejected: list[str] = []
        messages: dict[str, str] = {}
        # Admitted jobs first, then the new ones: a newcomer never takes an admitted job's share. A running
        # deadline job this planner never admitted was admitted by another (a new leader's first plans): the
        # work of its earlier runs is unknown here, so it is kept at its size rather than refused.
        inherited = {
            j.spec.job_id
            for j in jobs
            if j.current and j.spec.deadline_s is not None and j.spec.job_id not in self._admitted
        }
        admitted = self._admitted | inherited  # as of the last plan: each job is decided once here
        for admitted_pass in (True, False):
            for j in jobs:
                key = j.spec.job_id
                if j.spec.deadline_s is None or (key in admitted) is not admitted_pass:
                    continue
                share = self._share(j, profile, now_s)
                if share is None and key in inherited:
                    share = (j.current, now_s)
                if share is None:
                    rejected.append(key)
                    self._admitted.discard(key)
                    messages[key] = self._refusal(j, capacity)
                    continue
                g, start = share
                self._admitted.add(key)
                base[key] = share
                profile.add(start, start + j.duration(g, cfg), g)
        sizes = {k: g for k, (g, s) in base.items() if s <= now_s}
        # A running job refused (it can no longer finish in time) is ended: it gets no GPUs and no resize.
        refused = set(rejected)
        self._fill([j for j in jobs if j.spec.job_id not in refused], sizes, base, profile, now_s)
        resizes = tuple(
            k for j in jobs if j.current and sizes.get(k := j.spec.job_id, 0) != j.current and k not in refused
        )
        held = frozenset(j.spec.job_id for j in jobs if not j.current and j.spec.job_id not in sizes)
        return ElasticPlan(sizes, resizes, tuple(rejected), held - refused, messages)

    def _job(self, spec: JobSpec, current: int, running_work: float, snapshot: ClusterSnapshot) -> _Job:
        el = spec.elastic
        assert el is not None
        done = self._done.get(spec.job_id, 0.0) + running_work
        restarted = snapshot.preemption_count.get(spec.job_id, 0) > 0
        return _Job(
            spec, el, useful_sizes(el, spec.gpus_per_task), self._rate0(spec), max(1e-9, 1.0 - done), current, restarted
        )

    def _share(self, j: _Job, profile: Profile, now_s: float) -> tuple[int, float] | None:
        """(GPUs, start) of the fewest GPUs that meet the deadline, or None when no size does."""
        assert j.spec.deadline_s is not None
        latest = j.spec.deadline_s - self.config.margin_s
        for g in j.sizes:
            length = j.duration(g, self.config)
            if j.current:
                if now_s + length <= latest and profile.peak(now_s, now_s + length) + g <= profile.capacity:
                    return g, now_s
                continue
            start = profile.earliest(now_s, length, g, latest)
            if start is not None:
                return g, start
        return None

    def _refusal(self, j: _Job, capacity: int) -> str:
        fastest = j.sizes[-1] if j.sizes else 0
        finish = j.duration(fastest, self.config) if fastest else math.inf
        return (
            f"cannot finish by its deadline t={j.spec.deadline_s:.0f} with the GPUs the admitted deadline jobs "
            f"leave (at best {fastest} GPUs: {finish:.0f} s of work left; {capacity} GPUs in the pool)"
        )

    def _fill(
        self,
        jobs: Sequence[_Job],
        sizes: dict[str, int],
        base: Mapping[str, tuple[int, float]],
        profile: Profile,
        now_s: float,
    ) -> None:
        """Hand what is left now to best-effort jobs, then to whoever gains most per GPU (module docstring)."""
        cfg = self.config
        # Each job's reservation in the profile: (GPUs, start, end); a change moves it to (new GPUs, now, ...).
        held = {k: (g, s, s + j.duration(g, cfg)) for j in jobs if (k := j.spec.job_id) in base for g, s in [base[k]]}

        def fits(j: _Job, new: int) -> bool:
            old = held.get(j.spec.job_id)
            if old is not None:
                profile.add(old[1], old[2], -old[0])
            ok = profile.peak(now_s, now_s + j.duration(new, cfg)) + new <= profile.capacity
            if old is not None:
                profile.add(old[1], old[2], old[0])
            return ok

        def take(j: _Job, new: int) -> None:
            key = j.spec.job_id
            old = held.get(key)
            if old is not None:
                profile.add(old[1], old[2], -old[0])
            end = now_s + j.duration(new, cfg)
            profile.add(now_s, end, new)
            held[key] = (new, now_s, end)
            sizes[key] = new

        # A running job keeps a size above its share while the GPUs allow it (a resize costs a restart);
        # then best-effort jobs get their smallest size.
        for j in jobs:
            g = sizes.get(j.spec.job_id, 0)
            if j.current and g < j.current and j.current in j.sizes and fits(j, j.current):
                take(j, j.current)
        for j in jobs:
            if j.spec.deadline_s is None and j.spec.job_id not in sizes and j.sizes and fits(j, j.sizes[0]):
                take(j, j.sizes[0])
        while True:
            best: tuple[float, str, _Job, int] | None = None
            for j in jobs:
                key = j.spec.job_id
                g = sizes.get(key, 0)
                nxt = next((s for s in j.sizes if s > g), 0) if g else 0
                if not nxt:
                    continue
                t0, t1 = j.duration(g, cfg), j.duration(nxt, cfg)
                if j.current and t1 > (1.0 - cfg.min_saving) * t0:
                    continue
                gain = (1.0 / t1 - 1.0 / t0) / (nxt - g)
                if gain > 0 and (best is None or (gain, key) > (best[0], best[1])) and fits(j, nxt):
                    best = (gain, key, j, nxt)
            if best is None:
                return
            take(best[2], best[3])


def sized_spec(spec: JobSpec, gpus: int, runtime_s: float, host_gpus: int) -> JobSpec:
    """``spec`` as this cycle places it: ``gpus`` GPUs in ranks of its own ``gpus_per_task`` (so a restarted
    job's ranks see the new world size), its estimate at that size and, unless it named a scope, one host
    required when it fits one (else one leaf preferred): its curve was measured so, and a gang of one-GPU
    ranks spread over hosts runs slower than the plan counts on (it waits for a host instead; the next
    cycle plans again)."""
    topology = spec.topology
    if topology.scope is Scope.ANY and gpus <= host_gpus:
        topology = TopologyRequirement(Scope.NVLINK, TopologyMode.REQUIRED)
    elif topology.scope is Scope.ANY:
        topology = TopologyRequirement(Scope.LEAF, TopologyMode.PREFERRED)
    return replace(
        spec,
        tasks=gpus // spec.gpus_per_task,
        estimated_runtime_s=max(runtime_s, 1e-3),
        elastic=None,
        topology=topology,
    )


_NO_ROOM = "no GPUs left by the deadline jobs' shares for its smallest size"


class _Actuator(Protocol):
    """The part of ``driver.Actuator`` a plan needs (the driver's protocol, restated to avoid a cycle)."""

    def end(self, ending: Ending, now_s: float) -> bool: ...

    def preempt(self, preemption: Preemption, now_s: float) -> bool: ...

    def signal(self, signal: Signal, now_s: float) -> bool: ...


@dataclass(frozen=True, slots=True)
class ElasticStep:
    """What one cycle's plan did before ``schedule()``: the queue the cycle places from (elastic jobs at their
    sizes, held and refused ones left out), the resizes and refusals applied, and the held jobs' reasons."""

    pending: tuple[JobSpec, ...]
    resized: int
    ended: int
    waiting: tuple[Waiting, ...]

    @staticmethod
    def run(
        planner: ElasticPlanner,
        snapshot: ClusterSnapshot,
        pending: Sequence[JobSpec],
        actuator: _Actuator,
        now_s: float,
        *,
        queued: bool | None = None,
    ) -> ElasticStep | None:
        """Plan, then apply: refusals end (``DEADLINE_INFEASIBLE``), resizes checkpoint and stop (``RESIZE``).
        None when no elastic job is running or waiting (the queue goes to the cycle untouched). ``queued``:
        whether an elastic job waits, when the caller counts them (None: the queue is looked through)."""
        if queued is None:
            queued = any(s.elastic is not None for s in pending)
        if not planner.active(snapshot) and not queued:
            return None
        plan = planner.plan(snapshot, pending, now_s)
        ended = 0
        for key in plan.rejected:
            msg = plan.messages.get(key, "cannot finish by its deadline")
            ended += actuator.end(Ending(key, ReasonCode.DEADLINE_INFEASIBLE, msg), now_s)
        resized = 0
        for key in plan.resizes:
            r = snapshot.running[key]
            msg = f"resized from {r.gpu_milli // 1000} to {plan.sizes.get(key, 0)} GPUs"
            actuator.signal(Signal(key, SignalKind.CHECKPOINT, ReasonCode.RESIZE, msg, now_s), now_s)
            if actuator.preempt(Preemption(key, ReasonCode.RESIZE, msg), now_s):
                planner.resized(r, now_s)
                resized += 1
        refused = set(plan.rejected)
        host_gpus = max(1, snapshot.index.max_gpus)
        queue: list[JobSpec] = []
        waiting: list[Waiting] = []
        for spec in pending:
            key = spec.job_id
            if spec.elastic is None:
                queue.append(spec)
            elif key in plan.sizes:
                queue.append(sized_spec(spec, plan.sizes[key], planner.runtime(spec, plan.sizes[key]), host_gpus))
            elif key in plan.held and key not in refused:
                why = "admitted; its share starts when GPUs free up" if spec.deadline_s is not None else _NO_ROOM
                waiting.append(Waiting(key, ReasonCode.NO_CAPACITY, why))
        return ElasticStep(tuple(queue), resized, ended, tuple(waiting))
