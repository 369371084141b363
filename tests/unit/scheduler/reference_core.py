"""The plain cycle as it was before the one cycle (``scheduler/core.py`` up to issue 13), kept as a reference.

The one cycle with ``NO_SHARING`` must place exactly what this placed (``test_one_cycle``). Only the
ordering helper's signature changed (``order(policy, request)``); the loop is as it was.
"""

from __future__ import annotations

import numpy as np

from gpupool.domain.jobs import Allocation
from gpupool.scheduler.capacity import BoolArray, Capacity
from gpupool.scheduler.diagnose import diagnose
from gpupool.scheduler.fragmentation import cycle_mix
from gpupool.scheduler.placement import TaskPick, make_need
from gpupool.scheduler.placers import CycleContext, get_placer
from gpupool.scheduler.policies import get_policy, order
from gpupool.scheduler.shapes import Shape, allocation, host_mask, shape
from gpupool.scheduler.telemetry import penalties
from gpupool.scheduler.types import ReasonCode, ScheduleRequest, ScheduleResult, Waiting


def schedule_plain(request: ScheduleRequest) -> ScheduleResult:
    cfg = request.config
    policy = get_policy(cfg.policy)
    placer = get_placer(cfg.placer)
    snap = request.snapshot
    queue = order(policy, request)
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
                    cap.undo(mark)
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
