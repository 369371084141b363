"""Value types of the fabric: switches, HCAs, GPUs, hosts, ports and links.

All frozen and slotted. Identity in the link graph is a node GUID (16 lowercase hex digits) for switches
and HCAs; hosts are identified by name and list their HCAs by GUID.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from gpupool.fabric.rates import link_gbps


class Tier(IntEnum):
    """Switch tiers, derived from structure: leaves carry HCAs, spines sit above leaves, cores above spines."""

    LEAF = 1
    SPINE = 2
    CORE = 3


class Domain(IntEnum):
    """Nested placement domains, smallest first. A set of hosts lies in exactly one smallest domain."""

    NVLINK = 0  # one NVLink island: inside one host, or a multi-node NVLink domain (GB200 NVL72)
    HOST = 1
    LEAF = 2  # hosts that share a leaf switch (in a rail-optimised SU: the same rail leaf for every rail)
    SU = 3  # a scalable unit: leaves that share one host set
    SPINE_GROUP = 4  # hosts joined through leaves and spines without crossing the core
    CORE = 5  # the whole connected fabric


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    model: str
    memory_mib: int
    nvlink_island: int = 0  # GPUs of one host with the same island id talk over NVLink/NVSwitch
    numa_node: int = -1  # -1: unknown, as for Hca (the kernel prints -1 for a device without NUMA affinity)
    uuid: str = ""
    pci_bus_id: str = ""
    mig_mode: bool = False


@dataclass(frozen=True, slots=True)
class Hca:
    guid: str
    name: str = ""  # device name as the host knows it (``mlx5_5``) or as the fabric labels it (``HCA-6``)
    description: str = ""  # node description as ``ibnetdiscover`` prints it
    lid: int = 0
    rate_gbps: float = 0.0
    host: str | None = None  # None: the HCA could not be attributed to a host
    link_layer: str = "InfiniBand"
    numa_node: int = -1
    system_guid: str = ""  # the node's system image GUID; HCAs of one machine may share it ("" unknown)
    found_by: str = ""  # how ``host`` was found (``attribution.METHODS``); "" when declared (generated, Slurm)
    unattributed_reason: str = ""  # why ``host`` is None, in words; "" for an attributed HCA


@dataclass(frozen=True, slots=True)
class Switch:
    guid: str
    name: str
    ports: int
    model: str = ""
    lid: int = 0
    tier: Tier = Tier.LEAF  # overwritten by derivation; never trusted from input


@dataclass(frozen=True, slots=True)
class Port:
    node: str  # GUID of a switch or an HCA
    port: int


@dataclass(frozen=True, slots=True)
class Link:
    a: Port
    b: Port
    width: int = 4
    speed: str = "NDR"

    @property
    def gbps(self) -> float:
        return link_gbps(self.width, self.speed)


@dataclass(frozen=True, slots=True)
class Host:
    name: str
    gpus: tuple[Gpu, ...] = ()
    hcas: tuple[str, ...] = ()  # GUIDs of the host's HCAs in device order
    cpu_millicores: int = 0
    memory_mib: int = 0
    nvlink_domain: str = ""  # multi-node NVLink domain; "" when NVLink stays inside the host
    nvlink_gbps: float = 0.0  # per-GPU NVLink bandwidth inside an island; 0 for PCIe-only servers
    gpu_hca: tuple[int, ...] = ()  # GPU i -> position in ``hcas`` of its closest HCA; () -> by rail order

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)
