"""The ``frag`` placer: FGD's fragmentation measure (GPUs, CPU, memory, GPU models), its picks, the mix."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobPlaced, JobSubmitted
from gpupool.domain.jobs import Allocation, GpuShare, JobSpec, TaskAllocation
from gpupool.fabric.fabric import Fabric
from gpupool.scheduler import SchedulerConfig, ScheduleRequest, schedule
from gpupool.scheduler.capacity import Capacity
from gpupool.scheduler.fragmentation import (
    SIZE_EXPONENT,
    SIZE_FLOOR_MILLI,
    QueueMixes,
    expected_fragmentation,
    frag_pick_cpu,
    mix_of,
    request_mix,
)
from gpupool.scheduler.telemetry import penalties
from gpupool.scheduler.types import RequestType, TelemetryWeights
from gpupool.sim.fabrics import nodes_fabric
from gpupool.sim.traces.records import TraceNode

CFG = SchedulerConfig(policy="fifo", placer="frag", strict=True, max_placements_per_cycle=1)


def fabric(*nodes: tuple[int, str, int]) -> Fabric:
    """Hosts n0, n1, ... of (GPUs, model, CPU millicores), 64 GiB memory each."""
    return nodes_fabric([TraceNode(f"n{i}", g, m, cpu, 65_536) for i, (g, m, cpu) in enumerate(nodes)])


def occupy(state: ClusterState, job_id: str, host: str, gpus: tuple[int, ...], milli: int, cpu: int = 0) -> None:
    job = JobSpec(job_id, 0.0, gpus_per_task=1, share=GpuShare(milli) if milli < 1000 else None, cpu_millicores=cpu)
    state.apply(JobSubmitted(job, 0.0))
    state.apply(JobPlaced(Allocation(job_id, (TaskAllocation(host, gpus, milli, 0, cpu, 0),)), 0.0))


def place(state: ClusterState, job: JobSpec, mix: tuple[RequestType, ...] = ()) -> tuple[str, tuple[int, ...]]:
    res = schedule(ScheduleRequest(state.snapshot(), (job,), 0.0, CFG, workload_mix=mix))
    assert len(res.placements) == 1, res.waiting
    task = res.placements[0].tasks[0]
    return task.host, task.gpus


def share(job_id: str, milli: int, cpu: int = 0, models: tuple[str, ...] = ()) -> JobSpec:
    return JobSpec(job_id, 0.0, gpus_per_task=1, share=GpuShare(milli), cpu_millicores=cpu, gpu_models=models)


# ------------------------------------------------------------------ the measure


def test_fragment_is_the_free_capacity_of_gpus_too_small_for_the_type() -> None:
    mix = mix_of([RequestType(1, 500, 1.0)], 32_768)
    assert mix is not None
    eff = np.array([[300, 1000], [500, 0]], dtype=np.int64)
    # Row 0: the 300 free is too small for a 500 share, the whole GPU is not; row 1: 500 fits exactly.
    assert expected_fragmentation(eff, mix).tolist() == [300.0, 0.0]


def test_a_type_the_host_cannot_run_finds_all_its_free_capacity_fragmented() -> None:
    mix = mix_of([RequestType(2, 1000, 1.0)], 32_768)
    assert mix is not None
    one_whole = np.array([[1000, 400]], dtype=np.int64)
    assert expected_fragmentation(one_whole, mix).tolist() == [1400.0]  # a 2-GPU task cannot run at all
    mix_cpu = mix_of([RequestType(1, 1000, 1.0, cpu_millicores=4000)], 32_768)
    assert mix_cpu is not None
    two = np.array([[1000, 1000]], dtype=np.int64)
    cpu = np.array([3000], dtype=np.int64)
    assert expected_fragmentation(two, mix_cpu, cpu=cpu).tolist() == [2000.0]  # lacks CPU: Q4 in FGD's terms
    assert expected_fragmentation(two, mix_cpu).tolist() == [0.0]


def test_weights_follow_popularity_times_size_factor() -> None:
    # 500 milli, popularity 3: 3 * 0.5**-3 = 24; 200 milli counts as the 230 floor: 1 * 0.23**-3.
    mix = mix_of([RequestType(1, 500, 3.0), RequestType(1, 200, 1.0)], 32_768)
    assert mix is not None
    big, small = 3 * 0.5**SIZE_EXPONENT, (SIZE_FLOOR_MILLI / 1000) ** SIZE_EXPONENT
    assert mix.milli.tolist() == [200, 500]  # the small share weighs most
    assert mix.weight.tolist() == pytest.approx([small / (big + small), big / (big + small)])
    eff = np.array([[300]], dtype=np.int64)
    assert expected_fragmentation(eff, mix).tolist() == pytest.approx([300 * big / (big + small)])  # only 500 cannot


def test_whole_gpu_types_weigh_their_popularity_whatever_their_gpu_count() -> None:
    mix = mix_of([RequestType(1, 1000, 3.0), RequestType(8, 1000, 1.0)], 32_768)
    assert mix is not None
    assert mix.gpus.tolist() == [1, 8]
    assert mix.weight.tolist() == [0.75, 0.25]


def test_request_mix_counts_tasks_per_type_most_popular_first() -> None:
    jobs = [share("a", 300, 1000), share("b", 300, 1000), share("c", 300, 2000)]
    jobs += [JobSpec("d", 0.0, tasks=3, gpus_per_task=2, gpu_models=("T4",))]
    mix = request_mix(jobs)
    assert [(t.gpus, t.milli_gpu, t.cpu_millicores, t.gpu_models) for t in mix] == [
        (2, 1000, 0, ("T4",)),
        (1, 300, 1000, ()),
        (1, 300, 2000, ()),
    ]
    assert [t.weight for t in mix] == [0.5, 2 / 6, 1 / 6]


# ------------------------------------------------------------------ picks


def test_share_goes_where_it_leaves_least_fragment_for_the_workload() -> None:
    state = ClusterState(fabric((2, "G2", 64_000), (2, "G2", 64_000)))
    occupy(state, "x", "n0", (0,), 500)  # n0 GPU0 has 500 free
    occupy(state, "y", "n1", (0,), 700)  # n1 GPU0 has 300 free
    # The workload is all 300-shares: the 300 gap on n1 is exactly right; the 500 gap would keep 200 idle.
    assert place(state, share("s", 300), mix=(RequestType(1, 300, 1.0),)) == ("n1", (0,))
    # All 500-shares: n1's 300 gap is useless to them, so filling it removes a fragment; n0's 500 gap would
    # become a useless 200.
    assert place(state, share("t", 300), mix=(RequestType(1, 500, 1.0),)) == ("n1", (0,))


def test_the_mix_in_the_request_overrides_the_queue() -> None:
    state = ClusterState(fabric((2, "G2", 64_000), (4, "G2", 64_000)))
    occupy(state, "x", "n1", (0,), 1000)  # n0: 2 whole GPUs free; n1: 3
    job = JobSpec("j", 0.0, gpus_per_task=1)
    # Queue-only mix (1-GPU tasks): no choice fragments anything; the tie goes to the fullest host.
    assert place(state, job)[0] == "n0"
    # A workload of 2-GPU tasks: n0 would keep one lone GPU they cannot use; n1 keeps a pair.
    assert place(state, job, mix=(RequestType(2, 1000, 1.0),))[0] == "n1"


def test_cpu_decides_when_a_host_would_strand_its_gpus() -> None:
    # n0 has 4,000 CPU left: a 4,000-CPU share there leaves its 2 whole GPUs without CPU for the workload.
    state = ClusterState(fabric((2, "G2", 4_000), (2, "G2", 64_000)))
    occupy(state, "x", "n1", (0,), 1000, cpu=0)  # n1 is fuller by GPUs: best-fit by GPUs alone picks n1 ...
    mix = (RequestType(1, 1000, 1.0, cpu_millicores=2_000),)
    # ... FGD's measure too: n0 would lose all its GPUs to want of CPU.
    assert place(state, share("s", 500, cpu=4_000), mix=mix)[0] == "n1"


def test_gpu_model_constraints_count_as_no_access() -> None:
    # n0 (T4) and n1 (G2), equal otherwise. A workload that only runs on T4 makes the G2 GPU a fragment
    # already, so a model-free share goes there and keeps the T4 whole; and the other way round.
    state = ClusterState(fabric((1, "T4", 64_000), (1, "G2", 64_000)))
    mix = (RequestType(1, 1000, 1.0, gpu_models=("T4",)),)
    assert place(state, share("s", 500), mix=mix)[0] == "n1"
    mix_g2 = (RequestType(1, 1000, 1.0, gpu_models=("G2",)),)
    assert place(state, share("t", 500), mix=mix_g2)[0] == "n0"


def test_whole_gpu_host_pick_finds_the_one_host_among_hundreds() -> None:
    # 300 hosts of 2 GPUs; only the last has one GPU used, so a 1-GPU task fills it and leaves all other
    # hosts whole for 2-GPU tasks.
    nodes = [(2, "G2", 64_000)] * 300
    state = ClusterState(fabric(*nodes))
    occupy(state, "x", "n299", (0,), 1000)
    job = JobSpec("j", 0.0, gpus_per_task=1)
    assert place(state, job, mix=(RequestType(2, 1000, 1.0),)) == ("n299", (1,))


def test_same_request_same_answer() -> None:
    state = ClusterState(fabric(*[(8, "G2", 96_000)] * 6, *[(2, "T4", 32_000)] * 6))
    occupy(state, "x", "n3", (2,), 350)
    occupy(state, "y", "n8", (1,), 650)
    jobs = (share("s", 300, 1000), share("t", 640, 2000), JobSpec("w", 0.0, gpus_per_task=2))
    req = ScheduleRequest(state.snapshot(), jobs, 0.0, SchedulerConfig(policy="fifo", placer="frag"))
    assert schedule(req) == schedule(req)


def test_queue_mix_weighs_the_next_jobs_most() -> None:
    jobs = [share("a", 300), share("b", 500), share("c", 500)]
    mix = request_mix(jobs, horizon=1.0)
    weights = {t.milli_gpu: t.weight for t in mix}
    assert weights[300] > weights[500]  # one job first outweighs two behind it at a short horizon
    flat = {t.milli_gpu: t.weight for t in request_mix(jobs)}
    assert flat[300] < flat[500]


def test_queue_mixes_match_request_mix_of_each_window() -> None:
    jobs = [share(f"s{i}", (100, 300, 500)[i % 3], 1000 * (i % 2)) for i in range(30)]
    jobs += [JobSpec("w", 0.0, tasks=2, gpus_per_task=2), JobSpec("big", 0.0, gpus_per_task=16)]
    mixes = QueueMixes(jobs, 8, 4.0, 10)
    for k in (0, 7, 25, 31):
        want = request_mix(jobs[k : k + 10], 8, 4.0)
        got = mixes.at(k)
        assert [t.weight for t in got] == pytest.approx([t.weight for t in want])
        assert [dataclasses.replace(t, weight=0.0) for t in got] == [dataclasses.replace(t, weight=0.0) for t in want]


def test_a_cpu_only_task_goes_where_its_cpu_strands_no_gpu() -> None:
    # Both hosts have two whole GPUs free; 4,000 millicores on n0 (7,000) would leave too little CPU for the
    # mix's 1-GPU task, stranding both GPUs; n1 (20,000) keeps enough. The tightest CPU would pick n0.
    state = ClusterState(fabric((2, "G2", 7_000), (2, "G2", 20_000)))
    mix = mix_of([RequestType(1, 1000, 1.0, cpu_millicores=4000)], 32_768)
    assert mix is not None
    snap = state.snapshot()
    cap = Capacity(snap, penalties(snap, TelemetryWeights()))
    assert frag_pick_cpu(cap, 4000, 0, mix) == 1
    occupy(state, "full", "n0", (0, 1), 1000)
    snap = state.snapshot()
    cap = Capacity(snap, penalties(snap, TelemetryWeights()))
    assert frag_pick_cpu(cap, 4000, 0, mix) == 0  # n0's GPUs are taken: nothing left to strand, less free
    assert frag_pick_cpu(cap, 30_000, 0, mix) is None
