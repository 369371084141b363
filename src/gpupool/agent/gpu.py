"""GPU probes: one interface, ``GpuProbe``, over NVML (``agent.nvml``) and over an ``nvidia-smi -q -x`` file.

Both hand out the same records: ``GpuInventory`` (what a GPU is, read once at start) and the parser's
``SmiTelemetry`` (how it is doing, read every interval), so health rules never know which probe ran.
GPU index = position in PCI bus order, which is how ``nvidia-smi`` lists GPUs and what
``CUDA_VISIBLE_DEVICES`` means under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpupool.agent.xid_log import KernelLogXidReader, XidEvent, pci_key
from gpupool.domain.errors import InputError
from gpupool.fabric.parsers.nvidia_smi import SmiReport, SmiTelemetry, parse_query_xml

SMI_XML_NAME = "nvidia-smi-q.xml"  # the file FileGpuProbe reads when given a directory


@dataclass(frozen=True, slots=True)
class GpuInventory:
    index: int
    name: str
    memory_total_mib: int
    uuid: str
    pci_bus_id: str  # as the source spells it ("00000000:18:00.0")
    mig_mode: bool | None  # None: no MIG on this GPU
    nvlink_peers: tuple[str, ...] = ()  # pci_key of the far end of each active NVLink (NVSwitch ports too)
    minor_number: int | None = None  # N of its /dev/nvidiaN; None: unknown (the node's device rule assumes index)


class GpuProbe(Protocol):
    def inventory(self) -> tuple[GpuInventory, ...]: ...

    def telemetry(self) -> tuple[SmiTelemetry, ...]:
        """One reading per GPU, in index order."""
        ...

    def xid_events(self) -> tuple[XidEvent, ...]:
        """The XIDs seen since the previous call."""
        ...


def bus_index(inventory: tuple[GpuInventory, ...]) -> dict[str, int]:
    """``pci_key`` -> GPU index, to attribute kernel-log XIDs (which name only the bus) to GPUs."""
    return {pci_key(g.pci_bus_id): g.index for g in inventory}


class FileGpuProbe:
    """Reads an ``nvidia-smi -q -x`` file (a real capture, or the one an ``EmulatedNode`` keeps current).

    ``path``: the XML file, or a directory holding ``nvidia-smi-q.xml``. XIDs come from ``kernel_log`` when
    given (the emulated node writes one); without it the probe reports none.
    """

    def __init__(self, path: str | Path, kernel_log: str | Path | None = None) -> None:
        p = Path(path)
        self.path = p / SMI_XML_NAME if p.is_dir() else p
        self._inventory: tuple[GpuInventory, ...] | None = None
        self._xids: KernelLogXidReader | None = None
        if kernel_log is not None:
            self._xids = KernelLogXidReader(kernel_log, bus_index(self.inventory()))

    def _report(self) -> SmiReport:
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError as e:
            raise InputError(f"cannot read nvidia-smi XML: {e.strerror}", source=str(self.path)) from e
        return parse_query_xml(text, source=str(self.path))

    def inventory(self) -> tuple[GpuInventory, ...]:
        if self._inventory is None:
            self._inventory = tuple(
                GpuInventory(
                    i, g.product_name, g.memory_total_mib, g.uuid, g.pci_bus_id, g.mig_mode, minor_number=g.minor_number
                )
                for i, g in enumerate(self._report().gpus)
            )
        return self._inventory

    def telemetry(self) -> tuple[SmiTelemetry, ...]:
        return tuple(g.telemetry for g in self._report().gpus)

    def xid_events(self) -> tuple[XidEvent, ...]:
        return self._xids.read() if self._xids is not None else ()
