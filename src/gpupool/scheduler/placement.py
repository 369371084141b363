"""Building blocks the placers share: what a job needs, host orders, GPU picks, rail-aligned gang search.

Everything works on index arrays of candidate hosts so that a placer touches one domain's hosts, not the
fabric's. A pick is a list of (host, GPU indices) per task; ``commit`` takes it into the capacity.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

import numpy as np
import numpy.typing as npt

from gpupool.domain.jobs import MILLI_PER_GPU, JobSpec, PriorityClass, Scope, TopologyRequirement
from gpupool.fabric.model import Domain
from gpupool.scheduler.capacity import Capacity

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
TaskPick = tuple[int, tuple[int, ...]]

_SCOPE_DOMAIN = {Scope.LEAF: Domain.LEAF, Scope.SU: Domain.SU, Scope.NVLINK: Domain.NVLINK}


def lexmin(keys: tuple[npt.NDArray[np.generic], ...]) -> int:
    """``np.lexsort(keys)[0]`` without the sort: the position whose last key is smallest, ties broken by the key
    before it, and so on, then by the lowest position (lexsort is stable). The keys hold no NaN. A placer
    wants only the best of thousands of candidates; narrowing key by key touches a few of them after the
    first key or two."""
    pos: IntArray | None = None
    for i in range(len(keys) - 1, -1, -1):
        k = keys[i] if pos is None else keys[i][pos]
        if i == 0:  # the last key to break ties: its first minimum (argmin's) is lexsort's first
            j = int(np.argmin(k))
            return j if pos is None else int(pos[j])
        hit = np.flatnonzero(k == k[k.argmin()])  # argmin: a C method (min() goes through Python first)
        pos = hit if pos is None else pos[hit]
        if pos.size == 1:
            break
    assert pos is not None
    return int(pos[0])


def lexorder(items: IntArray, keys: tuple[npt.NDArray[np.generic], ...]) -> Iterator[int]:
    """``items`` in ``np.lexsort(keys)`` order, the first found by ``lexmin``: the rest are sorted only when
    a caller goes on past it (the first domain tried usually holds the job)."""
    if items.size == 0:
        return
    first = lexmin(keys)
    yield int(items[first])
    if items.size > 1:
        yield from (int(items[i]) for i in np.lexsort(keys) if i != first)


class HostOrder(Enum):
    FIRST = "first"  # index order: first fit
    TIGHT = "tight"  # fewest free GPUs first: bin packing
    LOOSE = "loose"  # most free GPUs, coolest first: load balancing
    COVER = "cover"  # fewest hosts, then a best-fit tail; healthy first: topology


@dataclass(frozen=True, slots=True)
class Need:
    """A job's demand in the units placers work in, derived once per job per cycle."""

    job: JobSpec
    tasks: int
    gpus: int  # whole GPUs per task; 1 for a share
    cpu: int
    mem: int
    share_milli: int  # 0 and 0 for whole GPUs
    share_mem: int
    mask: BoolArray | None  # hosts with an allowed model and matching labels; None: every host
    levels: tuple[int, ...]  # positions in ``index.levels`` a multi-host gang may use, smallest first
    scope_levels: tuple[int, ...]  # the preferred or required scope's levels (empty for ``any``)
    required: bool
    realtime: bool

    @property
    def share(self) -> bool:
        return self.share_milli > 0 or self.share_mem > 0

    @property
    def total(self) -> int:
        return self.tasks * self.gpus


def make_need(job: JobSpec, cap: Capacity, mask: BoolArray | None) -> Need:
    levels, scope_levels = _levels(cap, job.topology)
    required = job.topology.required
    share = job.share
    return Need(
        job=job,
        tasks=job.tasks,
        gpus=job.gpus_per_task,
        cpu=job.cpu_millicores,
        mem=job.memory_mib,
        share_milli=share.milli_gpu if share else 0,
        share_mem=share.memory_mib if share else 0,
        mask=mask,
        levels=levels,
        scope_levels=scope_levels,
        required=required,
        realtime=job.priority >= PriorityClass.REALTIME,
    )


