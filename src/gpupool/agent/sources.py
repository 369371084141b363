"""Where a node's facts come from: the real probes (NVML or an ``nvidia-smi -q -x`` file, sysfs InfiniBand) on
hardware, or the same probes reading an emulated node's files (``gpupool agent --emulate``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpupool.agent.emulated import EmulatedNode
from gpupool.agent.gpu import FileGpuProbe, GpuProbe
from gpupool.agent.ib import SysfsIbProbe
from gpupool.agent.nvml import NvmlGpuProbe, NvmlUnavailableError
from gpupool.domain.errors import InputError
from gpupool.fabric import jsonio
from gpupool.fabric.model import Host


@dataclass(frozen=True, slots=True)
class NodeSources:
    """Where this node's facts come from. ``host``: the fabric's view of an emulated node (NVLink islands,
    NUMA, CPU and memory), None on real hardware."""

    gpus: GpuProbe | None
    ib: SysfsIbProbe | None
    emulated: EmulatedNode | None = None
    host: Host | None = None


def emulated_sources(fabric_path: Path, host_name: str, root: Path) -> NodeSources:
    """An emulated node for ``host_name`` of the fabric JSON, under ``root``; the real probes read it."""
    fabric = jsonio.load(fabric_path)
    if not fabric.has_host(host_name):
        raise InputError(f"host {host_name!r} is not in the fabric", source=str(fabric_path))
    host = fabric.host(host_name)
    node = EmulatedNode(root, host, [fabric.hcas[fabric.hca_index(g)] for g in host.hcas])
    return NodeSources(
        gpus=FileGpuProbe(node.smi_xml_path, node.kernel_log_path),
        ib=SysfsIbProbe(node.sysfs_root),
        emulated=node,
        host=host,
    )


def hardware_sources(
    sysfs_root: Path, smi_xml: Path | None, kernel_log: Path | None, log: Callable[[str], None]
) -> NodeSources:
    """NVML when it starts, else an ``nvidia-smi -q -x`` file when given, else no GPUs; IB from sysfs."""
    gpus: GpuProbe | None = None
    if smi_xml is not None:
        gpus = FileGpuProbe(smi_xml, kernel_log)
    else:
        try:
            gpus = NvmlGpuProbe()
        except NvmlUnavailableError as e:
            log(f"no GPUs: {e}")
    ib = SysfsIbProbe(sysfs_root) if sysfs_root.is_dir() else None
    if ib is None:
        log(f"no InfiniBand: {sysfs_root} does not exist")
    return NodeSources(gpus=gpus, ib=ib)
