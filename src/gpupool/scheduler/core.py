"""``schedule(request) -> result``: the pure decision the server and the simulator both call.

One cycle: order the pending jobs by the policy, copy the snapshot's capacity, then place jobs in order
until ``max_placements_per_cycle`` placements (or, with ``strict``, the first job that does not fit).
Refusals are remembered per job shape for the rest of the cycle: capacity only shrinks inside a cycle,
so a shape that did not fit still does not, and a queue of 20,000 blocked jobs costs a dict lookup each.
"""

from __future__ import annotations

import numpy as np

from gpupool.domain.errors import JobSpecError
from gpupool.domain.jobs import MILLI_PER_GPU, Allocation, JobSpec, PriorityClass, TaskAllocation
from gpupool.scheduler.capacity import BoolArray, Capacity
from gpupool.scheduler.diagnose import diagnose
from gpupool.scheduler.fragmentation import workload_mix
from gpupool.scheduler.placement import Need, TaskPick, make_need
from gpupool.scheduler.placers import CycleContext, get_placer
from gpupool.scheduler.policies import get_policy, order
from gpupool.scheduler.telemetry import penalties
from gpupool.scheduler.types import ReasonCode, ScheduleRequest, ScheduleResult, Waiting

_Shape = tuple[object, ...]


def _shape(job: JobSpec) -> _Shape:
    """What decides whether a job fits; jobs of one shape fit or not alike within a cycle."""
    return (
        job.tasks,
        job.gpus_per_task,
        job.cpu_millicores,
        job.memory_mib,
        job.share,
        job.gpu_models,
        job.node_selector,
        job.topology,
        job.rail_aligned,
        job.priority >= PriorityClass.REALTIME,
    )


def _host_mask(cap: Capacity, job: JobSpec, labels: tuple[frozenset[tuple[str, str]], ...]) -> BoolArray | None:
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


def _allocation(cap: Capacity, need: Need, picks: list[TaskPick]) -> Allocation:
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


def schedule(request: ScheduleRequest) -> ScheduleResult:
    cfg = request.config
    policy = get_policy(cfg.policy)
    placer = get_placer(cfg.placer)
    snap = request.snapshot
    seen: set[str] = set()
    for job in request.pending:
        if job.job_id in seen:
            raise JobSpecError(f"job {job.job_id} is pending twice in one request", source="schedule request")
        seen.add(job.job_id)
    queue = order(policy, request.pending, request.now_s, snap, cfg)
    cap = Capacity(snap, penalties(snap, cfg.telemetry))
    ix = snap.index
    mix = None
    if placer.uses_mix:
        mem = int(np.median(ix.gpu_memory_mib[ix.gpu_exists])) if ix.gpu_exists.any() else 0
        mix = workload_mix(queue, mem, ix.max_gpus)
    ctx = CycleContext(ix, np.arange(ix.n_hosts, dtype=np.int64), cfg.max_domains_tried, mix)
    masks: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], BoolArray | None] = {}
    refusals: dict[_Shape, tuple[ReasonCode, str]] = {}
    placements: list[Allocation] = []
    waiting: list[Waiting] = []
    releases = cap.releases
    for pos, job in enumerate(queue):
        if len(placements) >= cfg.max_placements_per_cycle:
            msg = f"not considered: this cycle placed its limit of {cfg.max_placements_per_cycle} jobs first"
            waiting.extend(Waiting(j.job_id, ReasonCode.CYCLE_LIMIT, msg) for j in queue[pos:])
            break
        if cap.releases != releases:
            refusals.clear()
            releases = cap.releases
        shape = _shape(job)
        refusal = refusals.get(shape)
        if refusal is None:
            key = (job.gpu_models, job.node_selector)
            if key not in masks:
                masks[key] = _host_mask(cap, job, snap.host_labels)
            need = make_need(job, cap, masks[key])
            picks: list[TaskPick] | None = None
            if need.share or need.total <= cap.total_free_whole():
                mark = cap.mark()
                picks = placer.place(cap, need, ctx)
                if picks is None:
                    cap.undo(mark)  # a placer must leave nothing behind; this makes sure
            if picks is not None:
                placements.append(_allocation(cap, need, picks))
                continue
            refusal = diagnose(cap, need)
            refusals[shape] = refusal
        waiting.append(Waiting(job.job_id, refusal[0], refusal[1]))
        if cfg.strict:
            msg = f"waits behind {job.job_id}, which does not fit (strict ordering)"
            waiting.extend(Waiting(j.job_id, ReasonCode.BLOCKED, msg) for j in queue[pos + 1 :])
            break
    return ScheduleResult(tuple(placements), (), tuple(waiting), snap.version)
