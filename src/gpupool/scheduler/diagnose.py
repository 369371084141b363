"""Why a job does not fit: a reason code and one sentence, computed only for jobs left waiting."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpupool.domain.jobs import Scope
from gpupool.fabric.model import Domain
from gpupool.scheduler.capacity import Capacity
from gpupool.scheduler.placement import Need
from gpupool.scheduler.types import ReasonCode

_SCOPE_WORDS = {Scope.NVLINK: "one NVLink island", Scope.LEAF: "one leaf", Scope.SU: "one scalable unit"}
_LEVEL_WORDS = {Domain.NVLINK: "NVLink domain", Domain.LEAF: "leaf", Domain.SU: "scalable unit"}


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def diagnose(cap: Capacity, need: Need) -> tuple[ReasonCode, str]:
    """Why ``need`` does not fit the capacity as it is: ``never_fits``' answer, ``out_of_service``'s, or what
    capacity lacks."""
    return never_fits(cap, need) or out_of_service(cap, need) or _lacks(cap, need)


def out_of_service(cap: Capacity, need: Need) -> tuple[ReasonCode, str] | None:
    """UNSCHEDULABLE when ``need`` fits the fabric but not the GPUs in service (hosts up, GPUs not bad) even
    were they all free: waiting for capacity would be a lie, it waits for hosts to come back. Else None."""
    ix = cap.index
    masked = need.mask is not None
    where = " on matching hosts" if masked else ""
    if need.share:
        usable = cap.usable & need.mask[:, None] if need.mask is not None else cap.usable
        if bool((usable & (ix.gpu_memory_mib >= need.share_mem)).any()):
            return None
        return ReasonCode.UNSCHEDULABLE, (
            f"needs a share of a GPU with {need.share_mem} MiB; no GPU in service{where} has it "
            "(the others are on hosts lost, drained or without an agent, or marked bad)"
        )
    per_host = np.where(need.mask, cap.usable_gpus, 0) if need.mask is not None else cap.usable_gpus
    slots = int((per_host // need.gpus).sum())
    if slots >= need.tasks:
        return None
    in_service = int(per_host.sum())
    fabric = int((np.where(need.mask, ix.host_gpus, 0) if need.mask is not None else ix.host_gpus).sum())
    return ReasonCode.UNSCHEDULABLE, (
        f"needs {need.tasks} task(s) of {_gpus(need.gpus)}; the hosts in service{where} have {_gpus(in_service)}, "
        f"room for {slots} such task(s); {fabric - in_service} more GPU(s) are on hosts lost, drained or without "
        "an agent, or marked bad"
    )


def never_fits(cap: Capacity, need: Need) -> tuple[ReasonCode, str] | None:
    """NO_MATCHING_HOSTS or UNSATISFIABLE when ``need`` can never fit this fabric, even empty; else None.
    Depends on the fabric and the need alone, never on what is free."""
    ix = cap.index
    job = need.job
    # Without a mask every host counts: the arrays themselves, no masked copies (a blocked queue asks often).
    masked = need.mask is not None
    mask = need.mask if need.mask is not None else np.ones(0, dtype=np.bool_)  # only read when masked
    where = " on matching hosts" if masked else ""
    if not (mask.any() if masked else ix.n_hosts > 0):
        what = []
        if job.gpu_models:
            what.append(f"GPU model {' or '.join(job.gpu_models)}")
        if job.node_selector:
            what.append("labels " + ",".join(f"{k}={v}" for k, v in job.node_selector))
        return ReasonCode.NO_MATCHING_HOSTS, f"no host has {' and '.join(what) or 'the requested properties'}"
    cpu_max = ix.host_cpu_millicores[mask].max() if masked else ix.host_cpu_millicores.max()
    mem_max = ix.host_memory_mib[mask].max() if masked else ix.host_memory_mib.max()
    if need.cpu > int(cpu_max) or need.mem > int(mem_max):
        return ReasonCode.UNSATISFIABLE, f"a task needs {need.cpu} millicores and {need.mem} MiB; no host has that much"
    if need.share:
        if need.share_mem > int((ix.gpu_memory_mib[mask] if masked else ix.gpu_memory_mib).max()):
            return ReasonCode.UNSATISFIABLE, f"needs {need.share_mem} MiB of GPU memory; the largest GPU has less"
        return None
    g, total = need.gpus, need.total
    host_gpus = np.where(mask, ix.host_gpus, 0) if masked else ix.host_gpus
    if g > int(host_gpus.max()):
        return (
            ReasonCode.UNSATISFIABLE,
            f"needs {_gpus(g)} per task; the largest host{where} has {int(host_gpus.max())}",
        )
    if total > int(host_gpus.sum()):
        return ReasonCode.UNSATISFIABLE, f"needs {_gpus(total)}; the fabric{where} has {int(host_gpus.sum())}"
    if need.required:
        static = _best_domain(cap, need, host_gpus)
        if static is not None and static[1] < total:
            return ReasonCode.UNSATISFIABLE, (
                f"needs {_gpus(total)} in {_SCOPE_WORDS[job.topology.scope]}; the largest has {static[1]}"
            )
    return None


def _lacks(cap: Capacity, need: Need) -> tuple[ReasonCode, str]:
    """What the free capacity lacks for a ``need`` that could fit the fabric."""
    ix = cap.index
    job = need.job
    masked = need.mask is not None
    mask = need.mask if need.mask is not None else np.ones(0, dtype=np.bool_)  # only read when masked
    where = " on matching hosts" if masked else ""
    if need.share:
        fits = cap.usable & (cap.free_milli >= need.share_milli) & (cap.free_mem >= need.share_mem)
        if masked:
            fits &= mask[:, None]
        n_fit = int(fits.sum())
        desc = f"{need.tasks} x {need.share_milli} milli-GPU/{need.share_mem} MiB"
        if n_fit == 0:
            return ReasonCode.NO_CAPACITY, f"needs {desc}; no GPU{where} has that much free"
        if need.required:
            return ReasonCode.TOPOLOGY, f"needs {desc} in {_SCOPE_WORDS[job.topology.scope]}; no such domain has room"
        return ReasonCode.NO_CAPACITY, f"needs {desc}; only {n_fit} GPU(s) can take one"
    T, g, total = need.tasks, need.gpus, need.total
    free = np.where(mask, cap.free_whole, 0) if masked else cap.free_whole
    n_free = int(free.sum())
    if n_free < total:
        return ReasonCode.NO_CAPACITY, f"needs {_gpus(total)}; {n_free} are free{where}"
    slots = int((free // g).sum())
    if slots < T:
        best = int(free.max())
        return ReasonCode.FRAGMENTED, (
            f"needs {T} task(s) of {_gpus(g)} on one host each; {n_free} GPUs are free{where} "
            f"but hosts have room for {slots} such task(s) (the best host has {best} free)"
        )
    tph = cap.tasks_per_host(np.arange(ix.n_hosts), g, need.cpu, need.mem, need.mask)
    if int(tph.sum()) < T:
        return ReasonCode.CPU_MEMORY, (
            f"needs {T} task(s) of {_gpus(g)}, {need.cpu} millicores and {need.mem} MiB; hosts with the GPUs free "
            f"lack the CPU or memory (room for {int(tph.sum())})"
        )
    if need.required:
        best_free = _best_domain(cap, need, free)
        if best_free is not None:
            word = best_free[0]
            return (
                ReasonCode.TOPOLOGY,
                f"needs {_gpus(total)} under one {word}; the best {word} has {best_free[1]} free",
            )
        host_best = int(np.where(ix.host_single_island, free, 0).max())
        return ReasonCode.TOPOLOGY, f"needs {_gpus(total)} in one NVLink island; the best island has {host_best} free"
    if job.rail_aligned:
        return ReasonCode.RAIL_ALIGNMENT, (
            f"needs {T} task(s) of {_gpus(g)} with the same GPU indices free on every host; no set of hosts has them"
        )
    return (
        ReasonCode.FRAGMENTED,
        f"needs {_gpus(total)}; {n_free} are free{where} but no domain searched could hold the gang",
    )


def _best_domain(cap: Capacity, need: Need, per_host: npt.NDArray[np.int64]) -> tuple[str, int] | None:
    """(level word, most of ``per_host`` in one domain) at the top level of the required scope."""
    if not need.scope_levels:
        return None
    lv = cap.index.levels[need.scope_levels[-1]]
    sums = np.bincount(lv.ids, weights=per_host, minlength=lv.count)
    return _LEVEL_WORDS.get(lv.domain, lv.domain.name.lower()), int(sums.max())
