"""Immutable snapshots of the cluster: what the scheduler reads. Arrays are read-only copies."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from gpupool.cluster.index import FabricIndex
from gpupool.domain.jobs import MILLI_PER_GPU, Allocation, JobSpec
from gpupool.domain.states import JobState

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
T = TypeVar("T", bound=np.generic)

NODE_UP, NODE_DRAINED, NODE_LOST = 0, 1, 2
LINK_UP, LINK_DEGRADED, LINK_DOWN = 0, 1, 2


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A placed job. ``last_checkpoint_s``: its latest checkpoint (None: none yet, work counts from the
    start); ``preemptions``: how often it was preempted before this run."""

    spec: JobSpec
    allocation: Allocation
    placed_at_s: float
    started_at_s: float | None = None
    last_checkpoint_s: float | None = None
    preemptions: int = 0

    @property
    def gpu_milli(self) -> int:
        """Milli-GPU the allocation holds (an elastic job may hold fewer tasks than its spec asks)."""
        return sum(t.milli_gpu * len(t.gpus) for t in self.allocation.tasks)

    def work_lost_s(self, now_s: float) -> float:
        """Seconds of progress a preemption at ``now_s`` would throw away (since the start or checkpoint)."""
        since = self.last_checkpoint_s if self.last_checkpoint_s is not None else self.started_at_s
        return max(0.0, now_s - (since if since is not None else self.placed_at_s))

    def runtime_s(self, now_s: float) -> float:
        return max(0.0, now_s - (self.started_at_s if self.started_at_s is not None else self.placed_at_s))


@dataclass(frozen=True, slots=True)
class RunningArrays:
    """The running jobs as arrays (read-only): per job slot, when it started (else was placed), its estimated
    runtime (NaN without one) and whether it still runs (an ended job's slot stays until the state compacts);
    per whole-GPU task, its job's slot, host and GPU count. A cycle asks "whose GPUs free up by t" with a few
    array operations instead of a pass over every running job (``scheduler.topowait``)."""

    start_s: FloatArray
    estimate_s: FloatArray
    alive: npt.NDArray[np.bool_]
    task_slot: IntArray
    task_host: IntArray
    task_gpus: IntArray

    @classmethod
    def of(cls, running: Mapping[str, RunningJob], index: FabricIndex) -> RunningArrays:
        """Built from the running jobs themselves (a snapshot made by hand has no state to keep them)."""
        table = RunningTable(index)
        for r in running.values():
            table.add(r)
        return table.arrays()


def _grown(a: npt.NDArray[T], size: int) -> npt.NDArray[T]:
    """``a`` copied into a new array of ``size`` along its last axis (the rest zero)."""
    out = np.zeros((*a.shape[:-1], size), dtype=a.dtype)
    out[..., : a.shape[-1]] = a
    return out


class RunningTable:
    """``RunningArrays`` kept in place by the state as jobs are placed, start and end: appends into arrays that
    grow by doubling; an ended job's slot is marked dead, and the dead are compacted away once they are half."""

    __slots__ = ("_alive", "_dead", "_est", "_index", "_n", "_slot", "_start", "_tasks", "_tn")

    def __init__(self, index: FabricIndex) -> None:
        self._index = index
        self._slot: dict[str, int] = {}
        self._n = self._tn = self._dead = 0
        self._start = np.zeros(64, dtype=np.float64)
        self._est = np.zeros(64, dtype=np.float64)
        self._alive = np.zeros(64, dtype=np.bool_)
        self._tasks = np.zeros((3, 64), dtype=np.int64)  # rows: slot, host, GPUs of each whole-GPU task

    def add(self, r: RunningJob) -> None:
        n = self._n
        if n == self._start.size:
            size = max(64, 2 * n)
            self._start, self._est, self._alive = (
                _grown(self._start, size),
                _grown(self._est, size),
                _grown(self._alive, size),
            )
        est = r.spec.estimated_runtime_s
        self._start[n] = r.started_at_s if r.started_at_s is not None else r.placed_at_s
        self._est[n] = np.nan if est is None else est
        self._alive[n] = True
        self._slot[r.spec.job_id] = n
        self._n = n + 1
        for t in r.allocation.tasks:
            if t.milli_gpu >= MILLI_PER_GPU:
                if self._tn == self._tasks.shape[1]:
                    self._tasks = _grown(self._tasks, max(64, 2 * self._tn))
                self._tasks[:, self._tn] = (n, self._index.host_index(t.host), len(t.gpus))
                self._tn += 1

    def started(self, job_id: str, at_s: float) -> None:
        self._start[self._slot[job_id]] = at_s

    def remove(self, job_id: str) -> None:
        self._alive[self._slot.pop(job_id)] = False
        self._dead += 1
        if self._dead > 1024 and 2 * self._dead > self._n:
            self._compact()

    def _compact(self) -> None:
        n, alive = self._n, self._alive[: self._n]
        keep = np.flatnonzero(alive)
        moved = np.full(n, -1, dtype=np.int64)
        moved[keep] = np.arange(keep.size)
        tasks = self._tasks[:, : self._tn]
        tasks = tasks[:, alive[tasks[0]]]  # a copy
        tasks[0] = moved[tasks[0]]
        size = max(64, 2 * keep.size)
        self._start = _grown(self._start[keep], size)
        self._est = _grown(self._est[keep], size)
        self._alive = _grown(alive[keep], size)
        self._tasks = _grown(tasks, max(64, 2 * tasks.shape[1]))
        self._slot = {j: int(moved[s]) for j, s in self._slot.items()}
        self._n, self._tn, self._dead = int(keep.size), int(tasks.shape[1]), 0

    def arrays(self) -> RunningArrays:
        n, tn = self._n, self._tn
        out = RunningArrays(
            self._start[:n].copy(),
            self._est[:n].copy(),
            self._alive[:n].copy(),
            self._tasks[0, :tn].copy(),
            self._tasks[1, :tn].copy(),
            self._tasks[2, :tn].copy(),
        )
        for a in (out.start_s, out.estimate_s, out.alive, out.task_slot, out.task_host, out.task_gpus):
            a.setflags(write=False)
        return out


