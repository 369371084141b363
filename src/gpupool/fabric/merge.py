"""GPUs into an imported fabric: per-host inventories, or one default server model for every host.

A fabric dump knows HCAs and hosts but no GPUs. ``merge_gpus`` adds them from what each host's tools say,
an inventory directory per host (``read_inventories``)::

    INVENTORY/<host>/nvidia-smi.xml   nvidia-smi -q -x        (or nvidia-smi.txt: nvidia-smi -q)
    INVENTORY/<host>/topo.txt         nvidia-smi topo -m       NVLink islands, NUMA, each GPU's closest NIC
    INVENTORY/<host>/ibstat.txt       ibstat                   device names and GUIDs of the HCAs
    INVENTORY/<host>/infiniband/      a copy of /sys/class/infiniband (or infiniband.txt, a flat dump)

Each file is optional. The host's HCAs in the fabric are matched to the inventory's adapters by node or port
GUID, else by device name; a fabric HCA that had no device name (attributed by a map, its system image GUID
or its port position) takes the inventory's. Ethernet adapters (a RoCE ``mlx5_bond_0``) are never matched:
they are not on the InfiniBand fabric. Each GPU is mapped to its rail HCA by PCI affinity: the NIC that
``topo -m`` shows closest to it (PIX < PXB < PHB < NODE < SYS), among the host's InfiniBand HCAs; without a
matrix, or when a GPU's closest NIC is not one of the host's fabric HCAs, the host keeps rail order.

``GpuDefaults`` (``--gpus-per-host 8 --gpu-model H100``) fills every host without an inventory. An inventory
for a host the fabric does not have, a host whose inventories disagree (``-q -x`` and ``topo -m`` counting
different GPUs), and an adapter GUID that belongs to another host are ``InputError``s naming the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from gpupool.domain.errors import InputError
from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Gpu, Host
from gpupool.fabric.parsers._text import read_tool_output
from gpupool.fabric.parsers.host import gpus_from
from gpupool.fabric.parsers.ibstat import parse_ibstat
from gpupool.fabric.parsers.nvidia_smi import parse_query_text, parse_query_xml, parse_topo_matrix
from gpupool.fabric.parsers.nvidia_smi_topo import TopoMatrix
from gpupool.fabric.parsers.sysfs import parse_sysfs_dump, read_sysfs_infiniband

__all__ = ["KNOWN_GPUS", "Adapter", "GpuDefaults", "Inventory", "MergeResult", "merge_gpus", "read_inventories"]

# Model -> (memory MiB as nvidia-smi reports it, per-GPU NVLink Gb/s; 0 for PCIe-only cards).
KNOWN_GPUS: dict[str, tuple[int, float]] = {
    "A100": (81920, 2400.0),
    "H100": (81559, 3600.0),
    "H200": (143771, 3600.0),
    "B200": (183359, 7200.0),
    "L40S": (46068, 0.0),
}
NVLINK_LINK_GBPS = 200.0  # one NVLink of generations 2-4 (25 GB/s each way)
INVENTORY_FILES = ("nvidia-smi.xml", "nvidia-smi.txt", "topo.txt", "ibstat.txt", "infiniband", "infiniband.txt")
_ETHERNET_NAME = re.compile(r".*_bond_\d+")


@dataclass(frozen=True, slots=True)
class Adapter:
    """One RDMA adapter as the host sees it."""

    name: str  # "mlx5_0"
    node_guid: str = ""  # "" when the capture does not show it
    port_guids: tuple[str, ...] = ()
    infiniband: bool = True
    numa_node: int = -1


@dataclass(frozen=True, slots=True)
class Inventory:
    host: str
    source: str  # the directory (or a description), for messages
    gpus: tuple[Gpu, ...] = ()
    matrix: TopoMatrix | None = None
    adapters: tuple[Adapter, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuDefaults:
    count: int
    model: str
    memory_mib: int
    nvlink_gbps: float = 0.0

    @staticmethod
    def of(count: int, model: str, memory_mib: int | None = None, nvlink_gbps: float | None = None) -> GpuDefaults:
        """Defaults for a model: memory and NVLink from ``KNOWN_GPUS`` unless given; unknown models need memory."""
        known = KNOWN_GPUS.get(model.upper())
        if memory_mib is None and known is None:
            raise InputError(
                f"GPU model {model!r} is not one of {', '.join(KNOWN_GPUS)}; give its memory (--gpu-memory-mib)",
                source="--gpu-model",
            )
        memory = memory_mib if memory_mib is not None else known[0] if known else 0
        nvlink = nvlink_gbps if nvlink_gbps is not None else known[1] if known else 0.0
        return GpuDefaults(count, model, memory, nvlink)

    def gpus(self) -> tuple[Gpu, ...]:
        # NVLink servers: one island; PCIe servers: every GPU its own.
        return tuple(
            Gpu(i, self.model, self.memory_mib, nvlink_island=0 if self.nvlink_gbps else i) for i in range(self.count)
        )


@dataclass(frozen=True, slots=True)
class MergeResult:
    fabric: Fabric
    from_inventory: tuple[str, ...]  # hosts
    from_defaults: tuple[str, ...]
    without_gpus: tuple[str, ...]
    rail_by_affinity: tuple[str, ...]  # hosts whose GPUs map to HCAs by the topo matrix
    warnings: tuple[str, ...]


def _adapters_from_ibstat(text: str, source: str) -> tuple[Adapter, ...]:
    return tuple(
        Adapter(
            ca.name,
            ca.node_guid,
            tuple(p.port_guid for p in ca.ports if p.port_guid),
            infiniband=any(p.infiniband for p in ca.ports),
        )
        for ca in parse_ibstat(text, source=source)
    )


def read_inventory(host: str, directory: Path) -> Inventory:
    """One host's inventory directory (the file names of the module notes; each optional)."""

    def text(name: str) -> str | None:
        p = directory / name
        return read_tool_output(p) if p.is_file() else None

    xml, smi, topo, ibstat, dump = (
        text(n) for n in ("nvidia-smi.xml", "nvidia-smi.txt", "topo.txt", "ibstat.txt", "infiniband.txt")
    )
    report = (
        parse_query_xml(xml, source=str(directory / "nvidia-smi.xml"))
        if xml is not None
        else parse_query_text(smi, source=str(directory / "nvidia-smi.txt"))
        if smi is not None
        else None
    )
    matrix = parse_topo_matrix(topo, source=str(directory / "topo.txt")) if topo is not None else None
    gpus = gpus_from(report, matrix, source=str(directory))
    adapters: tuple[Adapter, ...] = ()
    if ibstat is not None:
        adapters = _adapters_from_ibstat(ibstat, str(directory / "ibstat.txt"))
    elif (directory / "infiniband").is_dir() or dump is not None:
        devices = (
            read_sysfs_infiniband(directory / "infiniband")
            if dump is None
            else parse_sysfs_dump(dump, source=str(directory / "infiniband.txt"))
        )
        adapters = tuple(
            Adapter(
                d.name,
                d.node_guid,
                infiniband=any(p.infiniband for p in d.ports),
                numa_node=d.numa_node if d.numa_node is not None else -1,
            )
            for d in devices
        )
    return Inventory(host, str(directory), gpus, matrix, adapters)


