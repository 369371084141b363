"""Immutable snapshots of the cluster: what the scheduler reads. Arrays are read-only copies."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpupool.cluster.index import FabricIndex
from gpupool.domain.jobs import Allocation, JobSpec
from gpupool.domain.states import JobState

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

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

    @property
    def fabric_name(self) -> str:
        return self.index.fabric.name

    def free_gpus(self) -> int:
        """Whole GPUs nobody holds any part of, on hosts that are up (for reports and tests)."""
        idle = (self.gpu_used_milli == 0) & (self.gpu_used_memory_mib == 0) & self.index.gpu_exists
        return int(idle[self.node_state == NODE_UP].sum())
