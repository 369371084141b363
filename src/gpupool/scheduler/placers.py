"""Placers: where a job goes. One interface, one registry.

A placer takes the cycle's capacity and a job's ``Need`` and either takes the capacity for every task
and returns the picks, or leaves the capacity as it found it and returns None. It never raises for
"does not fit".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import islice
from types import MappingProxyType
from typing import Protocol

import numpy as np
import numpy.typing as npt

from gpupool.cluster.index import FabricIndex
from gpupool.domain.errors import UnknownNameError
from gpupool.domain.jobs import MILLI_PER_GPU, Scope
from gpupool.fabric.model import Domain
from gpupool.scheduler.capacity import Capacity
from gpupool.scheduler.fragmentation import WorkloadMix, frag_pick_host, frag_pick_share
from gpupool.scheduler.placement import (
    HostOrder,
    Need,
    TaskPick,
    aligned_gang,
    commit,
    cover,
    lexmin,
    lexorder,
    pick_gpus,
    share_candidates,
    share_gpu_on,
    whole_host_for,
)

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class CycleContext:
    """Per-cycle facts placers share: bounds, the fabric index's handy levels, the queue's request mix."""

    index: FabricIndex
    all_hosts: IntArray
    max_domains_tried: int
    mix: WorkloadMix | None
    # Position of the leaf level: the finest multi-host level every fabric has (asked per placement).
    first_level: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "first_level", next(i for i, lv in enumerate(self.index.levels) if lv.domain == Domain.LEAF)
        )


class Placer(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def uses_mix(self) -> bool:
        """True: the cycle computes the queue's request mix for this placer."""
        ...

    def place(self, cap: Capacity, need: Need, ctx: CycleContext) -> list[TaskPick] | None: ...


# ------------------------------------------------------------------ shared paths


def _within_scope(cap: Capacity, need: Need, picks: list[TaskPick]) -> bool:
    if not need.required:
        return True
    hosts = np.array(sorted({h for h, _ in picks}), dtype=np.int64)
    if need.job.topology.scope is Scope.NVLINK:
        if hosts.size == 1:
            islands = {int(cap.index.gpu_island[int(hosts[0]), g]) for _, gs in picks for g in gs}
            return len(islands) == 1
        return any(
            bool(np.all(cap.index.levels[i].ids[hosts] == cap.index.levels[i].ids[hosts[0]])) for i in need.scope_levels
        )
    top = cap.index.levels[need.scope_levels[-1]].ids[hosts] if need.scope_levels else hosts[:1]
    return bool(np.all(top == top[0]))


def place_shares(
    cap: Capacity, need: Need, how: HostOrder, ctx: CycleContext, frag: bool = False
) -> list[TaskPick] | None:
    """Each task takes a share of one GPU: a partly used GPU first (except when spreading), else a whole one."""
    mark = cap.mark()
    picks: list[TaskPick] = []
    whole_how = HostOrder.TIGHT if how is HostOrder.COVER else how
    for _ in range(need.tasks):
        hg: tuple[int, int] | None = None
        if frag and ctx.mix is not None:
            hg = frag_pick_share(cap, need, ctx.mix)
        else:
            if how is not HostOrder.LOOSE:
                hg = share_gpu_on(cap, need, share_candidates(cap, need), how)
            if hg is None:
                h = whole_host_for(cap, need, 1, whole_how, need.cpu, need.mem)
                if h is not None:
                    hg = (h, pick_gpus(cap, h, 1, how)[0])
            if hg is None and how is HostOrder.LOOSE:
                hg = share_gpu_on(cap, need, share_candidates(cap, need), how)
        if hg is None:
            cap.undo(mark)
            return None
        cap.take(hg[0], [hg[1]], need.share_milli, need.share_mem, need.cpu, need.mem)
        picks.append((hg[0], (hg[1],)))
    if not _within_scope(cap, need, picks):
        cap.undo(mark)
        return None
    return picks


def _nvlink_only(cap: Capacity, need: Need) -> bool:
    """A required-NVLink job on a fabric without multi-host NVLink domains must stay on one host."""
    return need.required and need.job.topology.scope is Scope.NVLINK and not need.scope_levels


# ------------------------------------------------------------------ baselines


