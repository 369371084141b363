"""The placers' shortcuts pick what the general paths pick: ``lexmin``/``lexorder`` against ``np.lexsort``, and
the zero-penalty paths of the GPU picks against the penalty path on the same (all-zero) penalties."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from sched_builders import make_fabric

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobPlaced, JobSubmitted
from gpupool.domain.jobs import Allocation, JobSpec, TaskAllocation
from gpupool.scheduler.capacity import Capacity
from gpupool.scheduler.placement import HostOrder, lexmin, lexorder, pick_gpus
from gpupool.scheduler.telemetry import penalties
from gpupool.scheduler.types import SchedulerConfig


def test_lexmin_and_lexorder_agree_with_lexsort_on_keys_with_many_ties() -> None:
    rng = np.random.default_rng(3)
    for trial in range(300):
        n = int(rng.integers(1, 40))
        keys = (
            np.arange(n, dtype=np.int64)[::-1].copy() if trial % 2 else np.arange(n, dtype=np.int64),
            rng.integers(0, 3, n).astype(np.float64) * 0.25,
            rng.integers(0, 2, n),
            -rng.integers(0, 4, n),
        )[-int(rng.integers(1, 5)) :]
        want = np.lexsort(keys)
        assert lexmin(keys) == int(want[0])
        items = rng.permutation(n).astype(np.int64)
        assert list(lexorder(items, keys)) == [int(x) for x in items[want]]


def _capacity(seed: int) -> Capacity:
    """Two leaves of 4 hosts x 8 GPUs with random whole GPUs taken on each host."""
    rng = np.random.default_rng(seed)
    state = ClusterState(make_fabric(2, 4))
    for h, host in enumerate(state.index.fabric.hosts):
        used = sorted(int(g) for g in rng.choice(8, size=int(rng.integers(0, 8)), replace=False))
        if used:
            spec = JobSpec(f"r{h}", 0.0, gpus_per_task=len(used))
            state.apply(JobSubmitted(spec, 0.0))
            state.apply(JobPlaced(Allocation(spec.job_id, (TaskAllocation(host.name, tuple(used)),)), 0.0))
    snap = state.snapshot()
    return Capacity(snap, penalties(snap, SchedulerConfig().telemetry))


def test_gpu_picks_without_penalties_are_the_penalty_paths_picks() -> None:
    for seed in range(20):
        cap = _capacity(seed)
        assert not cap.penalties.any
        forced = _capacity(seed)
        forced.penalties = replace(forced.penalties, any=True)  # the same zeros, through the general path
        for h in range(cap.index.n_hosts):
            free = int(cap.free_whole[h])
            for n in range(1, free + 1):
                for how in HostOrder:
                    assert pick_gpus(cap, h, n, how) == pick_gpus(forced, h, n, how), (seed, h, n, how)
