"""The discrete-event engine: trace arrivals and the simulated world drive the production ClusterState and
``schedule()``, exactly as the server's loop does with agents' reports: both build their scheduler from the
same ``scheduler`` settings and run the same cycle skeleton (``scheduler.driver.CycleDriver``); this module
is the simulated world's clock and actuator.

Events sit in one heap ordered by (time, sequence). All events at one instant are folded into the state first;
then, if any of them can change a decision (an arrival, a completion, a failure, a repair), one scheduling
cycle runs at that instant, so a burst of simultaneous arrivals costs one cycle. With
``min_cycle_interval_s`` cycles are further bounded to one per interval. The scheduler's preemptions are
applied before its placements: a preempted job pays the restart overhead and loses the work since its last
checkpoint, and goes back to the queue. Placements start after the launch latency.

The settings' sharing rules (pools and their calendar, preemption, backfill, deadlines) travel as the
request's ``SharingPolicy``. A CHECKPOINT signal makes the job checkpoint at once (``JobCheckpointed``: nothing before it is
lost) and wakes a cycle at the signal's preemption time; a calendar wakes a cycle at each window boundary.
While preemption can take GPUs (it is on and some job is ``preemptible``), every running job checkpoints
every ``checkpoint_interval_s`` into the state too,
so the scheduler's victim search sees the work each preemption would throw away. A job's runtime at its
placement comes from the runtime model. Randomness (failures, telemetry noise) comes from one NumPy
Generator built from the seed, so a run is deterministic for a seed.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gpupool.cluster import ClusterState
from gpupool.domain.calendar import Calendar
from gpupool.domain.errors import InputError
from gpupool.domain.events import (
    GpuHealthChanged,
    HealthGrade,
    JobCheckpointed,
    JobEnded,
    JobFinished,
    JobPlaced,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    LinkHealthChanged,
    LinkState,
    NodeLost,
    NodeRestored,
    PortCountersReported,
    TelemetryReported,
)
from gpupool.domain.jobs import Allocation
from gpupool.domain.sharing import PoolDemand
from gpupool.domain.states import JobState, NodeState
from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Domain, Tier
from gpupool.scheduler import Ending, Preemption, ReasonCode, Signal, SignalKind, Waiting
from gpupool.scheduler.driver import CycleDriver
from gpupool.scheduler.settings import SchedulerSettings, scheduler_config, sharing_policy
from gpupool.sim.failures import FailureEvent, FailureKind
from gpupool.sim.runtime import TierBandwidth
from gpupool.sim.world import JobRecord, SimJob, Tracker, WorldConfig, elastic_slowdown

# Event kinds, in the order they are handled within one instant (ties broken by sequence number after kind).
_START, _FINISH, _FAIL_GPU, _FAIL_LINK, _FAIL_HOST, _REPAIR, _TELEMETRY, _CHECKPOINT, _WAKE, _CYCLE = range(10)
_MAX_ROUNDS = 4  # cycles at one instant: the first, and follow-ups while they preempt
_MAX_IDLE_WAKES = 16  # calendar wake-ups in a row with nothing running (8 days of two boundaries)
Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class SimResult:
    records: tuple[JobRecord, ...]
    total_gpus: int
    usage: tuple[tuple[float, float], ...]  # (time, GPUs held) at every change
    queue: tuple[tuple[float, int], ...]  # (time, jobs waiting) after every cycle
    cycles: int
    events: int
    failures: int
    wall_s: float
    stopped_early: bool  # jobs were left waiting that nothing could ever place


class Engine:
    """One simulation run. Build it, call ``run()`` once."""

    def __init__(
        self,
        fabric: Fabric,
        jobs: Sequence[SimJob],
        settings: SchedulerSettings | None = None,
        world: WorldConfig | None = None,
        *,
        seed: int = 0,
        progress: Progress | None = None,
        calendar: Calendar | None = None,
        demand_headroom_gpus: int | None = None,
        failure_trace: Sequence[FailureEvent] = (),
    ) -> None:
        """``settings``: the ``scheduler`` settings (the server's defaults when None); ``calendar``: the pools'
        calendar (the server's comes from its pools); ``seed``: the world's draws (the scheduler's seed is
        ``settings.seed``)."""
        settings = settings if settings is not None else SchedulerSettings()
        self.fabric = fabric
        self.failure_trace = tuple(failure_trace)
        # The same builders and cycle skeleton as the server's loop (``scheduler.settings``, ``.driver``).
        self.sharing = sharing_policy(settings, calendar=calendar)
        self.driver = CycleDriver(scheduler_config(settings), settings.usage_half_life_s)
        self.wakes_due = 0  # signal wake-ups still in the heap: the run is not over while one is due
        self.calendar_wake = math.inf  # the calendar boundary a wake-up is queued for
        self.idle_wakes = 0  # cycles in a row with nothing running
        # With a headroom, each pool's inference services (running or waiting) plus the headroom are its
        # demand target (``PoolDemand``), so a calendar window never takes hosts its services still need.
        self.demand_headroom = demand_headroom_gpus if calendar is not None else None
        self.service_gpus: dict[str, tuple[int, float]] = {}  # pool -> (GPUs, since when the target is that high)
        self.world = world or WorldConfig()
        # Preemption needs a preemptible victim: without one, no checkpoint matters to the scheduler.
        pre = self.sharing.preemption
        preempts = pre.enabled and any(j.spec.preemptible for j in jobs)
        self.by_service = preempts and pre.by_service
        ckpt = self.world.checkpoint_interval_s
        self.checkpoint_every = ckpt if preempts and ckpt > 0 else 0.0
        self.rng = np.random.default_rng(seed)
        self.progress = progress
        self.state = ClusterState(fabric)
        self.bw = TierBandwidth(fabric, self.world.runtime)
        self.leaf_of = fabric.domain_ids(Domain.LEAF)
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i].spec.submit_time_s, i))
        self.arrivals = [jobs[i] for i in order]
        ids = {j.spec.job_id for j in jobs}
        if len(ids) != len(jobs):
            raise InputError("two jobs share one job id", source="simulation")
        self.track: dict[str, Tracker] = {j.spec.job_id: Tracker(j) for j in jobs}
        self.heap: list[tuple[float, int, int, str, int]] = []
        self.seq = 0
        self.pending: dict[str, None] = {}  # insertion-ordered set of waiting job ids
        self.host_jobs: dict[int, set[str]] = {}
        self.used_gpus = 0.0
        self.usage: list[tuple[float, float]] = [(0.0, 0.0)]
        self.queue_len: list[tuple[float, int]] = []
        self.cycles = self.events = self.failures = 0
        self.running = 0  # placed or running
        self.repairs_due = 0
        self.last_cycle = -math.inf
        self.cycle_queued = False
        self.finished = 0
        self._leaves = list(fabric.switches_at(Tier.LEAF))
        self._counters = np.zeros(len(fabric.switches), dtype=np.int64)

    # ------------------------------------------------------------------ the loop

    def push(self, at: float, kind: int, key: str = "", epoch: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at, kind, self.seq, key, epoch))

    def run(self) -> SimResult:
        t0 = time.perf_counter()
        self._start_world()
        n = len(self.arrivals)
        nxt = 0
        stopped = False
        heap = self.heap
        while nxt < n or heap:
            t = self.arrivals[nxt].spec.submit_time_s if nxt < n else math.inf
            if heap and heap[0][0] < t:
                t = heap[0][0]
            dirty = False
            while nxt < n and self.arrivals[nxt].spec.submit_time_s <= t:
                spec = self.arrivals[nxt].spec
                self.state.apply(JobSubmitted(spec, t))
                self.pending[spec.job_id] = None
                if self.demand_headroom is not None and self.arrivals[nxt].kind == "inference":
                    self._demand(spec.pool, spec.total_gpus, t)
                nxt += 1
                dirty = True
                self.events += 1
            while heap and heap[0][0] <= t:
                _, kind, _, key, epoch = heapq.heappop(heap)
                self.events += 1
                dirty |= self._handle(t, kind, key, epoch)
            if dirty:
                self._maybe_cycle(t)
            if self.progress is not None and self.events % 2000 == 0:
                self.progress(self.finished, n)
            idle = self.running == 0 and self.repairs_due == 0 and self.wakes_due == 0
            idle = idle and self.calendar_wake == math.inf
            if nxt >= n and idle and not self.cycle_queued:
                stopped = bool(self.pending)
                break
        if self.progress is not None:
            self.progress(self.finished, n)
        records = tuple(self.track[j.spec.job_id].record() for j in self.arrivals)
        return SimResult(
            records,
            self.fabric.gpu_count,
            tuple(self.usage),
            tuple(self.queue_len),
            self.cycles,
            self.events,
            self.failures,
            time.perf_counter() - t0,
            stopped,
        )

    def _handle(self, t: float, kind: int, key: str, epoch: int) -> bool:
        if kind == _START:
            tr = self.track[key]
            if tr.epoch != epoch:
                return False
            self.state.apply(JobStarted(key, t))
            tr.run_start = t
            if tr.first_start is None:
                tr.first_start = t
            # The job's work, then the world's exit latency: until the server has stored its end, its GPUs stay held.
            self.push(t + tr.remaining_s * tr.factor + self.world.exit_latency_s, _FINISH, key, epoch)
            limit = tr.job.spec.time_limit_s
            if limit is not None:  # cycles at its checkpoint signal and at its limit, as the server's loop runs
                lead = tr.job.spec.signal_lead_s
                lead = self.driver.config.time_limit_lead_s if lead is None else lead
                for at in (t + max(0.0, limit - lead), t + limit):
                    self.wakes_due += 1
                    self.push(at, _WAKE, key)
            if self.checkpoint_every > 0:
                self.push(t + self.checkpoint_every, _CHECKPOINT, key, epoch)
            return False
        if kind == _CHECKPOINT:
            tr = self.track[key]
            if tr.epoch != epoch or tr.end is not None:
                return False
            self.state.apply(JobCheckpointed(key, t))
            self.push(t + self.checkpoint_every, _CHECKPOINT, key, epoch)
            # Preemption by service: the job just lost its unsaved work's weight as a victim, so a waiting
            # job may now take its GPUs cheaply (with ``max_lost_s``, only now). The server's loop sees the
            # same JobCheckpointed report.
            return bool(self.pending) and self.by_service
        if kind == _WAKE:
            if key:
                self.wakes_due -= 1
            elif t == self.calendar_wake:
                self.calendar_wake = math.inf
            return True
        if kind == _FINISH:
            tr = self.track[key]
            if tr.epoch != epoch:
                return False
            self.state.apply(JobFinished(key, t))
            tr.end = t
            if tr.run_start is not None:
                tr.served_s += t - tr.run_start
            self.driver.finished(tr.job.spec, tr.served_s * tr.job.gpus)
            if self.demand_headroom is not None and tr.job.kind == "inference":
                self._demand(tr.job.spec.pool, -tr.job.spec.total_gpus, t)
            tr.remaining_s = 0.0
            self._release(key, t)
            self.finished += 1
            return True
        if kind == _CYCLE:
            self.cycle_queued = False
            return True
        if kind == _REPAIR:
            self.repairs_due -= 1
            self._repair(t, key)
            return True
        if kind == _TELEMETRY:
            self._telemetry(t)
            return False
        return self._fail(t, kind, key)

    def _maybe_cycle(self, t: float) -> None:
        gap = self.world.min_cycle_interval_s
        if gap > 0 and t < self.last_cycle + gap:
            if not self.cycle_queued:
                self.cycle_queued = True
                self.push(self.last_cycle + gap, _CYCLE)
            return
        self.last_cycle = t
        # Kueue's model: a preemptor is placed in the cycle after its victims are gone, so a cycle that
        # preempted is followed at once by another (bounded: each round needs new victims to go on).
        # With a calendar a cycle runs even with an empty queue: pool windows reclaim lent hosts by themselves.
        cal = self.sharing.calendar
        for _ in range(_MAX_ROUNDS):
            idle = not self.pending and cal is None and not self.driver.elastic.active()
            if idle or not self._cycle(t):
                break
        # A job may wait for a window with nothing running; a queue that a week of windows did not move
        # never will, so the wake-ups stop there and the run ends as stuck.
        self.idle_wakes = 0 if self.running else self.idle_wakes + 1
        if cal is not None and (self.pending or self.running) and self.idle_wakes <= _MAX_IDLE_WAKES:
            nxt = cal.next_change_s(t)
            if nxt is not None and nxt < self.calendar_wake:
                self.calendar_wake = nxt
                self.push(nxt, _WAKE)

    def _cycle(self, t: float) -> bool:
        """One scheduling cycle at ``t``; whether it preempted or ended anything."""
        self.cycles += 1
        demand: tuple[PoolDemand, ...] = ()
        if self.demand_headroom is not None:
            demand = tuple(
                PoolDemand(pool, gpus, 1, since, self.demand_headroom)
                for pool, (gpus, since) in self.service_gpus.items()
            )
        # The state's own queue (the same jobs as ``self.pending``): the driver keeps it ordered between cycles.
        snap = self.state.snapshot()
        run = self.driver.run_cycle(snap, snap.pending, self.sharing, _World(self), t, pool_demand=demand)
        self.queue_len.append((t, len(self.pending)))
        return run.preempted > 0 or run.ended > 0  # what they free is placed by the next round

    def _demand(self, pool: str, delta: int, t: float) -> None:
        gpus, since = self.service_gpus.get(pool, (0, t))
        # The grace of borrowers counts from the moment the target grew; shrinking keeps the older time.
        self.service_gpus[pool] = (gpus + delta, t if delta > 0 else since)

    def _signalled(self, key: str, t: float, preempt_at_s: float) -> None:
        """A CHECKPOINT signal: the job saves its progress now (once per signal) and a cycle wakes when its
        grace ends, so the preemption happens on time even if nothing else happens then."""
        tr = self.track[key]
        if tr.run_start is None or tr.signalled_for == preempt_at_s:
            return
        tr.signalled_for = preempt_at_s
        tr.saved_at = t
        self.state.apply(JobCheckpointed(key, t))
        self.wakes_due += 1
        self.push(max(preempt_at_s, t), _WAKE, key)

    # ------------------------------------------------------------------ job lifecycle

    def _place(self, alloc: Allocation, t: float) -> None:
        key = alloc.job_id
        self.state.apply(JobPlaced(alloc, t))
        del self.pending[key]
        tr = self.track[key]
        hosts = [self.fabric.host_index(h) for h in alloc.hosts]
        tr.hosts = hosts
        tr.leaves = len({int(self.leaf_of[h]) for h in hosts})
        job = tr.job
        tr.held = job.gpus if job.spec.elastic is None else float(sum(len(x.gpus) for x in alloc.tasks))
        gpus = round(tr.held)
        tr.factor = 1.0 if job.spec.fractional else self.bw.factor(job.kind, gpus, hosts)
        tr.factor *= elastic_slowdown(job.spec, gpus)
        for h in hosts:
            self.host_jobs.setdefault(h, set()).add(key)
        self.running += 1
        self._use(t, tr.held)
        delay = self.world.launch_latency_s + (self.world.restart_overhead_s if tr.preemptions else 0.0)
        if delay > 0:
            self.push(t + delay, _START, key, tr.epoch)
        else:
            self._handle(t, _START, key, tr.epoch)

    def _release(self, key: str, t: float) -> None:
        tr = self.track[key]
        for h in tr.hosts:
            self.host_jobs[h].discard(key)
        self.running -= 1
        self._use(t, -tr.held)

    def _requeue(self, key: str, t: float) -> None:
        """Book a preemption the state has already applied: lost work, a new epoch, back in the queue."""
        tr = self.track[key]
        if tr.run_start is not None:
            elapsed = t - tr.run_start
            tr.served_s += elapsed
            ckpt = self.world.checkpoint_interval_s
            saved = elapsed if ckpt <= 0 else math.floor(elapsed / ckpt) * ckpt
            if tr.saved_at is not None:
                saved = max(saved, tr.saved_at - tr.run_start)
            tr.remaining_s = max(0.0, tr.remaining_s - saved / tr.factor)
            tr.lost_gpu_s += (elapsed - saved + self.world.restart_overhead_s) * tr.held
        tr.run_start = None
        tr.saved_at = None
        tr.epoch += 1
        tr.preemptions += 1
        self._release(key, t)
        self.pending[key] = None

    def _use(self, t: float, delta: float) -> None:
        self.used_gpus += delta
        if self.usage[-1][0] == t:
            self.usage[-1] = (t, self.used_gpus)
        else:
            self.usage.append((t, self.used_gpus))

    # ------------------------------------------------------------------ failures and telemetry

    def _start_world(self) -> None:
        codes = {FailureKind.GPU: _FAIL_GPU, FailureKind.LEAF: _FAIL_LINK, FailureKind.HOST: _FAIL_HOST}
        for e in self.failure_trace:
            self.push(e.time_s, codes[e.kind], f"{e.host}:{e.gpu}" if e.kind is FailureKind.GPU else str(e.host))
        f = self.world.failures
        n_gpus = self.fabric.gpu_count
        for kind, rate, units in (
            (_FAIL_GPU, f.gpu_xid_per_gpu_hour, n_gpus),
            (_FAIL_LINK, f.link_down_per_leaf_hour, len(self._leaves)),
            (_FAIL_HOST, f.host_loss_per_host_hour, len(self.fabric.hosts)),
        ):
            if rate > 0 and units > 0:
                self.push(float(self.rng.exponential(3600.0 / (rate * units))), kind)
        if self.world.telemetry_interval_s > 0:
            self.push(self.world.telemetry_interval_s, _TELEMETRY)

    def _alive(self) -> bool:
        return bool(self.running or self.pending or self.finished < len(self.arrivals))

    def _fail(self, t: float, kind: int, key: str) -> bool:
        """A failure: drawn from the rates (``key`` empty: the next one is armed and the part picked at
        random) or from a failure trace (``key`` names the part: "host" or "host:gpu")."""
        hosts = self.fabric.hosts
        if key:
            part, _, gpu = key.partition(":")
            return self._fail_part(t, kind, int(part), int(gpu) if gpu else -1)
        if not self._alive():
            return False
        f = self.world.failures
        rate, units = {
            _FAIL_GPU: (f.gpu_xid_per_gpu_hour, self.fabric.gpu_count),
            _FAIL_LINK: (f.link_down_per_leaf_hour, len(self._leaves)),
            _FAIL_HOST: (f.host_loss_per_host_hour, len(self.fabric.hosts)),
        }[kind]
        self.push(t + float(self.rng.exponential(3600.0 / (rate * units))), kind)
        self.failures += 1
        if kind == _FAIL_GPU:
            h = int(self.rng.integers(len(hosts)))
            if not hosts[h].gpus:
                return False
            return self._fail_gpu(t, h, int(self.rng.integers(len(hosts[h].gpus))))
        if kind == _FAIL_LINK:
            return self._fail_leaf(t, self._leaves[int(self.rng.integers(len(self._leaves)))])
        return self._fail_host(t, int(self.rng.integers(len(hosts))))

    def _fail_part(self, t: float, kind: int, h: int, g: int) -> bool:
        self.failures += 1
        if kind == _FAIL_GPU:
            return self._fail_gpu(t, h, g)
        if kind == _FAIL_LINK:
            for s in {int(x) for x in self.fabric.host_leaves[h] if x >= 0}:
                self._fail_leaf(t, s)
            return True
        return self._fail_host(t, h)

    def _fail_gpu(self, t: float, h: int, g: int) -> bool:
        host = self.fabric.hosts[h]
        self.state.apply(GpuHealthChanged(host.name, g, HealthGrade.BAD, t))
        for key in list(self.host_jobs.get(h, ())):
            alloc = self.state.snapshot().running[key].allocation
            if any(task.host == host.name and g in task.gpus for task in alloc.tasks):
                self._preempt(key, t, "GPU XID")
        self._repair_later(t, f"gpu:{h}:{g}")
        return True

    def _fail_leaf(self, t: float, s: int) -> bool:
        self.state.apply(LinkHealthChanged(self.fabric.switches[s].name, LinkState.DOWN, t))
        under = {int(h) for h in self.fabric.hosts_under(s)}
        for h in under:
            for key in list(self.host_jobs.get(h, ())):
                if len(set(self.track[key].hosts)) > 1:
                    self._preempt(key, t, "link down")
        self._repair_later(t, f"link:{s}")
        return True

    def _fail_host(self, t: float, h: int) -> bool:
        name = self.fabric.hosts[h].name
        if self.state.node_state(name) is not NodeState.UP:
            return False
        victims = list(self.host_jobs.get(h, ()))
        self.state.apply(NodeLost(name, t))  # the reducer requeues the host's jobs itself
        for key in victims:
            self._requeue(key, t)
        self._repair_later(t, f"host:{h}")
        return True

    def _preempt(self, key: str, t: float, reason: str) -> None:
        self.state.apply(JobPreempted(key, t, reason))
        self._requeue(key, t)

    def _repair_later(self, t: float, what: str) -> None:
        self.repairs_due += 1
        self.push(t + self.world.failures.repair_s, _REPAIR, what)

    def _repair(self, t: float, what: str) -> None:
        part, *ids = what.split(":")
        if part == "gpu":
            h, g = int(ids[0]), int(ids[1])
            self.state.apply(GpuHealthChanged(self.fabric.hosts[h].name, g, HealthGrade.OK, t))
        elif part == "link":
            self.state.apply(LinkHealthChanged(self.fabric.switches[int(ids[0])].name, LinkState.UP, t))
        else:
            self.state.apply(NodeRestored(self.fabric.hosts[int(ids[0])].name, t))

    def _telemetry(self, t: float) -> None:
        """GPU temperature follows load (35 C idle, ~80 C busy, noise 2 C); a leaf's xmit-wait counter grows
        with the GPUs of multi-host jobs under it. The scheduler reads both through the snapshot."""
        if not self._alive():
            return
        snap = self.state.snapshot()
        load = snap.gpu_used_milli / 1000.0
        temps = 35.0 + 45.0 * load + self.rng.normal(0.0, 2.0, size=load.shape)
        for h, host in enumerate(self.fabric.hosts):
            if host.gpus and snap.node_state[h] == 0:
                self.state.apply(TelemetryReported(host.name, tuple(temps[h, : host.gpu_count].tolist()), t))
        dt = self.world.telemetry_interval_s
        for key, run in snap.running.items():
            hosts = self.track[key].hosts
            if len(set(hosts)) > 1:
                for s in {int(x) for h in hosts for x in self.fabric.host_leaves[h]}:
                    self._counters[s] += int(run.spec.total_gpus * dt * 1000)
        for s in self._leaves:
            self.state.apply(PortCountersReported(self.fabric.switches[s].name, int(self._counters[s]), 0, t))
        self.push(t + dt, _TELEMETRY)


class _World:
    """The simulator's side of a cycle (``scheduler.driver.Actuator``): the same ``ClusterState`` the scheduler
    saw, and the simulated world (launch latency, lost work, restarts)."""

    __slots__ = ("_engine",)

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def end(self, ending: Ending, now_s: float) -> bool:
        """A time limit (the run stops: state timeout) or a dependency never met (cancelled before it ran)."""
        e, key = self._engine, ending.job_id
        tr = e.track.get(key)
        if tr is None or e.state.job_state(key) is None:
            return False
        timeout = ending.reason is ReasonCode.TIME_LIMIT
        e.state.apply(JobEnded(key, JobState.TIMEOUT if timeout else JobState.CANCELLED, now_s))
        tr.epoch += 1  # its scheduled finish no longer happens
        if key in e.pending:
            del e.pending[key]
        else:
            tr.end = now_s
            if tr.run_start is not None:
                tr.served_s += now_s - tr.run_start
            e._release(key, now_s)
        e.finished += 1
        return True

    def preempt(self, preemption: Preemption, now_s: float) -> bool:
        e, key = self._engine, preemption.job_id
        if key not in e.track or e.state.job_state(key) is None:
            return False
        e.state.apply(JobPreempted(key, now_s, preemption.reason.value))
        e._requeue(key, now_s)
        return True

    def place(self, allocation: Allocation, now_s: float) -> bool:
        self._engine._place(allocation, now_s)
        return True

    def signal(self, signal: Signal, now_s: float) -> bool:
        e = self._engine
        if signal.kind is not SignalKind.CHECKPOINT or e.state.job_state(signal.job_id) is None:
            return False
        e._signalled(signal.job_id, now_s, signal.preempt_at_s)
        return True

    def waiting(self, waiting: Sequence[Waiting]) -> None:
        pass  # the simulator keeps no reasons (the records say when each job started)