@dataclass(frozen=True, slots=True)
class _Baseline:
    """First-fit, best-fit and spread: no topology beyond what a job requires; exact per-host scans."""

    name: str
    how: HostOrder
    uses_mix: bool = False

    def place(self, cap: Capacity, need: Need, ctx: CycleContext) -> list[TaskPick] | None:
        if need.share:
            return place_shares(cap, need, self.how, ctx)
        if _nvlink_only(cap, need):
            h = whole_host_for(cap, need, need.total, self.how, need.cpu * need.tasks, need.mem * need.tasks)
            return None if h is None else commit(cap, need, [(h, need.tasks)], self.how)
        core = len(cap.index.levels) - 1
        plan = list(need.scope_levels[-1:]) if need.scope_levels else []
        if not need.required:
            plan.append(core)
        tph_all = cap.tasks_per_host(ctx.all_hosts, need.gpus, need.cpu, need.mem, need.mask)
        for li in plan:
            lv = cap.index.levels[li]
            per_dom = np.bincount(lv.ids, weights=tph_all, minlength=lv.count)
            fit = np.flatnonzero(per_dom >= need.tasks)
            if fit.size == 0:
                continue
            if self.how is HostOrder.TIGHT:
                d = int(fit[np.argmin(per_dom[fit])])
            elif self.how is HostOrder.LOOSE:
                d = int(fit[np.argmax(per_dom[fit])])
            else:
                d = int(fit[0])
            hosts = lv.hosts(d)
            picks = cover(cap, hosts, tph_all[hosts], need.tasks, self.how, need.realtime)
            if picks and need.job.rail_aligned and len(picks) > 1:
                # Rail alignment is the job's requirement, not a preference: every placer honours it.
                aligned = aligned_gang(cap, need, hosts)
                if aligned is not None:
                    return aligned
                continue
            if picks:
                return commit(cap, need, picks, self.how)
        return None


# ------------------------------------------------------------------ topology


@dataclass(frozen=True, slots=True)
class TopologyPlacer:
    """Smallest domain that fits; best fit among equal domains; rail-aligned gangs; telemetry-aware.

    One host if the job fits one (the host with the fewest free GPUs that suffice, in the fullest leaf);
    otherwise the smallest level (NVLink domain, leaf, SU, spine group, core) with a domain that can hold
    the gang, choosing the domain it fills best so emptier domains stay whole for bigger jobs. Aggregates
    pick the domain; only that domain's hosts are scanned.
    """

    name: str = "topology"
    uses_mix: bool = False

    def place(self, cap: Capacity, need: Need, ctx: CycleContext) -> list[TaskPick] | None:
        if need.share:
            return place_shares(cap, need, HostOrder.COVER, ctx)
        return place_topology(cap, need, ctx)


def place_topology(cap: Capacity, need: Need, ctx: CycleContext) -> list[TaskPick] | None:
    n = need.total
    if n <= cap.G:
        h = single_host(cap, need, n, ctx)
        if h is not None:
            return commit(cap, need, [(h, need.tasks)], HostOrder.COVER)
    if _nvlink_only(cap, need) or need.tasks == 1:
        return None
    # Exact per-host task counts, computed at most once: levels that fail leave the capacity unchanged.
    tph: list[IntArray] = []
    for li in need.levels:
        picks = _in_level(cap, need, li, ctx, tph)
        if picks is not None:
            return picks
    return None


def single_host(cap: Capacity, need: Need, n: int, ctx: CycleContext) -> int | None:
    """The best-fit host for ``n`` GPUs, found through the per-leaf histograms when the job has no host
    constraints; an exact scan over every host otherwise (or when the histograms' hosts lack CPU)."""
    cpu, mem = need.cpu * need.tasks, need.mem * need.tasks
    if not np.count_nonzero(cap.kcount[n:]):  # no host has n whole GPUs free (count_nonzero: C, no wrapper)
        return None
    pen = cap.penalties
    if need.mask is None and not (need.realtime and pen.any):
        li = ctx.first_level
        lv = cap.index.levels[li]
        hist, free = cap.hist[li], cap.free_sum[li]
        nvlink = need.required and need.job.topology.scope is Scope.NVLINK and n > 1
        for k in range(n, cap.G + 1):
            if cap.kcount[k] == 0:
                continue
            doms = np.flatnonzero(hist[:, k])
            # By band, free GPUs, penalty, then domain id: the ids ascend, so their order is the positions' (the
            # sort's last tie-break), and without penalties the free GPUs alone order the domains.
            keys = (pen.domain[li][doms], free[doms], pen.domain_band[li][doms]) if pen.any else (free[doms],)
            for d in islice(lexorder(doms, keys), ctx.max_domains_tried):
                hs = lv.hosts(int(d))
                hs = hs[cap.free_whole[hs] == k]
                if cpu:
                    hs = hs[cap.cpu_free[hs] >= cpu]
                if mem:
                    hs = hs[cap.mem_free[hs] >= mem]
                if nvlink:
                    hs = hs[cap.index.host_single_island[hs]]
                if hs.size:
                    if pen.any and hs.size > 1:
                        return int(hs[lexmin((hs, pen.host[hs], pen.host_band[hs]))])
                    return int(hs[0])
    return whole_host_for(cap, need, n, HostOrder.COVER, cpu, mem)