def read_inventories(root: str | Path) -> tuple[Inventory, ...]:
    """Every ``root/<host>/`` directory; a directory holding none of the inventory files is an ``InputError``."""
    base = Path(root)
    if not base.is_dir():
        raise InputError("not a directory of per-host inventories", source=str(base))
    out = []
    for d in sorted(p for p in base.iterdir() if p.is_dir()):
        if not any((d / n).exists() for n in INVENTORY_FILES):
            raise InputError(f"holds none of {', '.join(INVENTORY_FILES)}", source=str(d))
        out.append(read_inventory(d.name, d))
    return tuple(out)


def _match(host: Host, fabric: Fabric, inv: Inventory) -> dict[str, Adapter]:
    """Fabric HCA GUID -> the inventory adapter that is it (InfiniBand adapters only)."""
    ib = [a for a in inv.adapters if a.infiniband and not _ETHERNET_NAME.fullmatch(a.name)]
    by_guid = {g: a for a in ib for g in (a.node_guid, *a.port_guids) if g}
    by_name = {a.name: a for a in ib}
    out: dict[str, Adapter] = {}
    for g in host.hcas:
        hca = fabric.hcas[fabric.hca_index(g)]
        a = by_guid.get(g) or (by_name.get(hca.name) if hca.name else None)
        if a is not None:
            out[g] = a
    mine = set(host.hcas)
    for g, a in by_guid.items():
        if fabric.has_hca(g) and g not in mine:
            other = fabric.hcas[fabric.hca_index(g)].host
            raise InputError(
                f"adapter {a.name} ({g}) is an HCA of {other} in the fabric, not of {host.name}", source=inv.source
            )
    return out


