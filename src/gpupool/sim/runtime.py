"""Runtime model: how much slower a job runs when its placement crosses a slower tier than its best one.

A trace's duration is the runtime at the best placement. A step is compute plus communication; the
communication share ``c`` (at the best placement) scales with the bandwidth of the slowest tier the job's
hosts span: ``factor = (1 - c) + c * bw(best tier) / bw(actual tier)``. A job's best tier is the smallest
that could hold it on an empty cluster of the same hosts (its own host when it fits in one).

Default bandwidths (per GPU, collective bus bandwidth, GB/s), with sources:
- inside a host over NVLink: 450 GB/s (nccl-tests all_reduce busbw on a DGX H100: ~370-480 GB/s, NVIDIA's
  DGX H100 and NCCL 2.18+ NVLS figures);
- through one leaf: 47 GB/s per NDR 400G NIC (nccl-tests multi-node busbw ~46-48 GB/s per NIC, i.e. ~94% of
  400 Gb/s), times NICs per GPU (1 on a rail-optimised DGX, 1/8 on a one-NIC server), scaled by the NIC rate;
- through spines and the core: the leaf figure divided by the fabric's oversubscription of the tiers crossed.
Communication shares per job class (defaults, configurable): training 0.10, batch 0.05, inference 0.0
(replicas do not all-reduce); a single-GPU or fractional job never communicates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from gpupool.fabric.fabric import Fabric

NVLINK_BUSBW_GBS = 450.0
NDR_NIC_BUSBW_GBS = 47.0
NDR_NIC_GBPS = 400.0
DEFAULT_COMM_SHARE: Mapping[str, float] = MappingProxyType({"training": 0.10, "batch": 0.05, "inference": 0.0})


@dataclass(frozen=True, slots=True)
class RuntimeModel:
    nvlink_gbs: float = NVLINK_BUSBW_GBS
    nic_gbs: float = NDR_NIC_BUSBW_GBS  # per NDR 400G NIC; other NIC rates scale linearly
    comm_share: Mapping[str, float] = field(default_factory=lambda: DEFAULT_COMM_SHARE)

    def share(self, kind: str) -> float:
        return self.comm_share.get(kind, self.comm_share.get("training", 0.0))


class TierBandwidth:
    """Per-fabric precomputation: per host, the per-GPU bandwidth of each tier (0 host .. 3 core)."""

    __slots__ = ("_bw", "_fabric", "_gpus_per_host", "model")

    def __init__(self, fabric: Fabric, model: RuntimeModel) -> None:
        self._fabric = fabric
        self.model = model
        n = len(fabric.hosts)
        gpus = np.array([max(h.gpu_count, 1) for h in fabric.hosts], dtype=np.float64)
        nics = np.array([max(len(h.hcas), 0) for h in fabric.hosts], dtype=np.float64)
        nic = model.nic_gbs * np.minimum(1.0, nics / gpus) * fabric.host_nic_gbps / NDR_NIC_GBPS
        intra = np.where(fabric.host_intra_gbps > 0, model.nvlink_gbs, nic)  # PCIe-only: no faster than the NIC
        bw = np.zeros((4, n), dtype=np.float64)
        bw[0] = intra
        bw[1] = nic
        bw[2] = nic / np.maximum(fabric.host_spine_factor, 1.0)
        bw[3] = nic / np.maximum(fabric.host_core_factor, 1.0)
        self._bw = bw
        self._gpus_per_host = int(gpus.max()) if n else 1

    def tier(self, hosts: list[int]) -> int:
        """The highest tier a set of hosts spans: 0 one host, 1 one leaf, 2 spines, 3 the core."""
        if len(hosts) <= 1:
            return 0
        tiers = self._fabric.lowest_common_tier_many([hosts[0]] * (len(hosts) - 1), hosts[1:])
        return min(int(tiers.max()), 3)

    def best_tier(self, gpus: int) -> int:
        """The smallest tier a job of ``gpus`` GPUs could sit in on an empty cluster (host or leaf)."""
        return 0 if gpus <= self._gpus_per_host else 1

    def factor(self, kind: str, gpus: int, hosts: list[int]) -> float:
        """How many times slower than at its best placement a job of ``gpus`` whole GPUs runs on ``hosts``."""
        c = self.model.share(kind)
        if c <= 0 or gpus <= 1:
            return 1.0
        actual = self.tier(hosts)
        best = self.best_tier(gpus)
        if actual <= best:
            return 1.0
        bw_actual = float(self._bw[actual, hosts].min())
        bw_best = float(self._bw[best, hosts].max())
        if bw_actual <= 0:
            return 1.0 + c * 100.0  # an unreachable pair should not happen; keep the run finite
        return (1.0 - c) + c * max(1.0, bw_best / bw_actual)
