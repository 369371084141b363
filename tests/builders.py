"""Small builders for tests: a fabric by hand, in a few lines."""

from __future__ import annotations

from gpupool.fabric import Fabric, Gpu, Hca, Host, Link, Port, Switch


def make_fabric(leaf_hosts: dict[str, list[str]], spines: dict[str, list[str]] | None = None, gpus: int = 8) -> Fabric:
    """Single-homed hosts under named leaves, leaves under named spines (one NDR link each)."""
    switches = [Switch(guid=f"{i + 1:016x}", name=n, ports=64) for i, n in enumerate([*leaf_hosts, *(spines or {})])]
    guid = {s.name: s.guid for s in switches}
    hcas: list[Hca] = []
    hosts: list[Host] = []
    links: list[Link] = []
    port: dict[str, int] = {}

    def next_port(g: str) -> int:
        port[g] = port.get(g, 0) + 1
        return port[g]

    for leaf, names in leaf_hosts.items():
        for name in names:
            hg = f"{0xCA000000 + len(hcas):016x}"
            hcas.append(Hca(guid=hg, name="mlx5_0", description=f"{name} mlx5_0", rate_gbps=400.0, host=name))
            hosts.append(
                Host(
                    name, tuple(Gpu(i, "NVIDIA H100 80GB HBM3", 81559) for i in range(gpus)), (hg,), nvlink_gbps=3600.0
                )
            )
            links.append(Link(Port(hg, 1), Port(guid[leaf], next_port(guid[leaf]))))
    for spine, leaves in (spines or {}).items():
        for leaf in leaves:
            links.append(Link(Port(guid[leaf], next_port(guid[leaf])), Port(guid[spine], next_port(guid[spine]))))
    return Fabric(switches=switches, hcas=hcas, hosts=hosts, links=links, name="test")
