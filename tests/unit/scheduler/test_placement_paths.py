"""The placers' shortcuts pick what the general paths pick: ``lexmin``/``lexorder`` against ``np.lexsort``, and
the zero-penalty paths of the GPU picks against the penalty path on the same (all-zero) penalties."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from sched_builders import make_fabric

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobPlaced, JobSubmitted
from gpupool.domain.jobs import Allocation, GpuShare, JobSpec, PriorityClass, TaskAllocation
from gpupool.scheduler.capacity import Capacity
from gpupool.scheduler.placement import HostOrder, lexmin, lexorder, make_need, pick_gpus, share_gpu_on
from gpupool.scheduler.placers import CycleContext, single_host
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


def _capacity(seed: int, forced: bool = False) -> Capacity:
    """Four leaves of 4 hosts x 8 GPUs with random whole GPUs taken on each host, and a share of some of the
    GPUs left. ``forced``: penalties said to be non-zero (they are all zero), so placers take the general
    path."""
    rng = np.random.default_rng(seed)
    state = ClusterState(make_fabric(4, 4))
    for h, host in enumerate(state.index.fabric.hosts):
        order = [int(g) for g in rng.permutation(8)]
        used = sorted(order[: int(rng.integers(0, 8))])
        if used:
            spec = JobSpec(f"r{h}", 0.0, gpus_per_task=len(used))
            state.apply(JobSubmitted(spec, 0.0))
            state.apply(JobPlaced(Allocation(spec.job_id, (TaskAllocation(host.name, tuple(used)),)), 0.0))
        for g in order[len(used) : len(used) + int(rng.integers(0, 3))]:
            milli, mem = int(rng.choice([100, 300, 500])), int(rng.choice([1000, 5000, 20000]))
            spec = JobSpec(f"s{h}-{g}", 0.0, share=GpuShare(milli, mem))
            state.apply(JobSubmitted(spec, 0.0))
            state.apply(JobPlaced(Allocation(spec.job_id, (TaskAllocation(host.name, (g,), milli, mem),)), 0.0))
    snap = state.snapshot()
    cap = Capacity(snap, penalties(snap, SchedulerConfig().telemetry))
    assert not cap.penalties.any
    if forced:
        cap.penalties = replace(cap.penalties, any=True)  # the same zeros, through the general path
    return cap


def test_gpu_picks_without_penalties_are_the_penalty_paths_picks() -> None:
    for seed in range(20):
        cap, forced = _capacity(seed), _capacity(seed, forced=True)
        for h in range(cap.index.n_hosts):
            free = int(cap.free_whole[h])
            for n in range(1, free + 1):
                for how in HostOrder:
                    assert pick_gpus(cap, h, n, how) == pick_gpus(forced, h, n, how), (seed, h, n, how)


def test_share_and_single_host_picks_without_penalties_are_the_penalty_paths_picks() -> None:
    ix_hosts = np.arange(16, dtype=np.int64)
    for seed in range(20):
        cap, forced = _capacity(seed), _capacity(seed, forced=True)
        ctx = CycleContext(cap.index, ix_hosts, 2, None)
        for milli in (100, 400, 700):
            for mem in (1000, 30000):
                for realtime in (False, True):
                    prio = PriorityClass.REALTIME if realtime else PriorityClass.NORMAL
                    need = make_need(JobSpec("s", 0.0, share=GpuShare(milli, mem), priority=prio), cap, None)
                    for how in HostOrder:
                        want = share_gpu_on(forced, need, ix_hosts, how)
                        assert share_gpu_on(cap, need, ix_hosts, how) == want, (seed, milli, mem, how)
        for gpus in (1, 2, 4, 8):
            need = make_need(JobSpec("w", 0.0, gpus_per_task=gpus), cap, None)
            assert single_host(cap, need, gpus, ctx) == single_host(forced, need, gpus, ctx), (seed, gpus)