def _in_level(cap: Capacity, need: Need, li: int, ctx: CycleContext, tph: list[IntArray]) -> list[TaskPick] | None:
    if need.mask is None:
        # The histograms count GPUs only: an upper bound when tasks also need CPU and memory. Try the
        # domains it suggests; only if none holds the gang, count exactly (O(hosts)).
        picks = _in_level_by(cap, need, li, ctx, None)
        if picks is not None or not (need.cpu or need.mem):
            return picks
    if not tph:
        tph.append(cap.tasks_per_host(ctx.all_hosts, need.gpus, need.cpu, need.mem, need.mask))
    return _in_level_by(cap, need, li, ctx, tph[0])


def _in_level_by(
    cap: Capacity, need: Need, li: int, ctx: CycleContext, tph_all: IntArray | None
) -> list[TaskPick] | None:
    """``tph_all``: exact task counts per host; None counts from the histograms (GPUs only)."""
    lv = cap.index.levels[li]
    T, g = need.tasks, need.gpus
    if tph_all is None:
        per_dom = cap.hist[li] @ (np.arange(cap.G + 1, dtype=np.int64) // g)
    else:
        per_dom = np.bincount(lv.ids, weights=tph_all, minlength=lv.count).astype(np.int64)
    fit = np.flatnonzero(per_dom >= T)
    if fit.size == 0:
        return None
    pen = cap.penalties
    if fit.size > 1:
        fit = fit[np.lexsort((fit, pen.domain[li][fit], per_dom[fit], pen.domain_band[li][fit]))]
    for d in fit[: ctx.max_domains_tried]:
        hosts = lv.hosts(int(d))
        picks = aligned_gang(cap, need, hosts)
        if picks is not None:
            return picks
        if need.job.rail_aligned:
            continue
        tph = cap.tasks_per_host(hosts, g, need.cpu, need.mem, need.mask)
        hv = cover(cap, hosts, tph, T, HostOrder.COVER, need.realtime)
        if hv:
            return commit(cap, need, hv, HostOrder.COVER)
    return None


# ------------------------------------------------------------------ fragmentation-aware


@dataclass(frozen=True, slots=True)
class FragPlacer:
    """FGD-style for shares and single-host requests: the GPU (or host) whose use least grows the
    fragmentation expected for this cycle's request mix; gangs over several hosts go the topology way."""

    name: str = "frag"
    uses_mix: bool = True

    def place(self, cap: Capacity, need: Need, ctx: CycleContext) -> list[TaskPick] | None:
        if need.share:
            return place_shares(cap, need, HostOrder.COVER, ctx, frag=True)
        n = need.total
        if n <= cap.G and ctx.mix is not None:
            h = frag_pick_host(cap, need, n, ctx.mix)
            if h is not None:
                return commit(cap, need, [(h, need.tasks)], HostOrder.COVER)
            if need.tasks == 1 or _nvlink_only(cap, need):
                return None
        return place_topology(cap, need, ctx)


PLACERS: Mapping[str, Placer] = MappingProxyType(
    {
        p.name: p
        for p in (
            _Baseline("first-fit", HostOrder.FIRST),
            _Baseline("best-fit", HostOrder.TIGHT),
            _Baseline("spread", HostOrder.LOOSE),
            TopologyPlacer(),
            FragPlacer(),
        )
    }
)


def get_placer(name: str) -> Placer:
    """The one place a placer is chosen by its name."""
    try:
        return PLACERS[name]
    except KeyError:
        raise UnknownNameError(f"unknown placer {name!r}; known: {', '.join(sorted(PLACERS))}") from None


__all__ = ["MILLI_PER_GPU", "PLACERS", "CycleContext", "Placer", "get_placer"]
