"""``NvmlGpuProbe``: inventory, telemetry and XID events through NVML (the ``nvidia-ml-py`` package).

NVML reports power in milliwatts and memory in bytes; the probe converts to the units the rest of gpupool
uses (watts, MiB) and fills the same ``SmiTelemetry`` the file probe does. A reading a GPU does not support
(``NVMLError_NotSupported``, ``NoPermission``) becomes None, as nvidia-smi prints N/A. The module is a
constructor argument so tests can hand in a stand-in; in production it is ``pynvml`` itself.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pynvml

from gpupool.agent.gpu import GpuInventory, bus_index
from gpupool.agent.xid_log import XidEvent, pci_key
from gpupool.domain.errors import GpupoolError
from gpupool.fabric.parsers.nvidia_smi import SmiTelemetry

_MIB = 1024 * 1024


class NvmlUnavailableError(GpupoolError):
    """NVML cannot be used on this machine: no driver library, no driver loaded, or no permission."""

    code = "NVML_UNAVAILABLE"


class NvmlGpuProbe:
    """One NVML session per probe; ``close()`` ends it. ``xid_events`` waits ``xid_wait_ms`` at most."""

    def __init__(self, nvml: ModuleType | Any = pynvml, *, xid_wait_ms: int = 0) -> None:
        self._nvml = nvml
        self._xid_wait_ms = xid_wait_ms
        try:
            nvml.nvmlInit()
        except nvml.NVMLError_LibraryNotFound as e:
            raise NvmlUnavailableError(
                "NVML library (libnvidia-ml.so.1) not found: no NVIDIA driver on this machine; "
                "use FileGpuProbe with an nvidia-smi -q -x file, or an emulated node"
            ) from e
        except nvml.NVMLError as e:
            raise NvmlUnavailableError(f"NVML could not start: {e}") from e
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        self._inventory: tuple[GpuInventory, ...] | None = None
        self._event_set: Any = None
        self._events_supported = True

    def close(self) -> None:
        if self._event_set is not None:
            self._nvml.nvmlEventSetFree(self._event_set)
            self._event_set = None
        self._nvml.nvmlShutdown()

    def _opt(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, or None where the GPU or driver does not offer the reading."""
        n = self._nvml
        try:
            return fn(*args)
        except (n.NVMLError_NotSupported, n.NVMLError_NoPermission, n.NVMLError_FunctionNotFound):
            return None

    def _nvlink_peers(self, h: Any) -> tuple[str, ...]:
        n = self._nvml
        peers: list[str] = []
        for link in range(n.NVML_NVLINK_MAX_LINKS):
            try:
                if n.nvmlDeviceGetNvLinkState(h, link) != n.NVML_FEATURE_ENABLED:
                    continue
                peers.append(pci_key(_text(n.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)))
            except (n.NVMLError_NotSupported, n.NVMLError_InvalidArgument, n.NVMLError_FunctionNotFound):
                # InvalidArgument: past this GPU's last link; NotSupported: a PCIe-only GPU.
                continue
        return tuple(peers)

    def inventory(self) -> tuple[GpuInventory, ...]:
        if self._inventory is None:
            n = self._nvml
            out = []
            for i, h in enumerate(self._handles):
                mig = self._opt(n.nvmlDeviceGetMigMode, h)
                out.append(
                    GpuInventory(
                        index=i,
                        name=_text(n.nvmlDeviceGetName(h)),
                        memory_total_mib=int(n.nvmlDeviceGetMemoryInfo(h).total) // _MIB,
                        uuid=_text(n.nvmlDeviceGetUUID(h)),
                        pci_bus_id=_text(n.nvmlDeviceGetPciInfo(h).busId),
                        mig_mode=None if mig is None else mig[0] == n.NVML_DEVICE_MIG_ENABLE,
                        nvlink_peers=self._nvlink_peers(h),
                        minor_number=self._opt(n.nvmlDeviceGetMinorNumber, h),
                    )
                )
            self._inventory = tuple(out)
        return self._inventory

    def _one(self, h: Any) -> SmiTelemetry:
        n = self._nvml
        util = self._opt(n.nvmlDeviceGetUtilizationRates, h)
        mem = self._opt(n.nvmlDeviceGetMemoryInfo, h)
        temp = self._opt(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU)
        power_mw = self._opt(n.nvmlDeviceGetPowerUsage, h)
        limit_mw = self._opt(n.nvmlDeviceGetEnforcedPowerLimit, h)
        pstate = self._opt(n.nvmlDeviceGetPerformanceState, h)
        ecc_mode = self._opt(n.nvmlDeviceGetEccMode, h)
        ecc_on = None if ecc_mode is None else bool(ecc_mode[0])

        def ecc(kind: int, counter: int) -> int | None:
            if not ecc_on:
                return None  # the counts mean nothing (and raise) with ECC off
            v = self._opt(n.nvmlDeviceGetTotalEccErrors, h, kind, counter)
            return None if v is None else int(v)

        rows = self._opt(n.nvmlDeviceGetRemappedRows, h)
        return SmiTelemetry(
            gpu_util_pct=None if util is None else float(util.gpu),
            memory_util_pct=None if util is None else float(util.memory),
            memory_used_mib=None if mem is None else int(mem.used) // _MIB,
            temperature_c=None if temp is None else float(temp),
            power_draw_w=None if power_mw is None else power_mw / 1000.0,
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            performance_state=None if pstate is None else f"P{int(pstate)}",
            ecc_enabled=ecc_on,
            ecc_volatile_corrected=ecc(n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC),
            ecc_volatile_uncorrected=ecc(n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC),
            ecc_aggregate_corrected=ecc(n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_AGGREGATE_ECC),
            ecc_aggregate_uncorrected=ecc(n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_AGGREGATE_ECC),
            remapped_rows_correctable=None if rows is None else int(rows[0]),
            remapped_rows_uncorrectable=None if rows is None else int(rows[1]),
            remapped_rows_pending=None if rows is None else bool(rows[2]),
            remapped_rows_failure=None if rows is None else bool(rows[3]),
        )

    def telemetry(self) -> tuple[SmiTelemetry, ...]:
        return tuple(self._one(h) for h in self._handles)

    def _events(self) -> Any:
        """The event set, registered for critical XIDs on every GPU that supports them (None: none does)."""
        n = self._nvml
        if self._event_set is None and self._events_supported:
            self._event_set = n.nvmlEventSetCreate()
            registered = 0
            for h in self._handles:
                try:
                    n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, self._event_set)
                    registered += 1
                except n.NVMLError_NotSupported:
                    continue  # e.g. some GeForce boards: the kernel log reader covers them
            self._events_supported = registered > 0
        return self._event_set if self._events_supported else None

    def xid_events(self) -> tuple[XidEvent, ...]:
        n = self._nvml
        events = self._events()
        if events is None:
            return ()
        by_bus = bus_index(self.inventory())
        out: list[XidEvent] = []
        timeout = self._xid_wait_ms
        while True:
            try:
                data = n.nvmlEventSetWait_v2(events, timeout)
            except n.NVMLError_Timeout:
                break
            timeout = 0  # drain what is queued without waiting again
            if data.eventType != n.nvmlEventTypeXidCriticalError:
                continue
            bus = pci_key(_text(n.nvmlDeviceGetPciInfo(data.device).busId))
            out.append(XidEvent(code=int(data.eventData), pci_bus_id=bus, gpu_index=by_bus.get(bus)))
        return tuple(out)


def _text(v: str | bytes) -> str:
    """Old nvidia-ml-py releases return bytes where new ones return str."""
    return v.decode() if isinstance(v, bytes) else v
