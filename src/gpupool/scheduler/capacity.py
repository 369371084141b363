"""One cycle's mutable capacity: small copies of the snapshot's arrays plus per-domain aggregates.

Placements inside a cycle go through ``take`` so that later jobs see them; ``mark``/``undo`` roll back a
tentative gang (or, in issue 4, a tentative preemption). Aggregates are kept per multi-host level: for each
domain, how many hosts have exactly k whole GPUs free (``hist``) and the total free (``free_sum``). A
placement touches a handful of hosts and updates O(levels) counters per host, so choosing a domain costs
O(domains), never O(hosts).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpupool.cluster.index import FabricIndex
from gpupool.cluster.snapshot import NODE_UP, ClusterSnapshot
from gpupool.domain.events import HealthGrade
from gpupool.domain.jobs import MILLI_PER_GPU, TopologyRequirement
from gpupool.scheduler.telemetry import Penalties

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# (host, free milli row, free memory row, free CPU, free memory) as they were before a take
_JournalEntry = tuple[int, IntArray, IntArray, int, int]


def _usable(snapshot: ClusterSnapshot) -> tuple[BoolArray, BoolArray, IntArray, IntArray]:
    """Hosts up, usable GPUs, their full memory and how many each host has: fixed while node states and grades
    are, so remembered in the snapshot's memo (read-only: every cycle of the memo shares them)."""
    got = snapshot.memo.get("capacity.usable")
    if isinstance(got, tuple):
        return got
    ix = snapshot.index
    up: BoolArray = snapshot.node_state == NODE_UP
    usable: BoolArray = ix.gpu_exists & (snapshot.gpu_grade < int(HealthGrade.BAD)) & up[:, None]
    full_mem: IntArray = np.where(usable, ix.gpu_memory_mib, 0)
    per_host: IntArray = usable.sum(axis=1)
    for a in (up, usable, full_mem, per_host):
        a.setflags(write=False)
    out = (up, usable, full_mem, per_host)
    snapshot.memo.put("capacity.usable", out)
    return out


