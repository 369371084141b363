"""Backfill reservations: when could a blocked job start, and on which hosts?

Running jobs are expected to end at their start (or placement) plus their estimate; a job past its estimate is
expected to end now. A running job without an estimate is not counted on to end: a reservation is a promise
made from estimates, and one made from the default runtime's guess held the queue's head back for nothing on
traces without estimates (ITP cluster05, FIFO with EASY: 3.54x the bound against 2.46x without; with no
estimate anywhere, no reservation is made and the queue is served as without backfill). Ends are released in time order on
the cycle's capacity arrays until the placer finds room for the blocked job; the hosts it would take from
that moment are its reservation (a deadline job at risk may count jobs it would preempt as ending now:
``taking.deadline_reservation``). Everything is undone afterwards. A later job may use a reserved host only
if it is expected to end by the reservation's start (EASY keeps one reservation, conservative several).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from gpupool.cluster.snapshot import RunningJob
from gpupool.scheduler.capacity import Capacity
from gpupool.scheduler.placement import Need, TaskPick
from gpupool.scheduler.placers import CycleContext, Placer

FloatArray = npt.NDArray[np.float64]


def expected_end(r: RunningJob, now_s: float, default_runtime_s: float) -> float:
    start = r.started_at_s if r.started_at_s is not None else r.placed_at_s
    est = r.spec.estimated_runtime_s if r.spec.estimated_runtime_s is not None else default_runtime_s
    return max(now_s, start + est)


def reserve(
    cap: Capacity,
    need: Need,
    placer: Placer,
    ctx: CycleContext,
    ends: Sequence[tuple[float, RunningJob]],
    freed: Sequence[RunningJob] = (),
    now_s: float = 0.0,
    until_s: float = np.inf,
) -> tuple[float, list[TaskPick]] | None:
    """(start time, the placer's picks then) of the earliest reservation for ``need``, or None if no end by
    ``until_s`` frees room. ``freed``: jobs to preempt, given back at ``now_s`` before any end (``ends`` must
    not hold them)."""
    ix = cap.index
    mark = cap.mark()
    found: tuple[float, list[TaskPick]] | None = None
    steps: list[tuple[float, Sequence[RunningJob]]] = [(now_s, freed)] if freed else []
    steps += ((end, (r,)) for end, r in ends if r.spec.estimated_runtime_s is not None)
    for end, gone in steps:
        if end > until_s:
            break
        for r in gone:
            for t in r.allocation.tasks:
                h = ix.host_index(t.host)
                cap.give(h, list(t.gpus), t.milli_gpu, t.gpu_memory_mib, t.cpu_millicores, t.memory_mib)
        if not need.share and cap.total_free_whole() < need.total:
            continue
        m = cap.mark()
        picks = placer.place(cap, need, ctx)
        cap.undo(m)
        if picks is not None:
            found = (end, picks)
            break
    cap.undo(mark)
    return found


def allowed_hosts(reserved_from: FloatArray, end_s: float) -> npt.NDArray[np.bool_]:
    """Hosts a job expected to end at ``end_s`` may use without delaying any reservation."""
    out: npt.NDArray[np.bool_] = reserved_from >= end_s
    return out
