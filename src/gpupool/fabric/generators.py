"""Generated fabrics: 2-tier leaf/spine, 3-tier k-ary fat-tree, and NVIDIA DGX H100 SuperPOD scalable units.

Names and GUIDs are deterministic, so two generations with the same arguments are equal.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpupool.domain.errors import FabricError
from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Gpu, Hca, Host, Link, Port, Switch


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """What one generated server holds. The default is a DGX H100."""

    gpus: int = 8
    gpu_model: str = "NVIDIA H100 80GB HBM3"
    gpu_memory_mib: int = 81559  # what nvidia-smi reports as FB memory total on an H100 80GB HBM3
    nvlink_gbps: float = 3600.0  # NVLink 4: 18 links x 25 GB/s per direction = 450 GB/s = 3,600 Gb/s per GPU
    hcas: int = 8
    cpu_millicores: int = 224_000  # 2 x 56-core Xeon 8480C with hyper-threading
    memory_mib: int = 2_097_152  # 2 TiB
    numa_nodes: int = 2

    @staticmethod
    def pcie(gpus: int = 8, gpu_model: str = "NVIDIA L40S", gpu_memory_mib: int = 46068, hcas: int = 4) -> ServerSpec:
        """A PCIe-only server: no NVLink, every GPU its own island, one NIC per two GPUs."""
        return ServerSpec(gpus=gpus, gpu_model=gpu_model, gpu_memory_mib=gpu_memory_mib, nvlink_gbps=0.0, hcas=hcas)


DGX_H100 = ServerSpec()
QM9700_PORTS = 64
QM9700_MODEL = "MQM9700"
SUPERPOD_NODES_PER_SU = 32
SUPERPOD_SPINES = {1: 4, 2: 8, 3: 16, 4: 16}  # NVIDIA DGX SuperPOD (H100) RA, compute fabric component table


# What a generated fabric may hold: a bound on what a request can make this process build (a fabric of
# 100,000 SUs would take hours and gigabytes, silently). 32,768 hosts (a quarter of a million GPUs) is larger
# than any cluster built so far and takes about 30 s; 64 GPUs per host is more than any server carries.
MAX_HOSTS = 32_768
MAX_GPUS_PER_HOST = 64


def check_size(hosts: int, gpus_per_host: int, what: str) -> None:
    """Refuse a fabric past ``MAX_HOSTS`` hosts or ``MAX_GPUS_PER_HOST`` GPUs per host, before building it."""
    if hosts > MAX_HOSTS:
        raise FabricError(f"{what} would have {hosts:,} hosts; a generated fabric has at most {MAX_HOSTS:,}")
    if not 0 <= gpus_per_host <= MAX_GPUS_PER_HOST:
        raise FabricError(f"{what}: {gpus_per_host} GPUs per host; a server has 0 to {MAX_GPUS_PER_HOST}")


def _single_homed(spec: ServerSpec | None, gpus: int) -> ServerSpec:
    """The server of a single-homed fabric: the given model (a DGX H100 by default) with one HCA."""
    return replace(spec or DGX_H100, gpus=gpus, hcas=1)


class _Builder:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.switches: list[Switch] = []
        self.hcas: list[Hca] = []
        self.hosts: list[Host] = []
        self.links: list[Link] = []
        self._next_port: dict[str, int] = {}
        self._serial = 0

    def _guid(self, kind: int) -> str:
        self._serial += 1
        return f"{kind:04x}{self._serial:012x}"

    def switch(self, name: str, ports: int = QM9700_PORTS, model: str = QM9700_MODEL) -> str:
        guid = self._guid(0x5A00)
        self.switches.append(Switch(guid=guid, name=name, ports=ports, model=model))
        self._next_port[guid] = 1
        return guid

    def port(self, node: str) -> Port:
        p = self._next_port[node]
        self._next_port[node] = p + 1
        return Port(node, p)

    def connect(self, a: str, b: str, speed: str = "NDR") -> None:
        self.links.append(Link(self.port(a), self.port(b), 4, speed))

    def host(self, name: str, spec: ServerSpec, leaves: list[str], speed: str = "NDR") -> None:
        """A server whose HCA i connects to ``leaves[i % len(leaves)]``."""
        guids = []
        for i in range(spec.hcas):
            guid = self._guid(0xCA00)
            guids.append(guid)
            self.hcas.append(
                Hca(
                    guid=guid,
                    name=f"mlx5_{i}",
                    description=f"{name} mlx5_{i}",
                    rate_gbps=4 * {"NDR": 100.0, "HDR": 50.0, "EDR": 25.0}[speed],
                    host=name,
                    numa_node=i * spec.numa_nodes // max(spec.hcas, 1),
                )
            )
            self._next_port[guid] = 1
            self.connect(guid, leaves[i % len(leaves)], speed)
        gpus = tuple(
            Gpu(
                index=g,
                model=spec.gpu_model,
                memory_mib=spec.gpu_memory_mib,
                nvlink_island=0 if spec.nvlink_gbps > 0 else g,
                numa_node=g * spec.numa_nodes // max(spec.gpus, 1),
            )
            for g in range(spec.gpus)
        )
        self.hosts.append(
            Host(
                name=name,
                gpus=gpus,
                hcas=tuple(guids),
                cpu_millicores=spec.cpu_millicores,
                memory_mib=spec.memory_mib,
                nvlink_gbps=spec.nvlink_gbps,
            )
        )

    def build(self, name: str) -> Fabric:
        return Fabric(switches=self.switches, hcas=self.hcas, hosts=self.hosts, links=self.links, name=name)


def superpod(sus: int, spec: ServerSpec = DGX_H100, *, name: str | None = None) -> Fabric:
    """A rail-optimised DGX H100 SuperPOD compute fabric of ``sus`` scalable units.

    Each SU has 32 node slots and 8 rail leaves (QM9700, 32 ports down and 32 up); node slot n's HCA i
    connects to rail leaf i of its SU. One slot of the whole fabric is taken by the UFM appliance, so 1 to 4
    SUs hold 31, 63, 95 and 127 nodes. Spines follow the reference architecture (4, 8, 16, 16), every leaf
    spreading its 32 uplinks evenly over all spines. Beyond 4 SUs (not in NVIDIA's table) the fabric grows
    SuperPOD-style to three tiers: groups of 4 SUs with 32 spines each (32 ports down, 32 up, so 1:1 at every
    tier), every spine's 32 uplinks spread over 16 core switches per group.
    """
    if sus < 1:
        raise FabricError("a SuperPOD has at least one scalable unit")
    check_size(sus * SUPERPOD_NODES_PER_SU - 1, spec.gpus, f"a SuperPOD of {sus:,} scalable units")
    rails = spec.hcas
    b = _Builder("su")
    groups = [list(range(g, min(g + 4, sus))) for g in range(0, sus, 4)]
    node = 0
    total_slots = sus * SUPERPOD_NODES_PER_SU - 1  # the last slot holds the UFM appliance
    group_spines: list[list[str]] = []
    for gi, group in enumerate(groups):
        n_spines = SUPERPOD_SPINES[len(group)] if sus <= 4 else 32
        spines = [
            b.switch(f"spine-{gi + 1:02d}-{s + 1:02d}" if sus > 4 else f"spine-{s + 1:02d}") for s in range(n_spines)
        ]
        group_spines.append(spines)
        for su in group:
            leaves = [b.switch(f"leaf-su{su + 1:02d}-rail{r + 1}") for r in range(rails)]
            for _slot in range(SUPERPOD_NODES_PER_SU):
                if node >= total_slots:
                    break
                node += 1
                b.host(f"dgx{node:03d}" if total_slots < 1000 else f"dgx{node:05d}", spec, leaves)
            uplinks = QM9700_PORTS - SUPERPOD_NODES_PER_SU
            for leaf in leaves:
                for u in range(uplinks):
                    b.connect(leaf, spines[u % len(spines)])
    if len(groups) > 1:
        n_core = 16 * len(groups)
        cores = [b.switch(f"core-{c + 1:03d}") for c in range(n_core)]
        for spines in group_spines:
            for si, spine in enumerate(spines):
                for u in range(32):
                    b.connect(spine, cores[(si * 32 + u) % n_core])
    return b.build(name or f"superpod-{sus}su")


def leaf_spine(
    leaves: int,
    spines: int,
    hosts_per_leaf: int,
    gpus_per_host: int = 8,
    oversubscription: float = 1.0,
    spec: ServerSpec | None = None,
    *,
    name: str | None = None,
) -> Fabric:
    """A 2-tier leaf/spine fabric, one HCA per host; each leaf has ceil(hosts / oversubscription) uplinks
    spread round-robin over the spines (parallel links where there are more uplinks than spines)."""
    if leaves < 1 or spines < 1 or hosts_per_leaf < 1 or oversubscription <= 0:
        raise FabricError("leaves, spines and hosts per leaf must be >= 1 and oversubscription > 0")
    check_size(leaves * hosts_per_leaf, gpus_per_host, f"a leaf/spine of {leaves:,} x {hosts_per_leaf:,} hosts")
    if spines > MAX_HOSTS:
        raise FabricError(f"{spines:,} spines; a generated fabric has at most {MAX_HOSTS:,}")
    spec = _single_homed(spec, gpus_per_host)
    b = _Builder("ls")
    spine_ids = [b.switch(f"spine-{s + 1:02d}", ports=max(64, leaves * 2)) for s in range(spines)]
    uplinks = max(1, -(-hosts_per_leaf * 1000 // round(oversubscription * 1000)))
    node = 0
    width = len(str(leaves * hosts_per_leaf))
    for li in range(leaves):
        leaf = b.switch(f"leaf-{li + 1:02d}", ports=max(64, hosts_per_leaf + uplinks))
        for _ in range(hosts_per_leaf):
            node += 1
            b.host(f"node{node:0{max(width, 3)}d}", spec, [leaf])
        for u in range(uplinks):
            b.connect(leaf, spine_ids[u % spines])
    return b.build(name or f"leaf-spine-{leaves}x{spines}")


def fat_tree(k: int, gpus_per_host: int = 8, spec: ServerSpec | None = None, *, name: str | None = None) -> Fabric:
    """A 3-tier k-ary fat-tree: k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 cores, k^3/4 hosts."""
    if k < 2 or k % 2:
        raise FabricError(f"a k-ary fat-tree needs an even k >= 2, got {k}")
    check_size(k**3 // 4, gpus_per_host, f"a k={k} fat-tree")
    spec = _single_homed(spec, gpus_per_host)
    half = k // 2
    b = _Builder("ft")
    cores = [b.switch(f"core-{c + 1:03d}", ports=k) for c in range(half * half)]
    node = 0
    width = max(3, len(str(k**3 // 4)))
    for pod in range(k):
        aggs = [b.switch(f"agg-p{pod + 1:02d}-{a + 1:02d}", ports=k) for a in range(half)]
        edges = [b.switch(f"edge-p{pod + 1:02d}-{e + 1:02d}", ports=k) for e in range(half)]
        for edge in edges:
            for _ in range(half):
                node += 1
                b.host(f"node{node:0{width}d}", spec, [edge])
            for agg in aggs:
                b.connect(edge, agg)
        for a, agg in enumerate(aggs):
            for c in range(half):
                b.connect(agg, cores[a * half + c])
    return b.build(name or f"fat-tree-k{k}")


def rail_optimised(
    sus: int,
    hosts_per_su: int,
    rails: int,
    spines: int,
    spec: ServerSpec | None = None,
    *,
    speed: str = "NDR",
    name: str | None = None,
) -> Fabric:
    """A rail-optimised leaf/spine of any size: per SU one leaf per rail, host slot n's HCA r on rail leaf r.

    Every leaf has as many uplinks as hosts (1:1), spread round-robin over the spines. ``superpod`` is the
    NVIDIA reference shape of this; this one exists for shapes the reference does not cover (tests, ibsim).
    """
    if min(sus, hosts_per_su, rails, spines) < 1:
        raise FabricError("scalable units, hosts per SU, rails and spines must all be >= 1")
    check_size(sus * hosts_per_su, (spec or DGX_H100).gpus, f"a rail-optimised fabric of {sus} x {hosts_per_su} hosts")
    server = replace(spec or DGX_H100, hcas=rails)
    b = _Builder("ro")
    ports = max(2 * hosts_per_su, spines)
    spine_ids = [b.switch(f"spine-{s + 1:02d}", ports=max(ports, sus * rails)) for s in range(spines)]
    width = max(3, len(str(sus * hosts_per_su)))
    node = 0
    for su in range(sus):
        leaves = [b.switch(f"leaf-su{su + 1:02d}-rail{r + 1}", ports=ports) for r in range(rails)]
        for _ in range(hosts_per_su):
            node += 1
            b.host(f"gpu{node:0{width}d}", server, leaves, speed)
        for leaf in leaves:
            for u in range(hosts_per_su):
                b.connect(leaf, spine_ids[u % spines], speed)
    return b.build(name or f"rail-optimised-{sus}x{hosts_per_su}x{rails}")
