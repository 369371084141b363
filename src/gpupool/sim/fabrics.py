"""Fabrics the simulator builds for itself: a uniform leaf/spine cluster from a GPU count, and one host per
node of a trace that lists its machines (openb), so the same ClusterState and scheduler run on either.

``uniform_fabric(gpus, gpus_per_host)``: ceil(gpus / gpus_per_host) DGX-H100-like hosts (one NDR HCA each),
at most ``HOSTS_PER_LEAF`` hosts per leaf, as few leaves as that allows, ceil(leaves / 2) spines, 1:1
oversubscription. Hosts keep the DGX H100's CPU and memory, so only GPUs constrain a trace without CPU data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpupool.domain.errors import InputError
from gpupool.fabric.fabric import Fabric
from gpupool.fabric.generators import DGX_H100, MAX_GPUS_PER_HOST, MAX_HOSTS, ServerSpec, leaf_spine
from gpupool.fabric.model import Gpu, Hca, Host, Link, Port, Switch
from gpupool.sim.traces.records import TraceNode

HOSTS_PER_LEAF = 32
# GPU memory per openb model in MiB. T4/P100/V100/A10 are public figures; G2 and G3 are Alibaba's undisclosed
# models (32 GiB assumed). The FGD protocol's pods claim no GPU memory, so these only matter for other traces.
GPU_MEMORY_MIB = {
    "T4": 15_360,
    "P100": 16_384,
    "V100M16": 16_384,
    "V100M32": 32_768,
    "A10": 23_028,
    "G2": 32_768,
    "G3": 32_768,
}
DEFAULT_GPU_MEMORY_MIB = 32_768


def uniform_fabric(gpus: int, gpus_per_host: int) -> Fabric:
    """A leaf/spine cluster of at least ``gpus`` GPUs in hosts of ``gpus_per_host`` (shape in the module doc)."""
    if gpus < 1 or gpus_per_host < 1:
        raise InputError(f"--gpus and --gpus-per-host must be >= 1, got {gpus} and {gpus_per_host}", source="cluster")
    hosts = math.ceil(gpus / gpus_per_host)
    if hosts > MAX_HOSTS or gpus_per_host > MAX_GPUS_PER_HOST:
        raise InputError(
            f"{gpus:,} GPUs in hosts of {gpus_per_host} is past what a simulated cluster holds "
            f"({MAX_HOSTS:,} hosts of at most {MAX_GPUS_PER_HOST} GPUs)",
            source="--gpus" if hosts > MAX_HOSTS else "--gpus-per-host",
        )
    leaves = math.ceil(hosts / HOSTS_PER_LEAF)
    per_leaf = math.ceil(hosts / leaves)
    spec = ServerSpec(
        gpus=gpus_per_host,
        gpu_model=DGX_H100.gpu_model,
        gpu_memory_mib=DGX_H100.gpu_memory_mib,
        nvlink_gbps=DGX_H100.nvlink_gbps,
        hcas=1,
    )
    return leaf_spine(leaves, max(1, math.ceil(leaves / 2)), per_leaf, gpus_per_host, spec=spec, name=f"uniform-{gpus}")


def nodes_fabric(nodes: Sequence[TraceNode], name: str = "trace-nodes") -> Fabric:
    """One host per trace node (its GPU count and model, CPU and memory), ``HOSTS_PER_LEAF`` hosts per leaf
    in file order, every leaf linked once to each of ceil(leaves / 2) spines. Topology does not matter to the
    packing protocol; this only gives the nodes a valid fabric."""
    if not nodes:
        raise InputError("the node list is empty", source=name)
    n_leaves = math.ceil(len(nodes) / HOSTS_PER_LEAF)
    n_spines = max(1, math.ceil(n_leaves / 2))
    switches = [
        Switch(guid=f"5a00{s:012x}", name=f"spine-{s + 1:02d}", ports=max(64, n_leaves)) for s in range(n_spines)
    ]
    switches += [Switch(guid=f"5a01{i:012x}", name=f"leaf-{i + 1:03d}", ports=64) for i in range(n_leaves)]
    hcas: list[Hca] = []
    hosts: list[Host] = []
    links: list[Link] = []
    next_port = {s.guid: 1 for s in switches}

    def port(guid: str) -> Port:
        p = next_port[guid]
        next_port[guid] = p + 1
        return Port(guid, p)

    for i, node in enumerate(nodes):
        leaf = switches[n_spines + i // HOSTS_PER_LEAF].guid
        guid = f"ca00{i:012x}"
        hcas.append(Hca(guid=guid, name="mlx5_0", description=f"{node.name} mlx5_0", rate_gbps=400.0, host=node.name))
        model = node.gpu_model or ""
        mem = GPU_MEMORY_MIB.get(model, DEFAULT_GPU_MEMORY_MIB)
        gpus = tuple(Gpu(index=g, model=model, memory_mib=mem, nvlink_island=g) for g in range(node.gpus))
        hosts.append(Host(node.name, gpus, (guid,), cpu_millicores=node.cpu_milli, memory_mib=node.memory_mib))
        links.append(Link(Port(guid, 1), port(leaf)))
    for li in range(n_leaves):
        leaf = switches[n_spines + li].guid
        for s in range(n_spines):
            links.append(Link(port(leaf), port(switches[s].guid)))
    return Fabric(switches=switches, hcas=hcas, hosts=hosts, links=links, name=name)
