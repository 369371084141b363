"""Expected start times: the live state run forward, with no new arrivals, through the production cycle.

For each job waiting at ``now``: when would the scheduler start it if nothing new arrived and every running
job ended when expected (``scheduler.estimates``: the user's estimate, the history of similar runs, the time
limit)? ``project`` forks the live state (``ClusterState.resumed``, from the loop's immutable snapshot), hands
a ``CycleDriver`` the live loop's configuration, sharing policy and measured inputs, and runs the same cycles
the server and the simulator run (``CycleDriver.run_cycle`` -> ``schedule()``) at each moment something
frees GPUs: a running job's expected end plus the exit latency, releasing ranks confirmed gone, a pool
calendar's boundary. A job placed at ``t`` is expected to start at ``t`` plus the launch latency; the jobs
placed on the way are expected to run their own expected runtime, so the ones behind them move too.

What the projection does not know stays unknown (None), never a made-up time:

- a running (or projected) job with no estimate, no history and no time limit never ends in the projection,
  so a job that only its GPUs could start gets None;
- the run stops at ``horizon_s`` past ``now`` and after ``max_cycles`` cycles (its cost bound: each cycle is one
  ``schedule()`` of the remaining queue); the jobs not placed by then get None. Cycles are at least
  ``step_fraction`` of the lead time apart (0.5%: a start 10 h ahead is resolved to minutes, and a long queue
  takes fewer cycles); 0 makes one at every event, the simulator's own resolution;
- a job that the cycle cancels (a dependency that can never be met) gets None.

It lives in ``scheduler`` beside the driver for the driver's reason: the server computes it and may not import
the simulator. Pure like the rest: ``now`` comes in; no clock, I/O or randomness; the same input gives the
same projection.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from gpupool.cluster import ClusterSnapshot, ClusterState
from gpupool.domain.errors import GpupoolError
from gpupool.domain.events import (
    JobCancelled,
    JobCheckpointed,
    JobEnded,
    JobFinished,
    JobPlaced,
    JobPreempted,
    JobStarted,
    RanksReleased,
    RanksReleasing,
)
from gpupool.domain.jobs import Allocation, JobSpec
from gpupool.domain.states import JobState
from gpupool.scheduler.driver import CycleDriver
from gpupool.scheduler.estimates import NO_HISTORY, RuntimeHistory, expected_runtime_s
from gpupool.scheduler.types import (
    CycleInputs,
    Ending,
    Preemption,
    ReasonCode,
    SchedulerConfig,
    SharingPolicy,
    Signal,
    Waiting,
)

# What the real server and agents take, measured by benchmarks/launch_latency.py (a real server, 16 emulated
# agents, 200 jobs; docs/benchmarks.md, "Launch latency (issue 13)"): the median of placed -> the workload's
# first instruction (0.35-0.43 s at load 29-37 on the 2-core build box, 0.16 s at load 21), and of the last
# rank's exit -> the job stored finished, its GPUs free for the next cycle (0.56-0.58 s at load 29-32).
# A workload's own start-up beyond a Python interpreter's (a container pull, NCCL init) is not in them:
# ``--launch-latency`` adds it. The simulator's world (``sim.world``) uses them too, and so does ``gpupool sim``.
LAUNCH_LATENCY_S = 0.4
EXIT_LATENCY_S = 0.57
_MAX_ROUNDS = 4  # cycles at one instant: the first, and follow-ups while they preempt or end (as the engine)
# Event kinds, in the order they are handled at one instant.
_RELEASE, _FREE, _START, _WAKE = range(4)


@dataclass(frozen=True, slots=True)
class ProjectionConfig:
    horizon_s: float = 7 * 86400.0  # how far past ``now`` the projection looks
    max_cycles: int = 1000  # its cost bound: cycles (one ``schedule()`` each) it may run
    # Cycles at least this fraction of the lead time apart (0: one at every event): the events in between are
    # folded in at the next cycle, so a start 10 h ahead may come up to 3 min late per cycle on its way (the
    # ends of a long queue that 1,000 cycles cannot reach one by one are reached in fewer, coarser ones).
    # Measured (docs/benchmarks.md): on ITP cluster05 with exact estimates 0.5% costs p90 ~3% of the wait;
    # on 8,192 GPUs with 9,582 queued it reaches the 7-day horizon (6,227 starts) in 760 cycles, where one
    # cycle per event reaches 1,091 starts in the 1,000-cycle bound.
    step_fraction: float = 0.005
    launch_latency_s: float = LAUNCH_LATENCY_S
    exit_latency_s: float = EXIT_LATENCY_S


@dataclass(frozen=True, slots=True)
class ProjectionInput:
    """The live loop's state after a cycle, immutable: what a projection starts from (taken on the loop's thread
    for the cost of a few references; projected on another)."""

    snapshot: ClusterSnapshot
    pending: tuple[JobSpec, ...]  # the jobs to project: the queue the loop schedules (a subset of the snapshot's)
    now_s: float
    config: SchedulerConfig
    sharing: SharingPolicy
    inputs: CycleInputs = field(default_factory=CycleInputs)
    # Stopped jobs' ranks still holding GPUs (the snapshot's usage counts them).
    releasing: Mapping[str, Allocation] = field(default_factory=lambda: MappingProxyType({}))
    usage_half_life_s: float = 7 * 86400.0


@dataclass(frozen=True, slots=True)
class Projection:
    """Expected start (epoch seconds, None: unknown) of each job waiting at ``at_s``; ``stopped``: why the run
    ended: ``done`` (every job placed), ``idle`` (nothing left that could free GPUs), ``horizon``, ``cycles``."""

    at_s: float
    starts: Mapping[str, float | None]
    cycles: int
    stopped: str

    def start_s(self, job_id: str) -> float | None:
        return self.starts.get(job_id)


def project(
    inp: ProjectionInput, history: RuntimeHistory = NO_HISTORY, config: ProjectionConfig | None = None
) -> Projection:
    """Each pending job's expected start if nothing new arrived; see the module's docstring."""
    return _Run(inp, history, config or ProjectionConfig()).run()


class _Run:
    """One projection: the forked state, its event heap, and the world's side of each cycle (an ``Actuator``)."""

    def __init__(self, inp: ProjectionInput, history: RuntimeHistory, config: ProjectionConfig) -> None:
        self.inp, self.history, self.cfg = inp, history, config
        self.state = ClusterState.resumed(inp.snapshot, inp.releasing)
        wanted = {j.job_id for j in inp.pending}
        for spec in inp.snapshot.pending:
            if spec.job_id not in wanted:  # the loop does not schedule it (its stored state moved on)
                self.state.apply(JobCancelled(spec.job_id, inp.now_s))
        self.driver = CycleDriver(inp.config, inp.usage_half_life_s)
        self.driver.resume(inp.inputs, inp.now_s)
        self.heap: list[tuple[float, int, int, str, int]] = []
        self.seq = 0
        self.epoch: dict[str, int] = {}
        self.work_end: dict[str, float] = {}  # a job's expected end of work (its GPUs free exit latency later)
        self.remaining: dict[str, float] = {}  # a job preempted on the way: the work it still has to do
        queued = {j.job_id for j in inp.snapshot.pending}  # the loop's queue may list jobs its cycle placed
        self.starts: dict[str, float | None] = {j.job_id: None for j in inp.pending if j.job_id in queued}
        self.open = {j for j in self.starts if self.state.job_state(j) is JobState.PENDING}
        self.cycles = 0
        self._seed()

    def _seed(self) -> None:
        now, cfg = self.inp.now_s, self.cfg
        for job_id, r in self.inp.snapshot.running.items():
            start = r.started_at_s if r.started_at_s is not None else r.placed_at_s + cfg.launch_latency_s
            if r.started_at_s is None:
                self._push(max(now, start), _START, job_id)
            ran = max(0.0, now - start)
            total = expected_runtime_s(r.spec, ran, self.history, len(r.allocation.tasks))
            if total is not None:
                self._ends(job_id, max(now, start + total))
        for job_id in self.inp.releasing:
            self._push(now + cfg.exit_latency_s, _RELEASE, job_id)

    def _push(self, at: float, kind: int, job_id: str = "") -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at, kind, self.seq, job_id, self.epoch.get(job_id, 0)))

    def _ends(self, job_id: str, work_end: float) -> None:
        self.work_end[job_id] = work_end
        self._push(work_end + self.cfg.exit_latency_s, _FREE, job_id)

    def run(self) -> Projection:
        now = last = self.inp.now_s
        stopped = self._cycles(now)
        horizon, step = now + self.cfg.horizon_s, self.cfg.step_fraction
        while not stopped:
            if not self.open:
                stopped = "done"
            elif not self.heap:
                stopped = "idle"
            elif self.heap[0][0] > horizon:
                stopped = "horizon"
            else:
                # The next cycle: at the next event, or ``step_fraction`` of the lead time after the last one.
                t = max(self.heap[0][0], last + step * (last - now))
                dirty = False
                while self.heap and self.heap[0][0] <= t:
                    _, kind, _, job_id, epoch = heapq.heappop(self.heap)
                    dirty |= self._handle(t, kind, job_id, epoch)
                if dirty:
                    stopped, last = self._cycles(t), t
        return Projection(self.inp.now_s, MappingProxyType(dict(self.starts)), self.cycles, stopped)

    def _cycles(self, t: float) -> str:
        """The cycles at ``t`` (follow-ups while they preempt or end jobs); "cycles" when the bound is reached."""
        for _ in range(_MAX_ROUNDS):
            if not self.open:
                return ""
            if self.cycles >= self.cfg.max_cycles:
                return "cycles"
            self.cycles += 1
            snap = self.state.snapshot()
            run = self.driver.run_cycle(
                snap, snap.pending, self.inp.sharing, self, t, pool_demand=self.inp.inputs.pool_demand
            )
            if not (run.preempted or run.ended):
                break
        calendar = self.inp.sharing.calendar
        nxt = calendar.next_change_s(t) if calendar is not None and self.open else None
        if nxt is not None and nxt > t and not any(k == _WAKE and at == nxt for at, k, *_ in self.heap):
            self._push(nxt, _WAKE)
        return ""

    def _handle(self, t: float, kind: int, job_id: str, epoch: int) -> bool:
        """Fold one event into the state; whether a cycle should follow."""
        if kind == _WAKE:
            return True
        if kind == _RELEASE:
            self.state.apply(RanksReleased(job_id, t))
            return True
        if epoch != self.epoch.get(job_id, 0):
            return False  # preempted or ended since
        current = self.state.job_state(job_id)
        if kind == _START:
            if current is JobState.PLACED:
                self.state.apply(JobStarted(job_id, t))
            return False
        if current is JobState.PLACED:  # ends before its launch: started (a zero-length run) first
            self.state.apply(JobStarted(job_id, t))
        elif current is not JobState.RUNNING:
            return False
        spec = self.state.job_spec(job_id)
        service = self.state.service_gpu_s(job_id, t)
        self.state.apply(JobFinished(job_id, t))
        if spec is not None:
            self.driver.finished(spec, service)
        return True

    # -- the actuator: the projection's side of each cycle (``scheduler.driver.Actuator``) ----------------------
    def end(self, ending: Ending, now_s: float) -> bool:
        job_id = ending.job_id
        if self.state.job_state(job_id) is None:
            return False
        running = self.state.snapshot().running.get(job_id)
        final = JobState.TIMEOUT if ending.reason is ReasonCode.TIME_LIMIT else JobState.CANCELLED
        self.state.apply(JobEnded(job_id, final, now_s))
        self.epoch[job_id] = self.epoch.get(job_id, 0) + 1
        self.open.discard(job_id)  # a pending job cancelled: it never starts (its start stays None)
        if running is not None:
            self._release(running.allocation, now_s)
        return True

    def preempt(self, preemption: Preemption, now_s: float) -> bool:
        job_id = preemption.job_id
        running = self.state.snapshot().running.get(job_id)
        if running is None:
            return False
        self.state.apply(JobPreempted(job_id, now_s, preemption.reason.value))
        self.epoch[job_id] = self.epoch.get(job_id, 0) + 1
        end = self.work_end.pop(job_id, None)
        if end is not None:  # what is left, plus the work since its last checkpoint, which is lost
            self.remaining[job_id] = max(0.0, end - now_s) + running.work_lost_s(now_s)
        self._release(running.allocation, now_s)
        return True

    def _release(self, alloc: Allocation, now_s: float) -> None:
        """Its processes still run: nothing lands on its GPUs until they are gone, an exit latency later."""
        self.state.apply(RanksReleasing(alloc, now_s))
        self._push(now_s + self.cfg.exit_latency_s, _RELEASE, alloc.job_id)

    def place(self, allocation: Allocation, now_s: float) -> bool:
        job_id = allocation.job_id
        try:
            self.state.apply(JobPlaced(allocation, now_s))
        except GpupoolError:
            return False
        start = now_s + self.cfg.launch_latency_s
        if job_id in self.open:
            self.open.discard(job_id)
            self.starts[job_id] = start
        self._push(start, _START, job_id)
        spec = self.state.job_spec(job_id)
        runtime = self.remaining.pop(job_id, None)
        if runtime is None and spec is not None:
            runtime = expected_runtime_s(spec, 0.0, self.history, len(allocation.tasks))
        if runtime is not None:
            self._ends(job_id, start + runtime)
        return True

    def signal(self, signal: Signal, now_s: float) -> bool:
        if self.state.job_state(signal.job_id) not in (JobState.PLACED, JobState.RUNNING):
            return False
        self.state.apply(JobCheckpointed(signal.job_id, now_s))  # the job saves its work: a preemption loses none
        return True

    def waiting(self, waiting: Sequence[Waiting]) -> None:
        pass  # reasons are the live loop's to store