def _gpu_hca(host: Host, names: dict[str, str], matrix: TopoMatrix | None, gpus: int) -> tuple[int, ...]:
    """GPU i -> position in ``host.hcas`` of its closest InfiniBand HCA by the matrix; () -> rail order."""
    if matrix is None or not gpus or len(matrix.gpus) != gpus:
        return ()
    pos = {names[g]: i for i, g in enumerate(host.hcas) if names.get(g)}
    closest = matrix.gpu_nic(among=set(pos))
    if any(k is None for k in closest):
        return ()
    return tuple(pos[matrix.nics[k]] for k in closest if k is not None)


def merge_gpus(
    fabric: Fabric, inventories: Sequence[Inventory] = (), defaults: GpuDefaults | None = None
) -> MergeResult:
    """The fabric with GPUs on its hosts (see the module notes); HCAs gain device names and NUMA nodes."""
    by_host = {inv.host: inv for inv in inventories}
    unknown = sorted(set(by_host) - {h.name for h in fabric.hosts})
    if unknown:
        raise InputError(
            f"inventory for host {unknown[0]!r}, which the fabric does not have", source=by_host[unknown[0]].source
        )
    hcas = {h.guid: h for h in fabric.hcas}
    hosts: list[Host] = []
    warnings: list[str] = []
    got: dict[str, list[str]] = {"inventory": [], "defaults": [], "none": [], "affinity": []}
    for host in fabric.hosts:
        inv = by_host.get(host.name)
        if inv is None:
            if defaults is not None and defaults.count:
                hosts.append(replace(host, gpus=defaults.gpus(), nvlink_gbps=defaults.nvlink_gbps, gpu_hca=()))
                got["defaults"].append(host.name)
            else:
                hosts.append(host)
                got["none" if not host.gpus else "inventory"].append(host.name)
            continue
        matched = _match(host, fabric, inv)
        for g, a in matched.items():
            hcas[g] = replace(
                hcas[g], name=hcas[g].name or a.name, numa_node=a.numa_node if a.numa_node >= 0 else hcas[g].numa_node
            )
        if inv.adapters and len(matched) < len(host.hcas):
            warnings.append(f"{host.name}: {len(host.hcas) - len(matched)} of its fabric HCAs are not in its inventory")
        names = {g: hcas[g].name for g in host.hcas}
        gpus = inv.gpus or host.gpus
        gpu_hca = _gpu_hca(host, names, inv.matrix, len(gpus))
        if gpu_hca:
            got["affinity"].append(host.name)
        nvlink = inv.matrix.nvlink_max() * NVLINK_LINK_GBPS if inv.matrix is not None else host.nvlink_gbps
        hosts.append(replace(host, gpus=gpus, gpu_hca=gpu_hca, nvlink_gbps=nvlink))
        got["inventory" if gpus else "none"].append(host.name)
    if got["none"]:
        warnings.append(f"{len(got['none'])} hosts have no GPUs (no GPU inventory and no --gpus-per-host)")
    merged = Fabric(
        switches=fabric.switches,
        hcas=[hcas[h.guid] for h in fabric.hcas],
        hosts=hosts,
        links=fabric.links,
        name=fabric.name,
    )
    return MergeResult(
        merged,
        tuple(got["inventory"]),
        tuple(got["defaults"]),
        tuple(got["none"]),
        tuple(got["affinity"]),
        tuple(warnings),
    )


def require_gpus(fabric: Fabric, source: str, what: Iterable[str] = ()) -> None:
    """An ``InputError`` saying how to add GPUs, for commands that need them, when the fabric has none."""
    if fabric.gpu_count == 0:
        need = ", ".join(what) or "this command"
        raise InputError(
            f"fabric {fabric.name!r} has no GPUs ({need} needs them): an imported fabric knows only HCAs; add GPUs "
            "with `gpupool fabric merge FABRIC --inventory DIR` or `--gpus-per-host 8 --gpu-model H100`",
            source=source,
        )
