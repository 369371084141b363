"""Victim search: the fewest whole jobs whose removal lets a preemptor fit.

Candidates are ordered by cost (priority, then GPU-seconds of work lost since their last checkpoint, then
id). Removals are tried on the cycle's capacity arrays (``Capacity.give``) and always undone: the search
decides, it never leaves capacity behind. First, per domain the preemptor could live in (a host for a job
that fits one host, else a domain of the smallest level that can hold it), the cheapest candidates in that
domain are removed until the placer finds room; then victims that turned out not to be needed are put back.
The best domain's set wins (fewest victims, lowest top priority, least work lost); a search over the whole
cluster is the fallback. Gangs are never split: a victim is a whole job and gives back every task.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpupool.cluster.snapshot import RunningJob
from gpupool.domain.jobs import MILLI_PER_GPU
from gpupool.scheduler.capacity import Capacity
from gpupool.scheduler.placement import Need
from gpupool.scheduler.placers import CycleContext, Placer
from gpupool.scheduler.types import ReasonCode


@dataclass(frozen=True, slots=True)
class Candidate:
    running: RunningJob
    reason: ReasonCode
    hosts: tuple[int, ...]
    # (priority, work lost in GPU-seconds, id); for ATTAINED_SERVICE (-service rank, ...): the job ranked
    # last (the highest LAS queue, the lowest Gittins index) goes first, as Tiresias demotes it first.
    cost: tuple[float, float, str]


def candidate(
    running: RunningJob, reason: ReasonCode, cap: Capacity, now_s: float, rank: float | None = None
) -> Candidate:
    """``rank``: the first cost term; None: the victim's priority."""
    hosts = tuple(dict.fromkeys(cap.index.host_index(t.host) for t in running.allocation.tasks))
    lost = running.work_lost_s(now_s) * running.gpu_milli / MILLI_PER_GPU
    first = float(running.spec.priority) if rank is None else rank
    return Candidate(running, reason, hosts, (first, lost, running.spec.job_id))


def give(cap: Capacity, r: RunningJob) -> None:
    """Give back everything ``r`` holds (tentatively: the caller undoes it to a mark)."""
    ix = cap.index
    for t in r.allocation.tasks:
        cap.give(ix.host_index(t.host), list(t.gpus), t.milli_gpu, t.gpu_memory_mib, t.cpu_millicores, t.memory_mib)


def _take_back(cap: Capacity, c: Candidate) -> None:
    ix = cap.index
    for t in c.running.allocation.tasks:
        h = ix.host_index(t.host)
        gpus = [g for g in t.gpus if cap.usable[h, g]]
        if gpus:
            cap.take(h, gpus, t.milli_gpu, t.gpu_memory_mib, t.cpu_millicores, t.memory_mib)


def _fits(cap: Capacity, need: Need, placer: Placer, ctx: CycleContext) -> bool:
    mark = cap.mark()
    picks = placer.place(cap, need, ctx)
    cap.undo(mark)
    return picks is not None


def _search(
    cap: Capacity, need: Need, placer: Placer, ctx: CycleContext, cands: Sequence[Candidate], limit: int
) -> list[Candidate] | None:
    mark = cap.mark()
    chosen: list[Candidate] = []
    found = False
    for c in cands:
        if len(chosen) >= limit:
            break
        give(cap, c.running)
        chosen.append(c)
        if (need.share or cap.total_free_whole() >= need.total) and _fits(cap, need, placer, ctx):
            found = True
            break
    if not found:
        cap.undo(mark)
        return None
    # Put back, most expensive first, every victim the preemptor can do without.
    for c in sorted(chosen, key=lambda c: c.cost, reverse=True):
        if len(chosen) == 1:
            break
        m = cap.mark()
        _take_back(cap, c)
        if _fits(cap, need, placer, ctx):
            chosen.remove(c)
        else:
            cap.undo(m)
    cap.undo(mark)
    return chosen


def _score(victims: list[Candidate]) -> tuple[int, float, float]:
    return (len(victims), max(v.cost[0] for v in victims), sum(v.cost[1] for v in victims))


def find_victims(
    cap: Capacity, need: Need, placer: Placer, ctx: CycleContext, cands: Sequence[Candidate], limit: int
) -> list[Candidate] | None:
    """The victims to preempt so that ``need`` fits, or None. Capacity is left exactly as it was."""
    if not cands:
        return None
    ordered = sorted(cands, key=lambda c: c.cost)
    ix = cap.index
    if need.share or need.total <= cap.G:
        dom_of = np.arange(ix.n_hosts, dtype=np.int64)
        dom_free = cap.free_whole.astype(np.int64)
    else:
        li = need.levels[0] if need.levels else len(ix.levels) - 1
        dom_of = ix.levels[li].ids
        dom_free = cap.free_sum[li]
    groups: dict[int, list[Candidate]] = {}
    for c in ordered:
        doms = {int(dom_of[h]) for h in c.hosts}
        for d in doms:
            groups.setdefault(d, []).append(c)
    best: list[Candidate] | None = None

    def potential(d: int) -> int:
        return int(dom_free[d]) + sum(sum(len(t.gpus) for t in c.running.allocation.tasks) for c in groups[d][:limit])

    viable = [d for d in groups if need.share or potential(d) >= need.total]
    viable.sort(key=lambda d: (_score(groups[d][:1]), d))
    for d in viable[: ctx.max_domains_tried]:
        got = _search(cap, need, placer, ctx, groups[d], limit)
        if got is not None and (best is None or _score(got) < _score(best)):
            best = got
    if best is None:
        best = _search(cap, need, placer, ctx, ordered, limit)
    return best
