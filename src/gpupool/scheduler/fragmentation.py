"""Fragmentation-aware choice in the spirit of FGD (Weng et al., ATC'23).

A host's fragmentation for a request type is the free GPU capacity that type cannot use there: GPUs
with less free than one task needs (or, for multi-GPU tasks, everything but whole GPUs, and everything
when too few whole GPUs remain). Weighting types by their share of the queue gives the expected
fragmentation; the placer takes the GPU (or host) whose use grows it least.

Beyond FGD: a GPU's free capacity is the tighter of compute and memory (FGD counts compute only), ties
go to the tightest fit and then to healthy GPUs, and the mix is this cycle's queue rather than a
historical trace. The candidate set is bounded (all hosts with a partly used GPU that fits, plus the
``CANDIDATE_HOSTS`` fullest hosts with whole GPUs free) so one pick stays cheap on large fabrics.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpupool.domain.jobs import MILLI_PER_GPU, JobSpec
from gpupool.scheduler.capacity import Capacity
from gpupool.scheduler.placement import Need, share_candidates

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

CANDIDATE_HOSTS = 256
MAX_TYPES = 16


@dataclass(frozen=True, slots=True)
class WorkloadMix:
    milli: IntArray  # per request type: effective milli-GPU each GPU of a task needs (1000 for whole GPUs)
    gpus: IntArray  # per request type: GPUs per task
    weight: FloatArray  # popularity; sums to 1


def workload_mix(pending: Sequence[JobSpec], gpu_memory_mib: int, max_gpus: int) -> WorkloadMix | None:
    """The request types of single-host tasks in the queue, weighted by task count (top ``MAX_TYPES``)."""
    counts: Counter[tuple[int, int]] = Counter()
    for job in pending:
        if job.share is not None:
            mem_milli = -(-job.share.memory_mib * MILLI_PER_GPU // max(gpu_memory_mib, 1))
            counts[(max(job.share.milli_gpu, mem_milli, 1), 1)] += job.tasks
        elif job.gpus_per_task <= max_gpus:
            counts[(MILLI_PER_GPU, job.gpus_per_task)] += job.tasks
    if not counts:
        return None
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_TYPES]
    total = float(sum(c for _, c in top))
    return WorkloadMix(
        milli=np.array([t[0][0] for t in top], dtype=np.int64),
        gpus=np.array([t[0][1] for t in top], dtype=np.int64),
        weight=np.array([c / total for _, c in top], dtype=np.float64),
    )


def effective_free(cap: Capacity, hosts: IntArray) -> IntArray:
    """Per GPU of ``hosts``: free capacity in milli-GPU, the tighter of compute and memory."""
    full = cap.full_mem[hosts]
    mem_milli = np.where(full > 0, cap.free_mem[hosts] * MILLI_PER_GPU // np.maximum(full, 1), 0)
    return np.minimum(cap.free_milli[hosts], mem_milli)


def expected_fragmentation(eff: IntArray, mix: WorkloadMix) -> FloatArray:
    """Expected fragmentation (milli-GPU) of each row of per-GPU free capacity ``eff`` (rows, GPUs)."""
    full = eff >= MILLI_PER_GPU
    n_full = full.sum(axis=-1)
    total = eff.sum(axis=-1)
    not_full = (eff * ~full).sum(axis=-1)
    small = (eff[..., None] * (eff[..., None] < mix.milli)).sum(axis=-2)  # (rows, types)
    multi = np.where(n_full[..., None] >= mix.gpus, not_full[..., None], total[..., None])
    per_type = np.where(mix.gpus == 1, small, multi)
    return np.asarray(per_type @ mix.weight, dtype=np.float64)


def _bounded(cap: Capacity, ok: npt.NDArray[np.bool_]) -> IntArray:
    cand = np.flatnonzero(ok)
    if cand.size > CANDIDATE_HOSTS:
        key = cap.free_whole[cand] * (cap.index.n_hosts + 1) + cand
        cand = np.sort(cand[np.argpartition(key, CANDIDATE_HOSTS)[:CANDIDATE_HOSTS]])
    return cand


def frag_pick_share(cap: Capacity, need: Need, mix: WorkloadMix) -> tuple[int, int] | None:
    ok_whole = cap.free_whole >= 1
    if need.cpu:
        ok_whole &= cap.cpu_free >= need.cpu
    if need.mem:
        ok_whole &= cap.mem_free >= need.mem
    if need.mask is not None:
        ok_whole &= need.mask
    hosts = np.union1d(share_candidates(cap, need)[: 4 * CANDIDATE_HOSTS], _bounded(cap, ok_whole))
    if hosts.size == 0:
        return None
    fm, fg = cap.free_milli[hosts], cap.free_mem[hosts]
    feasible = cap.usable[hosts] & (fm >= need.share_milli) & (fg >= need.share_mem)
    if not feasible.any():
        return None
    eff = effective_free(cap, hosts)
    before = expected_fragmentation(eff, mix)
    full = cap.full_mem[hosts]
    after_one = np.minimum(
        fm - need.share_milli, np.where(full > 0, (fg - need.share_mem) * MILLI_PER_GPU // np.maximum(full, 1), 0)
    )
    G = cap.G
    trial = np.repeat(eff[None, :, :], G, axis=0)  # (gpu tried, hosts, GPUs)
    j = np.arange(G)
    trial[j, :, j] = np.maximum(after_one.T, 0)
    delta = expected_fragmentation(trial, mix) - before[None, :]  # (gpu tried, hosts)
    d = delta.T  # (hosts, GPUs)
    r, c = np.nonzero(feasible)
    h = hosts[r]
    keys = (c, h, cap.penalties.gpu[h, c], after_one[r, c], np.round(d[r, c], 6), cap.penalties.host_band[h])
    i = int(np.lexsort(keys)[0])
    return int(h[i]), int(c[i])


def frag_pick_host(cap: Capacity, need: Need, n: int, mix: WorkloadMix) -> int | None:
    ok = cap.free_whole >= n
    if need.cpu:
        ok &= cap.cpu_free >= need.cpu * need.tasks
    if need.mem:
        ok &= cap.mem_free >= need.mem * need.tasks
    if need.mask is not None:
        ok &= need.mask
    hosts = _bounded(cap, ok)
    if hosts.size == 0:
        return None
    eff = effective_free(cap, hosts)
    before = expected_fragmentation(eff, mix)
    full = eff >= MILLI_PER_GPU
    taken = full & (np.cumsum(full, axis=1) <= n)
    after = expected_fragmentation(np.where(taken, 0, eff), mix)
    keys = (
        hosts,
        cap.penalties.host[hosts],
        cap.free_whole[hosts],
        np.round(after - before, 6),
        cap.penalties.host_band[hosts],
    )
    return int(hosts[np.lexsort(keys)[0]])