def _levels(cap: Capacity, topology: TopologyRequirement) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The levels a gang of ``topology`` may use and its scope's levels (``Need.levels``, ``scope_levels``):
    the index's alone decide them, so they are worked out once per topology in a cycle (``Capacity.need_levels``)."""
    got = cap.need_levels.get(topology)
    if got is not None:
        return got
    ix = cap.index
    all_levels = [i for i, lv in enumerate(ix.levels) if not lv.same_as_previous]
    scope = topology.scope
    scope_levels: list[int] = []
    if scope is Scope.NVLINK:
        scope_levels = [i for i in all_levels if ix.levels[i].domain == Domain.NVLINK]
    elif scope is not Scope.ANY:
        top = _SCOPE_DOMAIN[scope]
        scope_levels = [i for i in all_levels if Domain.LEAF <= ix.levels[i].domain <= top]
    levels = tuple(scope_levels) if topology.required else tuple(all_levels)
    got = cap.need_levels[topology] = (levels, tuple(scope_levels))
    return got


# ------------------------------------------------------------------ host orders


def order_hosts(cap: Capacity, hosts: IntArray, tph: IntArray, how: HostOrder, realtime: bool) -> IntArray:
    """Positions into ``hosts`` of the hosts with room (tph > 0), in the order a placer wants to fill them."""
    pos = np.flatnonzero(tph > 0)
    if pos.size <= 1 or how is HostOrder.FIRST:
        return pos
    h = hosts[pos]
    pen = cap.penalties
    free = cap.free_whole[h]
    if how is HostOrder.TIGHT:
        keys: tuple[npt.NDArray[np.generic], ...] = (h, free)
    elif how is HostOrder.LOOSE:
        keys = (h, pen.host[h], -free)
    else:
        keys = (h, pen.host[h], -tph[pos], pen.host_band[h])
    if realtime and pen.any:
        keys = (*keys, pen.host[h])  # healthiest first, before any packing concern
    return pos[np.lexsort(keys)]


def cover(
    cap: Capacity, hosts: IntArray, tph: IntArray, need_tasks: int, how: HostOrder, realtime: bool
) -> list[tuple[int, int]]:
    """(host, tasks) pairs holding ``need_tasks`` tasks, or [] if the hosts cannot hold them."""
    if int(tph.sum()) < need_tasks:
        return []
    order = order_hosts(cap, hosts, tph, how, realtime)
    t = tph[order]
    cum = np.cumsum(t)
    i = int(np.searchsorted(cum, need_tasks))  # hosts order[:i+1] suffice
    picks = [(int(hosts[order[j]]), int(t[j])) for j in range(i)]
    rest = need_tasks - (int(cum[i - 1]) if i else 0)
    if how is HostOrder.COVER and i + 1 < order.size:
        # Best-fit tail: the last host is the one with the fewest task slots that still holds the rest,
        # so a host with more room stays whole for a bigger job.
        tail = t[i:]
        ok = np.flatnonzero(tail >= rest)
        smallest = int(tail[ok].min())
        j = i + int(ok[tail[ok] == smallest][0])
        picks.append((int(hosts[order[j]]), rest))
    else:
        picks.append((int(hosts[order[i]]), rest))
    return picks


# ------------------------------------------------------------------ GPU picks


