"""Per-job helpers both scheduling loops share: a job's shape, its host mask and its allocation record."""

from __future__ import annotations

import numpy as np

from gpupool.domain.jobs import MILLI_PER_GPU, Allocation, JobSpec, PriorityClass, TaskAllocation, TopologyRequirement
from gpupool.scheduler.capacity import BoolArray, Capacity
from gpupool.scheduler.placement import Need, TaskPick

Shape = tuple[object, ...]


def shape(job: JobSpec, topology: TopologyRequirement | None = None) -> Shape:
    """What decides whether a job fits; jobs of one shape fit or not alike within a cycle. ``topology``: the
    one the cycle places it by, when not its own (``Cycle.topology_for``)."""
    return (
        job.tasks,
        job.gpus_per_task,
        job.cpu_millicores,
        job.memory_mib,
        job.share,
        job.gpu_models,
        job.node_selector,
        job.topology if topology is None else topology,
        job.rail_aligned,
        job.priority >= PriorityClass.REALTIME,
    )


def host_mask(cap: Capacity, job: JobSpec, labels: tuple[frozenset[tuple[str, str]], ...]) -> BoolArray | None:
    if not job.gpu_models and not job.node_selector:
        return None
    ix = cap.index
    mask = np.ones(ix.n_hosts, dtype=np.bool_)
    if job.gpu_models:
        codes = [i for i, m in enumerate(ix.model_names) if m in job.gpu_models]
        mask &= np.isin(ix.host_model, codes)
    if job.node_selector:
        wanted = frozenset(job.node_selector)
        mask &= np.fromiter((wanted <= lab for lab in labels), dtype=np.bool_, count=ix.n_hosts)
    return mask


def allocation(cap: Capacity, need: Need, picks: list[TaskPick]) -> Allocation:
    whole = not need.share
    names = cap.index.fabric.hosts
    return Allocation(
        need.job.job_id,
        tuple(
            TaskAllocation(
                host=names[h].name,
                gpus=gpus,
                milli_gpu=MILLI_PER_GPU if whole else need.share_milli,
                gpu_memory_mib=0 if whole else need.share_mem,
                cpu_millicores=need.cpu,
                memory_mib=need.mem,
            )
            for h, gpus in picks
        ),
    )
