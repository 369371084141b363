"""Snapshots reuse what did not change: job events keep the health arrays and the memo, health and node
events replace them, and the scheduler's remembered penalties and usable GPUs follow."""

from __future__ import annotations

import numpy as np

from gpupool.cluster import ClusterState
from gpupool.domain.events import (
    GpuHealthChanged,
    HealthGrade,
    JobPlaced,
    JobSubmitted,
    NodeDrained,
    TelemetryReported,
)
from gpupool.domain.jobs import Allocation, JobSpec, TaskAllocation
from gpupool.fabric.generators import leaf_spine
from gpupool.scheduler.capacity import Capacity
from gpupool.scheduler.telemetry import penalties
from gpupool.scheduler.types import TelemetryWeights


def _state() -> ClusterState:
    return ClusterState(leaf_spine(2, 2, 2, gpus_per_host=8))


def _place(state: ClusterState, job_id: str, host: str) -> None:
    state.apply(JobSubmitted(JobSpec(job_id, 0.0, gpus_per_task=2), 0.0))
    state.apply(JobPlaced(Allocation(job_id, (TaskAllocation(host, (0, 1)),)), 0.0))


def test_job_events_keep_health_arrays_and_memo_but_not_usage() -> None:
    state = _state()
    a = state.snapshot()
    _place(state, "j", "node001")
    b = state.snapshot()
    assert b.version > a.version and b.memo is a.memo
    assert b.gpu_grade is a.gpu_grade and b.node_state is a.node_state
    assert b.gpu_used_milli is not a.gpu_used_milli and int(b.gpu_used_milli.sum()) == 2000
    assert int(a.gpu_used_milli.sum()) == 0  # the earlier snapshot is unchanged
    w = TelemetryWeights()
    assert penalties(b, w) is penalties(a, w)
    assert Capacity(b, penalties(b, w)).usable is Capacity(a, penalties(a, w)).usable


def test_health_and_node_events_give_fresh_arrays_memo_and_penalties() -> None:
    state = _state()
    w = TelemetryWeights()
    a = state.snapshot()
    before = penalties(a, w)
    assert not before.any
    state.apply(TelemetryReported("node002", (80.0,) * 8, 1.0))
    b = state.snapshot()
    assert b.memo is not a.memo and b.gpu_temperature_c is not a.gpu_temperature_c
    hot = penalties(b, w)
    assert hot.any and hot.host[b.index.host_index("node002")] > 0 and not before.any
    state.apply(GpuHealthChanged("node003", 0, HealthGrade.BAD, 2.0))
    c = state.snapshot()
    assert not Capacity(c, penalties(c, w)).usable[c.index.host_index("node003"), 0]
    assert Capacity(b, penalties(b, w)).usable[b.index.host_index("node003"), 0]
    state.apply(NodeDrained("node004", 3.0))
    d = state.snapshot()
    assert d.memo is not c.memo
    assert not Capacity(d, penalties(d, w)).usable[d.index.host_index("node004")].any()
    assert np.array_equal(d.gpu_grade, c.gpu_grade)


def test_remembered_arrays_are_read_only() -> None:
    snap = _state().snapshot()
    p = penalties(snap, TelemetryWeights())
    cap = Capacity(snap, p)
    assert not p.host.flags.writeable and not cap.usable.flags.writeable and not cap.full_mem.flags.writeable
