"""The fabric the server schedules on: the stored one when an operator imported it, else one built from agents.

Without an imported fabric the server still knows each registered node's GPUs and HCAs (from the agent's
inventory); it puts every HCA under one synthetic leaf, so placement works and topology scopes degrade to
"one leaf". HCA names stay the agent's (``mlx5_0``), so ``NCCL_IB_HCA`` is still right.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Gpu, Hca, Host, Link, Port, Switch
from gpupool.schemas.agent import RegisterRequest
from gpupool.store.server_ops import AgentRecord

LEAF_GUID = "5a00000000000001"


def _guid(host: str, hca: str) -> str:
    return "ca" + hashlib.sha256(f"{host}/{hca}".encode()).hexdigest()[:14]


def synthetic_fabric(agents: Sequence[AgentRecord]) -> Fabric | None:
    """One leaf holding every registered node's HCAs; None when no agent has registered yet."""
    if not agents:
        return None
    hcas: list[Hca] = []
    hosts: list[Host] = []
    links: list[Link] = []
    for a in agents:
        inv = RegisterRequest.model_validate(a.inventory)
        guids = []
        # A node without reported HCAs still needs one link to sit in the fabric; its stand-in has no name,
        # so NCCL is never told to open it.
        for h in inv.hcas or ():
            guids.append(_guid(a.host, h.name))
            hcas.append(Hca(guids[-1], h.name, f"{a.host} {h.name}", rate_gbps=h.rate_gbps, host=a.host))
        if not guids:
            guids.append(_guid(a.host, ""))
            hcas.append(Hca(guids[-1], "", f"{a.host}", rate_gbps=0.0, host=a.host))
        for g in guids:
            links.append(Link(Port(g, 1), Port(LEAF_GUID, len(links) + 1)))
        gpus = tuple(
            Gpu(g.index, g.model, g.memory_mib, nvlink_island=g.nvlink_island, numa_node=g.numa_node, uuid=g.uuid)
            for g in sorted(inv.gpus, key=lambda g: g.index)
        )
        hosts.append(Host(a.host, gpus, tuple(guids), cpu_millicores=inv.cpu_millicores, memory_mib=inv.memory_mib))
    leaf = Switch(LEAF_GUID, "gpupool-leaf", max(64, len(links)))
    return Fabric(switches=[leaf], hcas=hcas, hosts=hosts, links=links, name="gpupool-registered")


def pick_fabric(stored: Fabric | None, agents: Sequence[AgentRecord]) -> Fabric | None:
    return stored if stored is not None else synthetic_fabric(agents)
