"""Immutable snapshots of the cluster: what the scheduler reads. Arrays are read-only copies."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpupool.cluster.index import FabricIndex
from gpupool.domain.jobs import Allocation, JobSpec

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

NODE_UP, NODE_DRAINED, NODE_LOST = 0, 1, 2
LINK_UP, LINK_DEGRADED, LINK_DOWN = 0, 1, 2


@dataclass(frozen=True, slots=True)
class RunningJob:
    spec: JobSpec
    allocation: Allocation
    placed_at_s: float
    started_at_s: float | None = None


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

    @property
    def fabric_name(self) -> str:
        return self.index.fabric.name

    def free_gpus(self) -> int:
        """Whole GPUs nobody holds any part of, on hosts that are up (for reports and tests)."""
        idle = (self.gpu_used_milli == 0) & (self.gpu_used_memory_mib == 0) & self.index.gpu_exists
        return int(idle[self.node_state == NODE_UP].sum())
