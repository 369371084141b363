"""Live cluster state and its one reducer, ``ClusterState.apply(event)``.

The server and the simulator feed it the same events; ``snapshot()`` hands the scheduler an immutable
copy. The fabric index is shared; only per-GPU and per-host arrays are owned and copied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType

import numpy as np

from gpupool.cluster.health import HealthRules
from gpupool.cluster.index import FabricIndex
from gpupool.cluster.snapshot import (
    LINK_DEGRADED,
    LINK_DOWN,
    LINK_UP,
    NODE_DRAINED,
    NODE_LOST,
    NODE_UP,
    ClusterSnapshot,
    PendingFeed,
    RunningJob,
    RunningTable,
    SnapshotMemo,
)
from gpupool.domain.dependencies import TERMINAL
from gpupool.domain.errors import CapacityConflictError, TransitionError
from gpupool.domain.events import (
    Event,
    GpuHealthChanged,
    HealthGrade,
    JobCancelled,
    JobCheckpointed,
    JobEnded,
    JobFinished,
    JobPlaced,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    LinkHealthChanged,
    LinkState,
    NodeDrained,
    NodeLabelled,
    NodeLost,
    NodeRestored,
    PortCountersReported,
    RanksReleased,
    RanksReleasing,
    TelemetryReported,
)
from gpupool.domain.jobs import MILLI_PER_GPU, Allocation, JobSpec
from gpupool.domain.states import JOB_TRANSITIONS, NODE_TRANSITIONS, JobState, NodeState, transition
from gpupool.fabric.fabric import Fabric

_FEED_SLACK = 4096  # feed entries beyond four per queued job before the state starts a new feed
_NODE_CODE = {NodeState.UP: NODE_UP, NodeState.DRAINED: NODE_DRAINED, NodeState.LOST: NODE_LOST}
_LINK_CODE = {LinkState.UP: LINK_UP, LinkState.DEGRADED: LINK_DEGRADED, LinkState.DOWN: LINK_DOWN}
_NO_STATES: MappingProxyType[str, JobState] = MappingProxyType({})


def _ro(a: np.ndarray) -> np.ndarray:
    c = a.copy()
    c.setflags(write=False)
    return c


class ClusterState:
    """Mutable live state. Not thread-safe: one owner applies events in order."""

    def __init__(
        self, fabric: Fabric | FabricIndex, rules: HealthRules | None = None, *, index: FabricIndex | None = None
    ) -> None:
        self.index = fabric if isinstance(fabric, FabricIndex) else (index or FabricIndex(fabric))
        self.rules = rules or HealthRules()
        ix = self.index
        n, g = ix.n_hosts, ix.max_gpus
        n_sw = len(ix.fabric.switches)
        self._used_milli = np.zeros((n, g), dtype=np.int64)
        self._used_mem = np.zeros((n, g), dtype=np.int64)
        self._reported_grade = np.zeros((n, g), dtype=np.int64)
        self._temp = np.full((n, g), np.nan, dtype=np.float64)
        self._cpu_used = np.zeros(n, dtype=np.int64)
        self._mem_used = np.zeros(n, dtype=np.int64)
        self._node = [NodeState.UP] * n
        self._labels: list[frozenset[tuple[str, str]]] = [frozenset()] * n
        self._congestion = np.zeros(n_sw, dtype=np.float64)
        self._erroring = np.zeros(n_sw, dtype=np.bool_)
        self._link = np.zeros(n_sw, dtype=np.int64)
        self._counters: dict[int, tuple[float, int, int]] = {}
        self._jobs: dict[str, JobState] = {}
        self._specs: dict[str, JobSpec] = {}
        self._pending: dict[str, JobSpec] = {}
        self._feed = PendingFeed()  # what entered and left ``_pending``, for readers that keep their own queue
        self._running: dict[str, RunningJob] = {}
        self._table = RunningTable(self.index)  # ``_running`` as arrays, for snapshots (``RunningArrays``)
        # Stopped jobs' ranks whose processes may still run, per job: their GPUs count as used, so nothing is
        # placed on them before their agents confirm the processes gone (``RanksReleased``).
        self._releasing: dict[str, Allocation] = {}
        self._attained: dict[str, float] = {}
        self._preempted: dict[str, int] = {}
        self._dependent: set[str] = set()  # jobs with dependencies not yet ended (pending ones are waiting on them)
        self.version = 0
        self._snap: ClusterSnapshot | None = None
        # Read-only copies the next snapshot may reuse, per group of arrays; an event drops the groups it
        # changes (most events are job events, which leave health and node arrays alone).
        self._usage_ro: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._health_ro: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._nodes_ro: tuple[np.ndarray, tuple[frozenset[tuple[str, str]], ...]] | None = None
        self._memo = SnapshotMemo()

    @classmethod
    def resumed(
        cls, snap: ClusterSnapshot, releasing: Mapping[str, Allocation] | None = None, rules: HealthRules | None = None
    ) -> ClusterState:
        """A new state that carries on from ``snap``, the live state's immutable copy: the forward projection
        (``scheduler.projection``) runs cycles on it from another thread without touching the live state.

        ``releasing``: the stopped jobs' ranks still holding GPUs (``releasing`` of the state ``snap`` came
        from; ``snap``'s usage counts them). The snapshot's grade becomes the reported one (it is already the
        worse of report and temperature, so the next snapshot's grades are the same); leaf counters are not
        carried (congestion stays as ``snap`` has it until two new reports)."""
        state = cls(snap.index, rules)
        state._used_milli = snap.gpu_used_milli.copy()
        state._used_mem = snap.gpu_used_memory_mib.copy()
        state._reported_grade = snap.gpu_grade.copy()
        state._temp = snap.gpu_temperature_c.copy()
        state._cpu_used = snap.host_cpu_used.copy()
        state._mem_used = snap.host_memory_used.copy()
        codes = {v: k for k, v in _NODE_CODE.items()}
        state._node = [codes[int(c)] for c in snap.node_state]
        state._labels = list(snap.host_labels)
        state._congestion = snap.switch_congestion.copy()
        state._erroring = snap.switch_erroring.copy()
        state._link = snap.switch_link_state.copy()
        state._jobs = dict(snap.job_states)
        for job_id, r in snap.running.items():
            state._jobs[job_id] = JobState.PLACED if r.started_at_s is None else JobState.RUNNING
            state._specs[job_id] = r.spec
        state._running = dict(snap.running)
        for r in state._running.values():
            state._table.add(r)
        for spec in snap.pending:
            state._jobs[spec.job_id] = JobState.PENDING
            state._specs[spec.job_id] = spec
            state._enqueue(spec)
            if spec.after:
                state._dependent.add(spec.job_id)
        state._releasing = dict(releasing or {})
        state._attained = dict(snap.attained_gpu_s)
        state._preempted = dict(snap.preemption_count)
        return state

    # ---------------------------------------------------------------- queries

    def job_state(self, job_id: str) -> JobState | None:
        return self._jobs.get(job_id)

    def node_state(self, host: str) -> NodeState:
        return self._node[self._host(host)]

    @property
    def releasing(self) -> dict[str, Allocation]:
        """Per stopped job, its ranks still holding GPUs until their processes are confirmed gone."""
        return dict(self._releasing)

    def unknown_dependencies(self) -> list[str]:
        """Jobs the pending jobs depend on that this state does not hold: ended before it was built (a server's
        rebuild), or never stored. Their ends are to be read and applied (``JobEnded``) before a cycle."""
        return sorted({j for spec in self._waiting_on() for d in spec.after for j in d.job_ids} - self._jobs.keys())

    def _waiting_on(self) -> list[JobSpec]:
        """The pending jobs with dependencies (most queues have none: no walk over the whole queue)."""
        return [self._pending[j] for j in self._dependent if j in self._pending]

    def job_spec(self, job_id: str) -> JobSpec | None:
        return self._specs.get(job_id)

    def service_gpu_s(self, job_id: str, at_s: float) -> float:
        """GPU-seconds of service ``job_id`` has had by ``at_s``: its ended runs (``attained_gpu_s``) and the
        current one, counted as ending a run counts it. 0 for a job the state does not hold (or forgot)."""
        got = self._attained.get(job_id, 0.0)
        r = self._running.get(job_id)
        if r is not None and r.started_at_s is not None:
            got += max(0.0, at_s - r.started_at_s) * r.gpu_milli / MILLI_PER_GPU
        return got

    # ---------------------------------------------------------------- the reducer

    def apply(self, event: Event) -> None:
        """Fold one event into the state. Raises on events that contradict it (a bug or a lost race)."""
        match event:
            case JobSubmitted(job=job):
                if job.job_id in self._jobs:
                    raise TransitionError(f"job {job.job_id}: submitted twice")
                self._jobs[job.job_id] = JobState.PENDING
                self._specs[job.job_id] = job
                self._enqueue(job)
                if job.after:
                    self._dependent.add(job.job_id)
            case JobPlaced(allocation=alloc, at_s=at):
                placed = self._check_job(alloc.job_id, JobState.PLACED)
                self._take(alloc)  # may raise: the job stays pending and the capacity untouched
                self._jobs[alloc.job_id] = placed
                spec = self._pending[alloc.job_id]
                self._dequeue(alloc.job_id)
                self._running[alloc.job_id] = RunningJob(
                    spec, alloc, at, preemptions=self._preempted.get(alloc.job_id, 0)
                )
                self._table.add(self._running[alloc.job_id])
            case JobStarted(job_id=job_id, at_s=at):
                self._job_to(job_id, JobState.RUNNING)
                r = self._running[job_id]
                self._running[job_id] = replace(r, started_at_s=at)
                self._table.started(job_id, at)
            case RanksReleasing(allocation=alloc):
                # No capacity or node check: the GPUs were the job's a moment ago (or are on a lost node,
                # fenced until it recovers); what they hold is added back, whatever else changed since.
                old = self._releasing.pop(alloc.job_id, None)
                if old is not None:
                    self._give_back(old)
                self._hold(alloc)
                self._releasing[alloc.job_id] = alloc
            case RanksReleased(job_id=job_id):
                old = self._releasing.pop(job_id, None)
                if old is not None:
                    self._give_back(old)
            case JobCheckpointed(job_id=job_id, at_s=at):
                if job_id not in self._running:
                    raise TransitionError(f"job {job_id}: checkpointed but not running")
                self._running[job_id] = replace(self._running[job_id], last_checkpoint_s=at)
            case JobFinished(job_id=job_id, at_s=at, succeeded=ok):
                self._job_to(job_id, JobState.FINISHED if ok else JobState.FAILED)
                self._end(job_id, at, requeue=False)
                self._forget(job_id)
            case JobCancelled(job_id=job_id, at_s=at):
                self._job_to(job_id, JobState.CANCELLED)
                if job_id in self._running:
                    self._end(job_id, at, requeue=False)
                else:
                    self._dequeue(job_id)
                self._forget(job_id)
            case JobEnded(job_id=job_id, state=final, at_s=at):
                if final not in TERMINAL:
                    raise TransitionError(f"job {job_id}: {final.value} is not an end")
                if job_id in self._running:
                    self._end(job_id, at, requeue=False)
                self._dequeue(job_id)
                self._jobs[job_id] = final
                self._forget(job_id)
            case JobPreempted(job_id=job_id, at_s=at):
                self._job_to(job_id, JobState.PENDING)
                self._end(job_id, at, requeue=True)
                self._preempted[job_id] = self._preempted.get(job_id, 0) + 1
            case NodeLost(host=host, at_s=at):
                h = self._node_to(host, NodeState.LOST)
                for job_id in [j for j, r in self._running.items() if any(t.host == host for t in r.allocation.tasks)]:
                    self._job_to(job_id, JobState.PENDING)
                    self._end(job_id, at, requeue=True)
                self._temp[h] = np.nan
            case NodeDrained(host=host):
                self._node_to(host, NodeState.DRAINED)
            case NodeRestored(host=host):
                self._node_to(host, NodeState.UP)
            case NodeLabelled(host=host, labels=labels):
                self._labels[self._host(host)] = frozenset(labels)
            case GpuHealthChanged(host=host, gpu=gpu, grade=grade):
                self._reported_grade[self._host(host), gpu] = int(grade)
            case LinkHealthChanged(switch=switch, state=state):
                self._link[self._switch(switch)] = _LINK_CODE[state]
            case TelemetryReported(host=host, gpu_temperature_c=temps):
                h = self._host(host)
                k = min(len(temps), self.index.max_gpus)
                self._temp[h, :k] = temps[:k]
            case PortCountersReported(switch=switch, port_xmit_wait=wait, symbol_errors=errs, at_s=at):
                s = self._switch(switch)
                prev = self._counters.get(s)
                if prev is not None:
                    dt = at - prev[0]
                    self._congestion[s] = self.rules.congestion(wait - prev[1], dt)
                    self._erroring[s] = self.rules.erroring(errs - prev[2], dt)
                self._counters[s] = (at, wait, errs)
            case _:
                raise TypeError(f"not an event: {type(event).__name__}")
        self.version += 1
        self._snap = None
        self._drop(event)

    def _drop(self, event: Event) -> None:
        """Forget the reusable copies ``event`` made stale."""
        match event:
            case JobSubmitted() | JobStarted() | JobCheckpointed():
                pass  # only the job maps changed
            case (
                JobPlaced()
                | JobFinished()
                | JobCancelled()
                | JobEnded()
                | JobPreempted()
                | RanksReleasing()
                | RanksReleased()
            ):
                self._usage_ro = None
            case NodeDrained() | NodeRestored() | NodeLabelled():
                self._nodes_ro = None
                self._memo = SnapshotMemo()
            case _:  # NodeLost (jobs, node state and temperatures) and every telemetry event
                self._usage_ro = self._health_ro = self._nodes_ro = None
                self._memo = SnapshotMemo()

    # ---------------------------------------------------------------- snapshots

    def snapshot(self) -> ClusterSnapshot:
        """An immutable copy; repeated calls without events in between return the same object."""
        if self._snap is not None:
            return self._snap
        if self._usage_ro is None:
            self._usage_ro = (_ro(self._used_milli), _ro(self._used_mem), _ro(self._cpu_used), _ro(self._mem_used))
        if self._health_ro is None:
            temp_grade = np.where(
                self._temp >= self.rules.temp_bad_c,
                int(HealthGrade.BAD),
                np.where(self._temp >= self.rules.temp_degraded_c, int(HealthGrade.DEGRADED), int(HealthGrade.OK)),
            )
            self._health_ro = (
                _ro(np.maximum(self._reported_grade, temp_grade).astype(np.int64)),
                _ro(self._temp),
                _ro(self._congestion),
                _ro(self._erroring),
                _ro(self._link),
            )
        if self._nodes_ro is None:
            self._nodes_ro = (_ro(np.array([_NODE_CODE[s] for s in self._node], dtype=np.int64)), tuple(self._labels))
        used_milli, used_mem, cpu_used, mem_used = self._usage_ro
        grade, temp, congestion, erroring, link = self._health_ro
        node_state, labels = self._nodes_ro
        self._snap = ClusterSnapshot(
            index=self.index,
            version=self.version,
            gpu_used_milli=used_milli,
            gpu_used_memory_mib=used_mem,
            gpu_grade=grade,
            gpu_temperature_c=temp,
            host_cpu_used=cpu_used,
            host_memory_used=mem_used,
            node_state=node_state,
            host_labels=labels,
            switch_congestion=congestion,
            switch_erroring=erroring,
            switch_link_state=link,
            running=MappingProxyType(dict(self._running)),
            pending=tuple(self._pending.values()),
            job_states=self._dependency_states(),
            attained_gpu_s=MappingProxyType(dict(self._attained)),
            preemption_count=MappingProxyType(dict(self._preempted)),
            memo=self._memo,
            pending_feed=self._feed,
            pending_feed_at=len(self._feed.entries),
            running_table=self._table.arrays(),
        )
        return self._snap

    def _dependency_states(self) -> MappingProxyType[str, JobState]:
        """The states of the jobs pending jobs depend on (the admit stage's facts); empty without dependencies."""
        jobs = self._jobs
        if not self._dependent:
            return _NO_STATES
        return MappingProxyType(
            {j: jobs[j] for spec in self._waiting_on() for d in spec.after for j in d.job_ids if j in jobs}
        )

    # ---------------------------------------------------------------- helpers

    def _host(self, name: str) -> int:
        if not self.index.fabric.has_host(name):
            raise CapacityConflictError(f"unknown host {name}")
        return self.index.host_index(name)

    def _switch(self, name: str) -> int:
        s = self.index.switch_ix.get(name)
        if s is None:
            raise CapacityConflictError(f"unknown switch {name}")
        return s

    def _check_job(self, job_id: str, new: JobState) -> JobState:
        current = self._jobs.get(job_id)
        if current is None:
            raise TransitionError(f"job {job_id}: unknown job")
        return transition(JOB_TRANSITIONS, current, new, f"job {job_id}")

    def _job_to(self, job_id: str, new: JobState) -> None:
        self._jobs[job_id] = self._check_job(job_id, new)

    def _node_to(self, host: str, new: NodeState) -> int:
        h = self._host(host)
        self._node[h] = transition(NODE_TRANSITIONS, self._node[h], new, f"node {host}")
        return h

    def _deltas(self, alloc: Allocation) -> list[tuple[int, list[int], int, int, int, int]]:
        out = []
        for t in alloc.tasks:
            h = self._host(t.host)
            if any(not 0 <= g < self.index.host_gpus[h] for g in t.gpus) or len(set(t.gpus)) != len(t.gpus):
                raise CapacityConflictError(f"job {alloc.job_id}: bad GPU indices {t.gpus} on {t.host}")
            out.append((h, list(t.gpus), t.milli_gpu, t.gpu_memory_mib, t.cpu_millicores, t.memory_mib))
        return out

    def _take(self, alloc: Allocation) -> None:
        """Apply an allocation all or nothing: new rows are built and checked for the touched hosts only."""
        rows: dict[int, tuple[np.ndarray, np.ndarray, int, int]] = {}
        for h, gpus, milli, gmem, c, m in self._deltas(alloc):
            if self._node[h] is not NodeState.UP:
                raise CapacityConflictError(
                    f"job {alloc.job_id}: host {self.index.host_name(h)} is {self._node[h].value}"
                )
            um, ug, uc, ue = rows.get(h) or (self._used_milli[h].copy(), self._used_mem[h].copy(), 0, 0)
            whole = milli >= MILLI_PER_GPU and gmem == 0
            um[gpus] += MILLI_PER_GPU if whole else milli
            ug[gpus] += self.index.gpu_memory_mib[h, gpus] if whole else gmem
            rows[h] = (um, ug, uc + c, ue + m)
        for h, (um, ug, uc, ue) in rows.items():
            if (
                bool((um > MILLI_PER_GPU).any())
                or bool((ug > self.index.gpu_memory_mib[h]).any())
                or self._cpu_used[h] + uc > self.index.host_cpu_millicores[h]
                or self._mem_used[h] + ue > self.index.host_memory_mib[h]
            ):
                raise CapacityConflictError(
                    f"job {alloc.job_id}: allocation exceeds free capacity on {self.index.host_name(h)}"
                )
        for h, (um, ug, uc, ue) in rows.items():
            self._used_milli[h] = um
            self._used_mem[h] = ug
            self._cpu_used[h] += uc
            self._mem_used[h] += ue

    def _enqueue(self, job: JobSpec) -> None:
        self._pending[job.job_id] = job
        self._fed(job)

    def _dequeue(self, job_id: str) -> None:
        if self._pending.pop(job_id, None) is not None:
            self._fed(job_id)

    def _fed(self, entry: JobSpec | str) -> None:
        entries = self._feed.entries
        if len(entries) > 4 * len(self._pending) + _FEED_SLACK:
            # Readers catch up in O(changes); past a few times the queue's length, reading it whole is cheaper.
            self._feed = PendingFeed()
            entries = self._feed.entries
        entries.append(entry)

    def _forget(self, job_id: str) -> None:
        """A job that ended for good needs no service or preemption history: every snapshot copies those,
        so keeping them would make a long run (the simulator's 100,000 jobs) quadratic."""
        self._attained.pop(job_id, None)
        self._preempted.pop(job_id, None)
        self._dependent.discard(job_id)

    def _hold(self, alloc: Allocation, sign: int = 1) -> None:
        """Add (``sign`` 1) or remove (-1) what ``alloc`` uses, unchecked."""
        for h, gpus, milli, gmem, c, m in self._deltas(alloc):
            whole = milli >= MILLI_PER_GPU and gmem == 0
            self._used_milli[h, gpus] += sign * (MILLI_PER_GPU if whole else milli)
            self._used_mem[h, gpus] += sign * (self.index.gpu_memory_mib[h, gpus] if whole else gmem)
            self._cpu_used[h] += sign * c
            self._mem_used[h] += sign * m

    def _give_back(self, alloc: Allocation) -> None:
        self._hold(alloc, -1)

    def _end(self, job_id: str, at_s: float, *, requeue: bool) -> None:
        r = self._running.pop(job_id)
        self._table.remove(job_id)
        self._give_back(r.allocation)
        if r.started_at_s is not None:
            service = max(0.0, at_s - r.started_at_s) * r.gpu_milli / MILLI_PER_GPU
            self._attained[job_id] = self._attained.get(job_id, 0.0) + service
        if requeue:
            self._enqueue(r.spec)