class SnapshotMemo:
    """Values derived from a snapshot's health and node arrays (GPU grades and temperatures, switch state,
    node states and labels), computed once and shared by every snapshot until one of those arrays changes.

    Why: the scheduler's fixed cost per cycle (telemetry penalties, usable GPUs) depends only on these
    arrays, which change rarely, while jobs change the snapshot every cycle. ``ClusterState`` hands out a
    fresh memo whenever one of them changes, so a stored value can never be stale; values must be immutable
    (frozen, read-only arrays). A snapshot built by hand gets a memo of its own.
    """

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: dict[Hashable, object] = {}

    def get(self, key: Hashable) -> object | None:
        return self._values.get(key)

    def put(self, key: Hashable, value: object) -> None:
        self._values[key] = value


class PendingFeed:
    """What entered and left the pending queue, in order: a job's spec when it entered (submitted, or back
    after a preemption), its id when it left (placed, cancelled). Append-only while its state uses it, so the
    first ``ClusterSnapshot.pending_feed_at`` entries never change: a reader that kept a queue of its own (the
    scheduler's order index) catches up from where it stopped reading instead of going through every job.
    The state starts a new feed when this one grows long; a reader then starts again from ``pending``."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: list[JobSpec | str] = []


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """The cluster at one version. The fabric index is shared; every array here is a read-only copy.

    Per GPU (hosts x max GPUs per host): milli-GPU and GPU memory in use, health grade (``HealthGrade``
    values) and temperature (NaN when unknown). Per host: CPU and memory in use, node state
    (``NODE_UP``/``NODE_DRAINED``/``NODE_LOST``) and labels. Per switch: congestion score in [0, 1],
    whether its uplinks are erroring, and link state (``LINK_*``).
    """

    index: FabricIndex
    version: int
    gpu_used_milli: IntArray
    gpu_used_memory_mib: IntArray
    gpu_grade: IntArray
    gpu_temperature_c: FloatArray
    host_cpu_used: IntArray
    host_memory_used: IntArray
    node_state: IntArray
    host_labels: tuple[frozenset[tuple[str, str]], ...]
    switch_congestion: FloatArray
    switch_erroring: npt.NDArray[np.bool_]
    switch_link_state: IntArray
    running: Mapping[str, RunningJob]
    pending: tuple[JobSpec, ...]
    attained_gpu_s: Mapping[str, float]  # GPU-seconds of service each job has had so far (for LAS)
    preemption_count: Mapping[str, int]  # how often each job has been preempted (its history in the queue)
    job_states: Mapping[str, JobState] = field(default_factory=dict)  # of the jobs pending jobs depend on
    memo: SnapshotMemo = field(default_factory=SnapshotMemo, compare=False, repr=False)
    # How ``pending`` came about: its feed and how many of its entries it reflects (None: a snapshot built by hand).
    pending_feed: PendingFeed | None = field(default=None, compare=False, repr=False)
    pending_feed_at: int = field(default=0, compare=False, repr=False)
    # ``running`` as arrays, kept by the state (None: a snapshot built by hand; ``running_arrays()`` builds them).
    running_table: RunningArrays | None = field(default=None, compare=False, repr=False)

    @property
    def fabric_name(self) -> str:
        return self.index.fabric.name

    def running_arrays(self) -> RunningArrays:
        """``running`` as arrays: the state's, or built from the jobs for a snapshot made by hand."""
        if self.running_table is not None:
            return self.running_table
        return RunningArrays.of(self.running, self.index)

    def free_gpus(self) -> int:
        """Whole GPUs nobody holds any part of, on hosts that are up (for reports and tests)."""
        idle = (self.gpu_used_milli == 0) & (self.gpu_used_memory_mib == 0) & self.index.gpu_exists
        return int(idle[self.node_state == NODE_UP].sum())
