"""Per-fabric arrays the cluster state and the scheduler share: built once per fabric, read-only after.

``FabricIndex`` flattens what the hot path reads from the fabric's value objects into NumPy arrays (GPUs
per host, GPU memory, models, NVLink islands, CPU and memory) and describes each multi-host placement
level (NVLink domain, leaf, SU, spine group, core) by dense domain ids and its member hosts, so a domain's
hosts are one slice and per-domain sums are one ``bincount``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Domain, Tier

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

DOMAIN_NAMES = {
    Domain.NVLINK: "NVLink domain",
    Domain.HOST: "host",
    Domain.LEAF: "leaf",
    Domain.SU: "scalable unit",
    Domain.SPINE_GROUP: "spine group",
    Domain.CORE: "fabric",
}


def _frozen(a: npt.NDArray[np.generic]) -> npt.NDArray[np.generic]:
    a.setflags(write=False)
    return a


@dataclass(frozen=True, slots=True)
class Level:
    """One multi-host placement level: every host's dense domain id and the hosts of each domain."""

    domain: Domain
    ids: IntArray  # (hosts,) dense ids 0..count-1
    count: int
    order: IntArray  # host indices grouped by domain, ascending inside each domain
    starts: IntArray  # (count + 1,) domain d's hosts are order[starts[d]:starts[d + 1]]
    same_as_previous: bool  # the same partition as the level below (a rail-optimised SU is one leaf domain)

    def hosts(self, d: int) -> IntArray:
        return self.order[self.starts[d] : self.starts[d + 1]]


def _level(domain: Domain, raw: npt.NDArray[np.int32], previous: Level | None) -> Level:
    _, dense = np.unique(raw, return_inverse=True)
    ids = dense.astype(np.int64).reshape(-1)
    count = int(ids.max()) + 1 if ids.size else 0
    order = np.argsort(ids, kind="stable").astype(np.int64)
    starts = np.searchsorted(ids[order], np.arange(count + 1)).astype(np.int64)
    same = previous is not None and previous.count == count
    return Level(domain, _frozen(ids), count, _frozen(order), _frozen(starts), same)  # type: ignore[arg-type]


class FabricIndex:
    """Read-only arrays derived from one fabric. Build once; share between every state and snapshot."""

    __slots__ = (
        "fabric",
        "gpu_exists",
        "gpu_island",
        "gpu_memory_mib",
        "host_cpu_millicores",
        "host_gpus",
        "host_leaves",
        "host_memory_mib",
        "host_model",
        "host_single_island",
        "leaf_names",
        "levels",
        "max_gpus",
        "model_names",
        "n_hosts",
        "switch_ix",
    )

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        hosts = fabric.hosts
        n = len(hosts)
        g_max = max((len(h.gpus) for h in hosts), default=0)
        self.n_hosts = n
        self.max_gpus = g_max
        exists = np.zeros((n, g_max), dtype=np.bool_)
        mem = np.zeros((n, g_max), dtype=np.int64)
        island = np.full((n, g_max), -1, dtype=np.int64)
        models: dict[str, int] = {}
        host_model = np.zeros(n, dtype=np.int64)
        for h, host in enumerate(hosts):
            for g, gpu in enumerate(host.gpus):
                exists[h, g] = True
                mem[h, g] = gpu.memory_mib
                island[h, g] = gpu.nvlink_island
            # A host's GPUs are one model in every server we know; the first GPU names it.
            host_model[h] = models.setdefault(host.gpus[0].model, len(models)) if host.gpus else -1
        self.host_gpus: IntArray = _frozen(exists.sum(axis=1).astype(np.int64))  # type: ignore[assignment]
        self.gpu_exists: BoolArray = _frozen(exists)  # type: ignore[assignment]
        self.gpu_memory_mib: IntArray = _frozen(mem)  # type: ignore[assignment]
        self.gpu_island: IntArray = _frozen(island)  # type: ignore[assignment]
        self.host_single_island: BoolArray = _frozen(  # type: ignore[assignment]
            np.array([len({g.nvlink_island for g in h.gpus}) <= 1 for h in hosts], dtype=np.bool_)
        )
        self.host_model: IntArray = _frozen(host_model)  # type: ignore[assignment]
        self.model_names: tuple[str, ...] = tuple(models)
        self.host_cpu_millicores: IntArray = _frozen(  # type: ignore[assignment]
            np.array([h.cpu_millicores for h in hosts], dtype=np.int64)
        )
        self.host_memory_mib: IntArray = _frozen(  # type: ignore[assignment]
            np.array([h.memory_mib for h in hosts], dtype=np.int64)
        )
        levels: list[Level] = []
        nvl = fabric.domain_ids(Domain.NVLINK).astype(np.int64)
        shared_nvl = nvl < n  # ids >= n mark a host that is its own island; -1 one with several islands
        if n and bool(np.any(shared_nvl & (nvl >= 0))):
            raw = np.where(shared_nvl & (nvl >= 0), nvl, n + np.arange(n))
            levels.append(_level(Domain.NVLINK, raw.astype(np.int32), None))
        for dom in (Domain.LEAF, Domain.SU, Domain.SPINE_GROUP, Domain.CORE):
            levels.append(_level(dom, fabric.domain_ids(dom), levels[-1] if levels and dom != Domain.LEAF else None))
        self.levels: tuple[Level, ...] = tuple(levels)
        leaves = [s for s, sw in enumerate(fabric.switches) if sw.tier == Tier.LEAF]
        width = max((len(x) for x in fabric.host_leaves), default=0)
        hl = np.full((n, max(width, 1)), -1, dtype=np.int64)
        for h, ls in enumerate(fabric.host_leaves):
            hl[h, : len(ls)] = ls
        self.host_leaves: IntArray = _frozen(hl)  # type: ignore[assignment]
        self.leaf_names: tuple[str, ...] = tuple(fabric.switches[s].name for s in leaves)
        self.switch_ix: dict[str, int] = {sw.name: s for s, sw in enumerate(fabric.switches)}

    def level(self, domain: Domain) -> Level | None:
        for lv in self.levels:
            if lv.domain == domain:
                return lv
        return None

    def host_index(self, name: str) -> int:
        return self.fabric.host_index(name)

    def host_name(self, h: int) -> str:
        return self.fabric.hosts[h].name
