"""``pack``: the FGD protocol (Weng et al., ATC'23), to compare with the authors' published raw results.

Pods are resampled with a seed until their total GPU request is ``tune`` x the cluster's GPU capacity (each
draw copies a uniformly chosen pod of the list), shuffled with the same seed, then placed one by one with no
departures: a pod that does not fit when it arrives stays unscheduled. Reported: the GPU allocation ratio
(milli-GPU allocated / capacity) as arrived demand grows from 0 to ``tune`` x capacity, and the GPUs left
unallocated at the end.

Every GPU pod goes through the production ``schedule()`` alone (so only it can be placed); the FGD protocol
gives its placer the workload's request mix, and the ``frag`` placer gets the mix a queue holding the next
``lookahead`` GPU pods would give it (``QueueMixes``: the next pods weigh most), as ``workload_mix``. CPU-only
pods have no JobSpec form yet (a JobSpec holds at least one GPU or a GPU share); until they have, this module
places them itself: with ``frag``, by the same measure (``frag_pick_cpu``: the host whose expected
fragmentation grows least, since CPU or memory taken can strand a host's free GPUs, as FGD scores them);
otherwise on the host with the fewest free GPUs that has room for their CPU and memory. They count in the
result.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobCancelled, JobPlaced, JobSubmitted
from gpupool.domain.jobs import MILLI_PER_GPU, Allocation, JobSpec, TaskAllocation
from gpupool.scheduler import SchedulerConfig, ScheduleRequest, schedule
from gpupool.scheduler.capacity import Capacity
from gpupool.scheduler.fragmentation import QUEUE_HORIZON, QueueMixes, cycle_mix, frag_pick_cpu
from gpupool.scheduler.placers import get_placer
from gpupool.scheduler.telemetry import penalties
from gpupool.scheduler.types import RequestType, TelemetryWeights
from gpupool.sim.fabrics import nodes_fabric
from gpupool.sim.traces.records import TraceJob, TraceNode
from gpupool.sim.traces.specs import to_job_spec

REPORT_AT = (100, 130)


@dataclass(frozen=True, slots=True)
class PackResult:
    total_gpus: int
    pods: int  # after resampling
    resampled: int
    placed: int
    unscheduled: int
    cpu_only_pods: int
    alloc_ratio_at: dict[int, float]  # arrived % of capacity -> allocated % of capacity, 0..tune*100
    unallocated_gpus: float  # at the end (tune x capacity arrived)
    wall_s: float

    def as_json(self) -> dict[str, object]:
        top = max(self.alloc_ratio_at)
        return {
            "total_gpus": self.total_gpus,
            "pods": self.pods,
            "resampled_pods": self.resampled,
            "placed": self.placed,
            "unscheduled": self.unscheduled,
            "cpu_only_pods": self.cpu_only_pods,
            "alloc_ratio_at": {str(k): v for k, v in self.alloc_ratio_at.items() if k % 10 == 0 or k in REPORT_AT},
            f"unallocated_gpus_at_{top}": round(self.unallocated_gpus, 3),
            "unallocated_gpus_at_130": round(self.unallocated_gpus, 3) if top == 130 else None,
            "wall_s": round(self.wall_s, 3),
        }


def request_milli(p: TraceJob) -> int:
    return p.gpus * p.gpu_milli


def tuned_pods(pods: Sequence[TraceJob], capacity_milli: int, tune: float, rng: np.random.Generator) -> list[TraceJob]:
    """The FGD ``-tune`` step: add copies of random pods until the total request reaches tune x capacity, then shuffle."""
    out = list(pods)
    total = sum(request_milli(p) for p in out)
    target = tune * capacity_milli
    copies = 0
    while total < target:
        base = pods[int(rng.integers(len(pods)))]
        copies += 1
        out.append(_renamed(base, f"{base.job_id}-tuned-{copies}"))
        total += request_milli(base)
    order = rng.permutation(len(out))
    return [out[i] for i in order]


def _renamed(p: TraceJob, name: str) -> TraceJob:
    return TraceJob(name, p.submit_s, p.duration_s, p.gpus, p.tasks, p.gpus_per_task, p.gpu_milli, p.gpu_memory_mib,
                    p.cpu_milli, p.memory_mib, p.gpu_model, p.tenant, p.kind)  # fmt: skip


def _cpu_host(state: ClusterState, pod: TraceJob, given: tuple[RequestType, ...] | None) -> int | None:
    """With ``given`` (a request mix, for the ``frag`` placer), the host whose expected fragmentation for
    that mix grows least; else the host with the fewest free GPUs that has room, then the tightest CPU."""
    snap = state.snapshot()
    if given is not None:
        mix = cycle_mix(given, (), snap.index)
        if mix is not None:
            return frag_pick_cpu(
                Capacity(snap, penalties(snap, TelemetryWeights())), pod.cpu_milli, pod.memory_mib, mix
            )
    ix = snap.index
    fits = (
        (ix.host_cpu_millicores - snap.host_cpu_used >= pod.cpu_milli)
        & (ix.host_memory_mib - snap.host_memory_used >= pod.memory_mib)
        & (snap.node_state == 0)
    )
    if not fits.any():
        return None
    free = ((snap.gpu_used_milli == 0) & ix.gpu_exists).sum(axis=1)
    cpu_left = ix.host_cpu_millicores - snap.host_cpu_used
    key = np.where(fits, free * 10**9 + cpu_left, np.iinfo(np.int64).max)  # fewest free GPUs, then tightest CPU
    return int(np.argmin(key))


def pack(
    nodes: Sequence[TraceNode],
    pods: Sequence[TraceJob],
    *,
    placement: str,
    tune: float = 1.3,
    seed: int = 42,
    lookahead: int = 256,
    horizon: float = QUEUE_HORIZON,
) -> PackResult:
    t0 = time.perf_counter()
    fabric = nodes_fabric(nodes)
    state = ClusterState(fabric)
    capacity = fabric.gpu_count * MILLI_PER_GPU
    rng = np.random.default_rng(seed)
    arrivals = tuned_pods(pods, capacity, tune, rng)
    per_host = max((h.gpu_count for h in fabric.hosts), default=1)
    specs: list[JobSpec | None] = [
        to_job_spec(p, max_gpus_per_task=per_host, submit_s=float(i)) for i, p in enumerate(arrivals)
    ]
    # The request mix the ``frag`` placer would read from a queue holding the next ``lookahead`` GPU pods.
    gpu_specs = [s for s in specs if s is not None]
    mix_at = QueueMixes(gpu_specs, per_host, horizon, lookahead).at
    uses_mix = get_placer(placement).uses_mix  # the placer reads the request mix (``frag``): give it one

    cfg = SchedulerConfig(policy="fifo", placer=placement, strict=True, max_placements_per_cycle=1, seed=seed)
    arrived = allocated = 0
    curve = np.zeros(len(arrivals) + 1, dtype=np.int64)
    alloc = np.zeros(len(arrivals) + 1, dtype=np.int64)
    placed = unscheduled = cpu_only = 0
    k = 0  # position in gpu_specs of the next GPU pod
    for i, (pod, spec) in enumerate(zip(arrivals, specs, strict=True)):
        arrived += request_milli(pod)
        if spec is None:
            cpu_only += 1
            h = _cpu_host(state, pod, mix_at(k) if uses_mix else None)
            if h is not None:
                task = TaskAllocation(fabric.hosts[h].name, (), 0, 0, pod.cpu_milli, pod.memory_mib)
                job = JobSpec(pod.job_id, float(i), gpus_per_task=1, cpu_millicores=pod.cpu_milli)
                state.apply(JobSubmitted(job, float(i)))
                state.apply(JobPlaced(Allocation(pod.job_id, (task,)), float(i)))
        else:
            given = mix_at(k) if uses_mix else ()
            k += 1
            state.apply(JobSubmitted(spec, float(i)))
            res = schedule(ScheduleRequest(state.snapshot(), (spec,), float(i), cfg, workload_mix=given))
            if res.placements:
                state.apply(JobPlaced(res.placements[0], float(i)))
                allocated += request_milli(pod)
                placed += 1
            else:
                state.apply(JobCancelled(spec.job_id, float(i)))
                unscheduled += 1
        curve[i + 1] = arrived
        alloc[i + 1] = allocated
    top = round(tune * 100)
    ratio: dict[int, float] = {}
    for pct in range(0, top + 1):
        j = int(np.searchsorted(curve, pct * capacity / 100.0, side="right")) - 1
        ratio[pct] = round(100.0 * float(alloc[max(j, 0)]) / capacity, 3)
    return PackResult(
        fabric.gpu_count,
        len(arrivals),
        len(arrivals) - len(pods),
        placed,
        unscheduled,
        cpu_only,
        ratio,
        (capacity - allocated) / MILLI_PER_GPU,
        time.perf_counter() - t0,
    )