class Capacity:
    """Free capacity during one cycle. Owned by one ``schedule`` call; never shared."""

    __slots__ = (
        "G",
        "_hist_flat",
        "_journal",
        "_level_ids",
        "cpu_free",
        "free_mem",
        "free_milli",
        "free_sum",
        "free_total",
        "free_whole",
        "full_mem",
        "hist",
        "index",
        "kcount",
        "mem_free",
        "need_levels",
        "part_mem",
        "part_milli",
        "penalties",
        "releases",
        "usable",
        "usable_gpus",
        "whole",
    )

    def __init__(self, snapshot: ClusterSnapshot, penalties: Penalties) -> None:
        ix: FabricIndex = snapshot.index
        self.index = ix
        self.G = ix.max_gpus
        up, usable, full_mem, usable_gpus = _usable(snapshot)
        self.usable: BoolArray = usable
        self.usable_gpus: IntArray = usable_gpus  # per host
        self.full_mem: IntArray = full_mem
        self.free_milli: IntArray = np.where(usable, MILLI_PER_GPU - snapshot.gpu_used_milli, 0)
        self.free_mem: IntArray = np.where(usable, ix.gpu_memory_mib - snapshot.gpu_used_memory_mib, 0)
        self.whole: BoolArray = usable & (snapshot.gpu_used_milli == 0) & (snapshot.gpu_used_memory_mib == 0)
        self.free_whole: IntArray = self.whole.sum(axis=1).astype(np.int64)
        self.cpu_free: IntArray = np.where(up, ix.host_cpu_millicores - snapshot.host_cpu_used, 0)
        self.mem_free: IntArray = np.where(up, ix.host_memory_mib - snapshot.host_memory_used, 0)
        partial = usable & ~self.whole
        self.part_milli: IntArray = np.where(partial, self.free_milli, -1).max(axis=1, initial=-1)
        self.part_mem: IntArray = np.where(partial, self.free_mem, -1).max(axis=1, initial=-1)
        width = self.G + 1
        self._level_ids = [lv.ids for lv in ix.levels]
        self.hist: list[IntArray] = []
        self.free_sum: list[IntArray] = []
        for lv in ix.levels:
            flat = np.bincount(lv.ids * width + self.free_whole, minlength=lv.count * width)
            self.hist.append(flat.reshape(lv.count, width).astype(np.int64))
            self.free_sum.append(np.bincount(lv.ids, weights=self.free_whole, minlength=lv.count).astype(np.int64))
        self._hist_flat = [hist.reshape(-1) for hist in self.hist]  # views: the same counts, one index each
        self.kcount: IntArray = np.bincount(self.free_whole, minlength=width).astype(np.int64)
        self.free_total = int(self.free_whole.sum())  # whole free GPUs in all: asked before every placement try
        self.penalties = penalties
        self.need_levels: dict[TopologyRequirement, tuple[tuple[int, ...], tuple[int, ...]]] = {}  # placement._levels
        self._journal: list[_JournalEntry] = []
        self.releases = 0  # to bump when capacity grows inside a cycle (preemption), so cached refusals drop

    # ---------------------------------------------------------------- changes

    def take(self, h: int, gpus: list[int], milli: int, gpu_memory_mib: int, cpu: int, memory_mib: int) -> None:
        """Give ``milli`` and ``gpu_memory_mib`` of each listed GPU (whole GPUs: 1000 and 0) and CPU/memory.
        (Called once per task placed: a host's row is read as a list and written element by element, which
        for a handful of GPUs costs a fraction of NumPy's fancy indexing.)"""
        fm, fg = self.free_milli[h], self.free_mem[h]
        self._journal.append((h, fm.copy(), fg.copy(), int(self.cpu_free[h]), int(self.mem_free[h])))
        self.cpu_free[h] -= cpu
        self.mem_free[h] -= memory_mib
        if milli >= MILLI_PER_GPU and gpu_memory_mib == 0:
            row = self.whole[h]
            bits = row.tolist()
            if all(bits[g] for g in gpus):
                # Whole GPUs that were whole: the row's counts change by len(gpus); no row scan needed.
                for g in gpus:
                    fm[g] = 0
                    fg[g] = 0
                    row[g] = False
                if self.part_milli[h] < 0:
                    self.part_milli[h] = 0
                if self.part_mem[h] < 0:
                    self.part_mem[h] = 0
                self._recount(h, int(self.free_whole[h]) - len(gpus))
                return
        fm[gpus] -= milli
        fg[gpus] -= gpu_memory_mib
        self._refresh(h)

    def give(self, h: int, gpus: list[int], milli: int, gpu_memory_mib: int, cpu: int, memory_mib: int) -> None:
        """The inverse of ``take``: a tentative release (preemption or backfill), journalled so ``undo`` can
        roll it back. Whole GPUs come back with all their memory; GPUs that are unusable (host down, GPU
        bad) stay unusable."""
        gpus = [g for g in gpus if self.usable[h, g]]
        if not gpus:
            return
        self._journal.append(
            (h, self.free_milli[h].copy(), self.free_mem[h].copy(), int(self.cpu_free[h]), int(self.mem_free[h]))
        )
        self.cpu_free[h] += cpu
        self.mem_free[h] += memory_mib
        whole = milli >= MILLI_PER_GPU and gpu_memory_mib == 0
        self.free_milli[h, gpus] += MILLI_PER_GPU if whole else milli
        self.free_mem[h, gpus] += self.full_mem[h, gpus] if whole else gpu_memory_mib
        self._refresh(h)

    def mark(self) -> int:
        return len(self._journal)

    def undo(self, mark: int) -> None:
        """Roll back every take since ``mark``, newest first."""
        journal = self._journal
        while len(journal) > mark:
            h, milli, mem, cpu, memory = journal.pop()
            self.free_milli[h] = milli
            self.free_mem[h] = mem
            self.cpu_free[h] = cpu
            self.mem_free[h] = memory
            self._refresh(h)

    def _refresh(self, h: int) -> None:
        usable = self.usable[h]
        milli = self.free_milli[h]
        mem = self.free_mem[h]
        whole = usable & (milli == MILLI_PER_GPU) & (mem == self.full_mem[h])
        self.whole[h] = whole
        k_new = int(whole.sum())
        partial = usable & ~whole
        if partial.any():
            self.part_milli[h] = int(milli[partial].max())
            self.part_mem[h] = int(mem[partial].max())
        else:
            self.part_milli[h] = -1
            self.part_mem[h] = -1
        self._recount(h, k_new)

    def _recount(self, h: int, k_new: int) -> None:
        k_old = int(self.free_whole[h])
        if k_new == k_old:
            return
        self.free_whole[h] = k_new
        self.kcount[k_old] -= 1
        self.kcount[k_new] += 1
        delta = k_new - k_old
        self.free_total += delta
        width = self.G + 1
        for ids, flat, free in zip(self._level_ids, self._hist_flat, self.free_sum, strict=True):
            d = int(ids[h])
            at = d * width
            flat[at + k_old] -= 1  # hist[d, k_old], through the flat view: one index, not a tuple
            flat[at + k_new] += 1
            free[d] += delta

    # ---------------------------------------------------------------- queries

    def total_free_whole(self) -> int:
        return self.free_total

    def tasks_per_host(self, hosts: IntArray, gpus: int, cpu: int, memory_mib: int, mask: BoolArray | None) -> IntArray:
        """How many tasks of ``gpus`` whole GPUs (with CPU and memory) each listed host can take now."""
        t = self.free_whole[hosts] // gpus
        if cpu:
            t = np.minimum(t, self.cpu_free[hosts] // cpu)
        if memory_mib:
            t = np.minimum(t, self.mem_free[hosts] // memory_mib)
        if mask is not None:
            t = np.where(mask[hosts], t, 0)
        return t