def pick_gpus(cap: Capacity, h: int, n: int, how: HostOrder) -> tuple[int, ...]:
    """``n`` whole free GPUs of host ``h``."""
    row = cap.whole[h]
    free = np.flatnonzero(row)
    zero = not cap.penalties.any  # every GPU's penalty is 0: the healthiest are the lowest indices
    if how is HostOrder.FIRST or how is HostOrder.TIGHT or (zero and how is not HostOrder.COVER):
        return tuple(free[:n].tolist())
    if how is HostOrder.LOOSE:
        return tuple(free[np.lexsort((free, cap.penalties.gpu[h, free]))][:n].tolist())
    if n < free.size:
        # Buddy-style: an aligned block of n free GPUs inside the fullest aligned parent block keeps the
        # other half (and whole-host holes) free for bigger tasks; healthy GPUs first. (A host's row as a
        # list: a handful of blocks, each read in Python faster than in NumPy.)
        bits = row.tolist()
        best: tuple[float, int, int] | None = None
        for start in range(0, cap.G - n + 1, n):
            if all(bits[start : start + n]):
                parent = (start // (2 * n)) * 2 * n
                score = (
                    0.0 if zero else float(cap.penalties.gpu[h, start : start + n].sum()),
                    sum(bits[parent : parent + 2 * n]),
                    start,
                )
                if best is None or score < best:
                    best = score
        if best is not None:
            return tuple(range(best[2], best[2] + n))
    if zero:
        return tuple(free[:n].tolist())
    return tuple(free[np.lexsort((free, cap.penalties.gpu[h, free]))][:n].tolist())


def commit(cap: Capacity, need: Need, hosts_tasks: list[tuple[int, int]], how: HostOrder) -> list[TaskPick]:
    picks: list[TaskPick] = []
    g = need.gpus
    for h, k in hosts_tasks:
        gpus = pick_gpus(cap, h, k * g, how)
        cap.take(h, list(gpus), MILLI_PER_GPU, 0, need.cpu * k, need.mem * k)
        picks.extend((h, gpus[i * g : (i + 1) * g]) for i in range(k))
    return picks


def commit_aligned(cap: Capacity, need: Need, hosts: list[int], gpus: tuple[int, ...], per_host: int) -> list[TaskPick]:
    picks: list[TaskPick] = []
    g = need.gpus
    for h in hosts:
        cap.take(h, list(gpus), MILLI_PER_GPU, 0, need.cpu * per_host, need.mem * per_host)
        picks.extend((h, gpus[i * g : (i + 1) * g]) for i in range(per_host))
    return picks


def aligned_gang(cap: Capacity, need: Need, hosts: IntArray) -> list[TaskPick] | None:
    """A gang over several hosts with the same GPU indices on every host (rank i on rail i), or None.

    Every host gets the same number of tasks ``k`` (the largest divisor of the task count that fits a
    host) on the same index set. Candidate sets are aligned blocks first, then any window, then each
    host's own lowest free GPUs; the first set enough hosts share wins, filled fullest-first.
    """
    G = cap.G
    T, g = need.tasks, need.gpus
    whole = cap.whole[hosts]
    bits = np.int64(1) << np.arange(G, dtype=np.int64)
    masks = whole.astype(np.int64) @ bits
    popcount = whole.sum(axis=1)
    for k in range(min(G // g, T), 0, -1):
        if T % k:
            continue
        width = k * g
        n_hosts = T // k
        if n_hosts < 2:
            continue  # a single host is the single-host path's job
        room = np.ones(hosts.size, dtype=np.bool_)
        if need.cpu:
            room &= cap.cpu_free[hosts] >= need.cpu * k
        if need.mem:
            room &= cap.mem_free[hosts] >= need.mem * k
        if need.mask is not None:
            room &= need.mask[hosts]
        room &= popcount >= width
        if int(room.sum()) < n_hosts:
            continue
        block = (1 << width) - 1
        pats = [block << s for s in range(0, G - width + 1, width)]
        pats += [block << s for s in range(G - width + 1) if s % width]
        for m in np.unique(masks[room])[:8]:
            low, mm = 0, int(m)
            for _ in range(width):
                low |= mm & -mm
                mm &= mm - 1
            pats.append(low)
        pat_arr = np.array(list(dict.fromkeys(pats)), dtype=np.int64)
        ok = ((masks[None, :] & pat_arr[:, None]) == pat_arr[:, None]) & room[None, :]
        counts = ok.sum(axis=1)
        fits = np.flatnonzero(counts >= n_hosts)
        if fits.size == 0:
            continue
        p = int(fits[0])
        pos = np.flatnonzero(ok[p])
        pen = cap.penalties
        hs = hosts[pos]
        order = np.lexsort((hs, pen.host[hs], popcount[pos], pen.host_band[hs]))
        if need.realtime and pen.any:
            order = np.lexsort((hs, popcount[pos], pen.host[hs]))
        chosen = [int(x) for x in hs[order[:n_hosts]]]
        pattern = int(pat_arr[p])
        gpus = tuple(i for i in range(G) if pattern >> i & 1)
        return commit_aligned(cap, need, chosen, gpus, k)
    return None


# ------------------------------------------------------------------ shares of one GPU


def share_candidates(cap: Capacity, need: Need) -> IntArray:
    """Hosts with a partly used GPU that can take the share, and room for the task's CPU and memory."""
    # Hosts with a partly used GPU are a few of all: find them first, then test only those (ascending still).
    hosts = np.flatnonzero(cap.part_milli >= need.share_milli)
    ok = cap.part_mem[hosts] >= need.share_mem
    if need.cpu:
        ok &= cap.cpu_free[hosts] >= need.cpu
    if need.mem:
        ok &= cap.mem_free[hosts] >= need.mem
    if need.mask is not None:
        ok &= need.mask[hosts]
    return hosts[ok]


def share_gpu_on(cap: Capacity, need: Need, hosts: IntArray, how: HostOrder) -> tuple[int, int] | None:
    """(host, GPU) among partly used GPUs of ``hosts`` that fit the share, by the placer's order."""
    if hosts.size == 0:
        return None
    fm = cap.free_milli[hosts]
    fg = cap.free_mem[hosts]
    ok = cap.usable[hosts] & ~cap.whole[hosts] & (fm >= need.share_milli) & (fg >= need.share_mem)
    r, c = np.nonzero(ok)
    if r.size == 0:
        return None
    h = hosts[r]
    pen = cap.penalties
    if how is HostOrder.FIRST:
        i = 0
    elif not pen.any:
        # Every penalty is zero: the keys below without the penalty terms (constant keys order nothing).
        i = lexmin((c, h, -fm[r, c])) if how is HostOrder.LOOSE else lexmin((c, h, fg[r, c], fm[r, c]))
    elif how is HostOrder.LOOSE:
        i = lexmin((c, h, pen.gpu[h, c], -fm[r, c]))
    else:
        # Best fit: the GPU left with the least free compute (then memory) after the share.
        keys: tuple[npt.NDArray[np.generic], ...] = (c, h, pen.gpu[h, c], fg[r, c], fm[r, c], pen.host_band[h])
        if need.realtime:
            keys = (*keys, pen.gpu[h, c])
        i = lexmin(keys)
    return int(h[i]), int(c[i])


def hosts_that_fit(cap: Capacity, need: Need, n: int, cpu: int, mem: int) -> IntArray:
    """Every host with ``n`` whole free GPUs, ``cpu`` and ``mem`` free, allowed by the job's mask, and one
    NVLink island when the job requires NVLink for more than one GPU."""
    ok = cap.free_whole >= n
    if cpu:
        ok &= cap.cpu_free >= cpu
    if mem:
        ok &= cap.mem_free >= mem
    if need.mask is not None:
        ok &= need.mask
    if need.required and need.job.topology.scope is Scope.NVLINK and n > 1:
        ok &= cap.index.host_single_island
    return np.flatnonzero(ok)


def whole_host_for(cap: Capacity, need: Need, n: int, how: HostOrder, cpu: int, mem: int) -> int | None:
    """One host with ``n`` whole free GPUs and the CPU/memory, by exact scan over every host."""
    cand = hosts_that_fit(cap, need, n, cpu, mem)
    if cand.size == 0:
        return None
    if how is HostOrder.FIRST:
        return int(cand[0])
    pen = cap.penalties
    free = cap.free_whole[cand]
    if not pen.any and how is not HostOrder.LOOSE:
        # Every penalty is zero: the sort below reduces to the fewest free GPUs, then the lowest index,
        # which argmin gives (its first minimum) without sorting thousands of candidates.
        return int(cand[int(np.argmin(free))])
    if how is HostOrder.LOOSE:
        keys: tuple[npt.NDArray[np.generic], ...] = (cand, pen.host[cand], -free)
    elif how is HostOrder.TIGHT:
        keys = (cand, free)
    else:
        keys = (cand, pen.host[cand], free, pen.host_band[cand])
    if need.realtime and pen.any:
        keys = (*keys, pen.host[cand])
    return int(cand[lexmin(keys)])
