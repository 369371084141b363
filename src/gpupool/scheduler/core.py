"""``schedule(request) -> result``: the pure decision the server and the simulator both call.

One cycle: order the pending jobs by the policy, copy the snapshot's capacity, then place jobs in order
until ``max_placements_per_cycle`` placements (or, with ``strict``, the first job that does not fit).
Refusals are remembered per job shape for the rest of the cycle: capacity only shrinks inside a cycle,
so a shape that did not fit still does not, and a queue of 20,000 blocked jobs costs a dict lookup each.
"""

from __future__ import annotations

import numpy as np

from gpupool.domain.errors import JobSpecError
from gpupool.domain.jobs import Allocation
from gpupool.scheduler.capacity import BoolArray, Capacity
from gpupool.scheduler.diagnose import diagnose
from gpupool.scheduler.fragmentation import cycle_mix
from gpupool.scheduler.placement import TaskPick, make_need
from gpupool.scheduler.placers import CycleContext, get_placer
from gpupool.scheduler.policies import get_policy, order
from gpupool.scheduler.shapes import Shape, allocation, host_mask, shape
from gpupool.scheduler.shared import schedule_shared
from gpupool.scheduler.telemetry import penalties
from gpupool.scheduler.types import ReasonCode, ScheduleRequest, ScheduleResult, Waiting


def schedule(request: ScheduleRequest) -> ScheduleResult:
    """One cycle. With ``request.sharing`` the sharing loop runs (quotas, pools, preemption, backfill,
    deadlines); without it, this loop, unchanged from issue 3."""
    if request.sharing is not None:
        return schedule_shared(request)
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
    mix = cycle_mix(request.workload_mix, queue, ix) if placer.uses_mix else None
    ctx = CycleContext(ix, np.arange(ix.n_hosts, dtype=np.int64), cfg.max_domains_tried, mix)
    masks: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], BoolArray | None] = {}
    refusals: dict[Shape, tuple[ReasonCode, str]] = {}
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
        sh = shape(job)
        refusal = refusals.get(sh)
        if refusal is None:
            key = (job.gpu_models, job.node_selector)
            if key not in masks:
                masks[key] = host_mask(cap, job, snap.host_labels)
            need = make_need(job, cap, masks[key])
            picks: list[TaskPick] | None = None
            if need.share or need.total <= cap.total_free_whole():
                mark = cap.mark()
                picks = placer.place(cap, need, ctx)
                if picks is None:
                    cap.undo(mark)  # a placer must leave nothing behind; this makes sure
            if picks is not None:
                placements.append(allocation(cap, need, picks))
                continue
            refusal = diagnose(cap, need)
            refusals[sh] = refusal
        waiting.append(Waiting(job.job_id, refusal[0], refusal[1]))
        if cfg.strict:
            msg = f"waits behind {job.job_id}, which does not fit (strict ordering)"
            waiting.extend(Waiting(j.job_id, ReasonCode.BLOCKED, msg) for j in queue[pos + 1 :])
            break
    return ScheduleResult(tuple(placements), (), tuple(waiting), snap.version)
