"""``ClusterState.resumed``: a state carried on from a snapshot holds what the live one held, and the same
events take both to the same snapshots (the forward projection's fork must not drift from the live state)."""

from __future__ import annotations

import numpy as np

from gpupool.cluster import ClusterState
from gpupool.domain.events import (
    GpuHealthChanged,
    HealthGrade,
    JobCheckpointed,
    JobEnded,
    JobFinished,
    JobPlaced,
    JobStarted,
    JobSubmitted,
    NodeDrained,
    NodeLabelled,
    RanksReleased,
    RanksReleasing,
    TelemetryReported,
)
from gpupool.domain.jobs import Allocation, JobSpec, TaskAllocation
from gpupool.domain.states import JobState
from gpupool.fabric.generators import leaf_spine

ARRAYS = (
    "gpu_used_milli",
    "gpu_used_memory_mib",
    "gpu_grade",
    "gpu_temperature_c",
    "host_cpu_used",
    "host_memory_used",
    "node_state",
    "switch_congestion",
    "switch_erroring",
    "switch_link_state",
)


def same(a: ClusterState, b: ClusterState) -> None:
    x, y = a.snapshot(), b.snapshot()
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(x, name), getattr(y, name), err_msg=name)
    assert dict(x.running) == dict(y.running)
    assert x.pending == y.pending
    assert x.host_labels == y.host_labels
    assert dict(x.attained_gpu_s) == dict(y.attained_gpu_s)
    assert a.releasing == b.releasing


def test_a_resumed_state_holds_the_live_one_and_moves_with_it() -> None:
    fab = leaf_spine(2, 1, 2, gpus_per_host=4)
    hosts = [h.name for h in fab.hosts]
    live = ClusterState(fab)
    for i, spec in enumerate(JobSpec(f"j{i}", float(i), gpus_per_task=2) for i in range(5)):
        live.apply(JobSubmitted(spec, spec.submit_time_s))
        if i < 3:
            live.apply(JobPlaced(Allocation(spec.job_id, (TaskAllocation(hosts[i], (0, 1)),)), 10.0))
    live.apply(JobStarted("j0", 11.0))
    live.apply(JobStarted("j1", 12.0))
    live.apply(JobCheckpointed("j1", 20.0))
    live.apply(JobEnded("j1", JobState.CANCELLED, 30.0))
    live.apply(RanksReleasing(Allocation("j1", (TaskAllocation(hosts[1], (0, 1)),)), 30.0))
    live.apply(NodeDrained(hosts[3], 31.0))
    live.apply(NodeLabelled(hosts[2], (("zone", "a"),), 31.0))
    live.apply(GpuHealthChanged(hosts[0], 3, HealthGrade.DEGRADED, 32.0))
    live.apply(TelemetryReported(hosts[2], (40.0, 90.0, 50.0, 50.0), 33.0))
    fork = ClusterState.resumed(live.snapshot(), live.releasing)
    same(live, fork)
    for ev in (JobFinished("j0", 100.0), RanksReleased("j1", 101.0), JobStarted("j2", 102.0)):
        live.apply(ev)
        fork.apply(ev)
        same(live, fork)
    assert fork.job_state("j0") is JobState.FINISHED
