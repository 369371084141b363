"""One cycle's skeleton for both worlds: measure the inputs, ``schedule()``, apply what it decided.

The server's loop (``server/loop.py``) and the simulator's engine (``sim/engine.py``) each own a
``CycleDriver`` and call ``run_cycle`` with their clock's ``now_s``, their queue and an ``Actuator``: the
server's assumes each decision in its ``ClusterState``, persists it and lets agents act after the commit;
the simulator's applies it to the same ``ClusterState`` and to its simulated world. Everything both need
lives here once: the per-cycle inputs (decayed usage per tenant; finished jobs' GPU-service for a policy
that ``uses_service_history``), the order decisions are applied in (preemptions, then placements, then
checkpoint signals, each signal once), and the report.

Pure like the rest of the scheduler: no clock, no I/O; all effects go through the actuator, which the
caller provides. It lives here, not in a package of its own, because both worlds may import the
scheduler and neither may import the other.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from gpupool.cluster.snapshot import ClusterSnapshot
from gpupool.domain.jobs import MILLI_PER_GPU, Allocation, JobSpec
from gpupool.domain.sharing import PoolDemand, decayed
from gpupool.scheduler.cycle import schedule
from gpupool.scheduler.elastic import ElasticPlanner, ElasticStep
from gpupool.scheduler.gittins import HistoryBuilder, ServiceHistory
from gpupool.scheduler.policies import get_policy
from gpupool.scheduler.queue import QueueIndex
from gpupool.scheduler.types import (
    CycleInputs,
    Ending,
    Preemption,
    QueueView,
    SchedulerConfig,
    ScheduleRequest,
    ScheduleResult,
    SharingPolicy,
    Signal,
    Waiting,
)


class Actuator(Protocol):
    """What a world does with one cycle's decisions. ``end``, ``preempt`` and ``place`` return whether it took
    effect (the server's store may refuse a write; the next cycle then starts from what is stored)."""

    def end(self, ending: Ending, now_s: float) -> bool:
        """Stop a running job past its time limit (state timeout) or cancel a pending one whose dependency
        can never be met, with the ending's reason."""
        ...

    def preempt(self, preemption: Preemption, now_s: float) -> bool: ...

    def place(self, allocation: Allocation, now_s: float) -> bool: ...

    def signal(self, signal: Signal, now_s: float) -> bool:
        """A checkpoint signal, once per (job, preemption time) that took effect (the scheduler repeats it
        every cycle until the preemption); False when the job is not running here (asked again next cycle)."""
        ...

    def waiting(self, waiting: Sequence[Waiting]) -> None:
        """Every pending job not placed, with its reason (all of them, every cycle)."""
        ...


@dataclass(frozen=True, slots=True)
class CycleRun:
    request: ScheduleRequest  # what ``schedule()`` was asked (its snapshot, queue and inputs)
    result: ScheduleResult
    placed: int  # placements the actuator applied
    preempted: int  # preemptions the actuator applied
    ended: int = 0  # endings (time limits, dependencies never met) the actuator applied


class UsageMeter:
    """Decayed GPU-seconds per tenant (``fair``'s history), folded in from the jobs that hold GPUs each cycle."""

    __slots__ = ("_at", "_half_life_s", "_usage")

    def __init__(self, half_life_s: float) -> None:
        self._half_life_s = half_life_s
        self._usage: dict[str, float] = {}
        self._at: float | None = None

    def seed(self, usage_gpu_s: Mapping[str, float], at_s: float) -> None:
        """Carry on from usage measured elsewhere (another driver's last cycle) as of ``at_s``."""
        self._usage = dict(usage_gpu_s)
        self._at = at_s

    def fold(self, snap: ClusterSnapshot, now_s: float) -> MappingProxyType[str, float]:
        elapsed = 0.0 if self._at is None else max(0.0, now_s - self._at)
        self._at = now_s
        added: dict[str, float] = defaultdict(float)
        for r in snap.running.values():
            added[r.spec.tenant] += r.gpu_milli / MILLI_PER_GPU * elapsed
        for tenant in set(self._usage) | set(added):
            self._usage[tenant] = decayed(
                self._usage.get(tenant, 0.0), elapsed, added.get(tenant, 0.0), self._half_life_s
            )
        return MappingProxyType(dict(self._usage))


class CycleDriver:
    """Owned by one loop (not thread-safe). Keeps what both worlds measure across cycles."""

    def __init__(self, config: SchedulerConfig, usage_half_life_s: float) -> None:
        self.config = config
        # A policy that ranks by service (``gittins``) learns its distribution from completions.
        uses_history = get_policy(config.policy).uses_service_history
        self.history = HistoryBuilder(config.gittins) if uses_history else None
        self.usage = UsageMeter(usage_half_life_s)
        self._signalled: set[tuple[str, float]] = set()  # (job, preemption time) signalled already
        # The queue in the policy's order, kept from the state's pending feed when the order allows it.
        self.queue = QueueIndex.for_policy(config.policy)
        # Elastic jobs' sizes (ElasticFlow's minimum satisfactory share), decided before each cycle.
        self.elastic = ElasticPlanner()
        self._fixed_history: ServiceHistory | None = None
        self.last_inputs: CycleInputs | None = None  # what the last cycle measured (a projection resumes from it)

    def resume(self, inputs: CycleInputs, at_s: float) -> None:
        """Carry on from another driver's last cycle (``inputs`` as it measured them at ``at_s``): the forward
        projection decides as the live loop would. Its service history stays as given (the few completions a
        projection would add are not learned)."""
        self.usage.seed(inputs.usage_gpu_s, at_s)
        self._fixed_history = inputs.service_history

    def _kept(self, snapshot: ClusterSnapshot, pending: Sequence[JobSpec]) -> QueueIndex | None:
        """The kept queue brought up to date, when ``pending`` is the snapshot's own queue (the same tuple: a
        caller that filtered it gets the cycle's own sort) and the snapshot says how it came about."""
        if self.queue is None or pending is not snapshot.pending or not self.queue.sync(snapshot):
            return None
        return self.queue

    def finished(self, spec: JobSpec, service_gpu_s: float) -> None:
        """A job finished (not failed or cancelled) after ``service_gpu_s`` GPU-seconds over all its runs."""
        if self.history is not None:
            self.history.finished(spec.total_gpus, service_gpu_s, spec.submit_time_s)

    def run_cycle(
        self,
        snapshot: ClusterSnapshot,
        pending: Sequence[JobSpec],
        sharing: SharingPolicy,
        actuator: Actuator,
        now_s: float,
        *,
        pool_demand: tuple[PoolDemand, ...] = (),
    ) -> CycleRun:
        history = self._fixed_history
        if history is None and self.history is not None:
            history = self.history.history()
        inputs = CycleInputs(self.usage.fold(snapshot, now_s), pool_demand, history)
        kept = self._kept(snapshot, pending)
        queued = kept.elastic > 0 if kept is not None else None
        step = ElasticStep.run(self.elastic, snapshot, pending, actuator, now_s, queued=queued)
        # The elastic plan's queue is its own (jobs resized, some left out): the cycle sorts it.
        view: QueueView | None = kept.view() if kept is not None and step is None else None
        pending = step.pending if step is not None else pending
        self.last_inputs = inputs
        request = ScheduleRequest(snapshot, tuple(pending), now_s, self.config, sharing, inputs, queue=view)
        result = schedule(request)
        # A job stopped at its time limit gets its signal first (if no earlier cycle gave it), then its stop.
        ending = {e.job_id for e in result.endings}
        signalled = set()
        for s in result.signals:
            key = (s.job_id, s.preempt_at_s)
            if s.job_id in ending and (key in self._signalled or actuator.signal(s, now_s)):
                signalled.add(key)
        ended = sum(1 for e in result.endings if actuator.end(e, now_s))
        preempted = sum(1 for p in result.preemptions if actuator.preempt(p, now_s))
        placed = sum(1 for a in result.placements if actuator.place(a, now_s))
        for s in result.signals:
            key = (s.job_id, s.preempt_at_s)
            if s.job_id not in ending and (key in self._signalled or actuator.signal(s, now_s)):
                signalled.add(key)
        self._signalled = signalled
        if step is None:
            actuator.waiting(result.waiting)
            return CycleRun(request, result, placed, preempted, ended)
        actuator.waiting((*result.waiting, *step.waiting))
        return CycleRun(request, result, placed, preempted + step.resized, ended + step.ended)
