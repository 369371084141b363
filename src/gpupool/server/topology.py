"""The fabric the server schedules on: the stored one when an operator imported it, else one built from agents.

Without an imported fabric the server still knows each registered node's GPUs and HCAs (from the agent's
inventory); it puts every InfiniBand HCA under one synthetic leaf, so placement works and topology scopes
degrade to "one leaf". HCA names stay the agent's (``mlx5_0``), so ``NCCL_IB_HCA`` is still right. An Ethernet
adapter (a RoCE bond, ``mlx5_bond_0`` with link layer Ethernet) is not an HCA of the InfiniBand fabric: it is
left out, as ``fabric merge`` and the sysfs parser leave it out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Gpu, Hca, Host, Link, Port, Switch
from gpupool.schemas.agent import HcaInfo, RegisterRequest

LEAF_GUID = "5a00000000000001"
LEAF_NAME = "gpupool-leaf"


def _guid(host: str, hca: str) -> str:
    return "ca" + hashlib.sha256(f"{host}/{hca}".encode()).hexdigest()[:14]


def fabric_hcas(inventory: RegisterRequest) -> list[HcaInfo]:
    """The InfiniBand HCAs of an inventory, one per device (an agent lists each port; the first one stands)."""
    out: dict[str, HcaInfo] = {}
    for h in inventory.hcas:
        if h.link_layer.lower() == "infiniband" and h.name not in out:
            out[h.name] = h
    return list(out.values())


def synthetic_leaves(inventory: RegisterRequest) -> dict[str, str]:
    """Device name -> its leaf in the synthetic fabric (the one leaf), for the HCAs ``synthetic_fabric`` keeps."""
    return {h.name: LEAF_NAME for h in fabric_hcas(inventory)}


def synthetic_fabric(inventories: Sequence[RegisterRequest]) -> Fabric | None:
    """One leaf holding every registered node's InfiniBand HCAs; None when no agent has registered yet."""
    if not inventories:
        return None
    hcas: list[Hca] = []
    hosts: list[Host] = []
    links: list[Link] = []
    for inv in inventories:
        guids = []
        # A node without InfiniBand HCAs still needs one link to sit in the fabric; its stand-in has no name,
        # so NCCL is never told to open it.
        for h in fabric_hcas(inv):
            guids.append(_guid(inv.host, h.name))
            hcas.append(Hca(guids[-1], h.name, f"{inv.host} {h.name}", rate_gbps=h.rate_gbps, host=inv.host))
        if not guids:
            guids.append(_guid(inv.host, ""))
            hcas.append(Hca(guids[-1], "", f"{inv.host}", rate_gbps=0.0, host=inv.host))
        for g in guids:
            links.append(Link(Port(g, 1), Port(LEAF_GUID, len(links) + 1)))
        gpus = tuple(
            Gpu(g.index, g.model, g.memory_mib, nvlink_island=g.nvlink_island, numa_node=g.numa_node, uuid=g.uuid)
            for g in sorted(inv.gpus, key=lambda g: g.index)
        )
        hosts.append(Host(inv.host, gpus, tuple(guids), cpu_millicores=inv.cpu_millicores, memory_mib=inv.memory_mib))
    leaf = Switch(LEAF_GUID, LEAF_NAME, max(64, len(links)))
    return Fabric(switches=[leaf], hcas=hcas, hosts=hosts, links=links, name="gpupool-registered")
