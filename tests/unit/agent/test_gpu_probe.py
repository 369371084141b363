"""GPU probes: the file probe on real recorded nvidia-smi -q -x files; the NVML probe without NVML.

There is no GPU here. The real NVML library is absent, so ``NvmlGpuProbe()`` must say so clearly (tested
against the real ``pynvml``). The unit conversions are checked with a stand-in module that answers the
same calls with the types NVML returns (milliwatts, bytes); the real calls run on a GPU machine.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from gpupool.agent.gpu import SMI_XML_NAME, FileGpuProbe, bus_index
from gpupool.agent.nvml import NvmlGpuProbe, NvmlUnavailableError
from gpupool.domain.errors import InputError, ParseError

XML = Path(__file__).resolve().parents[2] / "data" / "nvidia-smi-xml"


def test_file_probe_reads_the_a100_capture() -> None:
    p = FileGpuProbe(XML / "a100-sxm4-dtd-v12-telegraf.xml")
    (g,) = p.inventory()
    assert (g.index, g.name, g.memory_total_mib, g.pci_bus_id, g.mig_mode) == (
        0,
        "NVIDIA A100-SXM4-80GB",
        81920,
        "00000000:01:00.0",
        True,
    )
    assert g.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    (t,) = p.telemetry()
    assert (t.temperature_c, t.power_draw_w, t.memory_used_mib, t.gpu_util_pct) == (27.0, 67.03, 50, None)
    assert t.ecc_volatile_uncorrected == 0
    assert p.xid_events() == ()


def test_file_probe_reads_two_gpus_in_bus_order_and_maps_buses() -> None:
    p = FileGpuProbe(XML / "dual-rtx-a5000-dtd-v13-telegraf.xml")
    inv = p.inventory()
    assert [g.pci_bus_id for g in inv] == ["00000000:81:00.0", "00000000:C1:00.0"]
    assert bus_index(inv) == {"0000:81:00": 0, "0000:c1:00": 1}
    assert [t.power_draw_w for t in p.telemetry()] == [6.52, 13.59]


def test_file_probe_accepts_a_directory(tmp_path: Path) -> None:
    shutil.copyfile(XML / "tesla-t4-telegraf.xml", tmp_path / SMI_XML_NAME)
    (g,) = FileGpuProbe(tmp_path).inventory()
    assert (g.name, g.memory_total_mib, g.mig_mode) == ("Tesla T4", 15360, None)


def test_file_probe_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        FileGpuProbe(tmp_path / "absent.xml").telemetry()
    bad = tmp_path / "bad.xml"
    bad.write_text("<nvidia_smi_log><driver_version>1</driver_version><gpu id='x'>\n</nvidia_smi_log>")
    with pytest.raises(ParseError) as e:
        FileGpuProbe(bad).telemetry()
    assert e.value.source == str(bad) and e.value.line == 2


def test_nvml_probe_without_a_driver_fails_clearly() -> None:
    with pytest.raises(NvmlUnavailableError, match="libnvidia-ml") as e:
        NvmlGpuProbe()
    assert isinstance(e.value.__cause__, pynvml.NVMLError_LibraryNotFound)
    assert e.value.code == "NVML_UNAVAILABLE"


class _Err(Exception):
    pass


def _fake_nvml(*, ecc_on: bool = True, xids: list[int] | None = None) -> Any:
    """Answers NVML's calls for two H100s the way pynvml returns them (mW, bytes, tuples, ctypes-like records)."""
    pending = list(xids or [])

    class NotSupported(_Err): ...

    class Timeout(_Err): ...

    class InvalidArgument(_Err): ...

    buses = ["00000000:18:00.0", "00000000:2A:00.0"]

    def nvlink_state(h: int, link: int) -> int:
        if link >= 2:
            raise InvalidArgument
        return 1

    def wait(es: object, timeout_ms: int) -> Any:
        if not pending:
            raise Timeout
        return SimpleNamespace(eventType=8, eventData=pending.pop(0), device=1)

    def ecc_count(h: int, kind: int, counter: int) -> int:
        return {(1, 0): 2, (0, 0): 7}.get((kind, counter), 0) if h == 1 else 0

    return SimpleNamespace(
        NVMLError=_Err,
        NVMLError_LibraryNotFound=type("LNF", (_Err,), {}),
        NVMLError_NotSupported=NotSupported,
        NVMLError_NoPermission=type("NP", (_Err,), {}),
        NVMLError_FunctionNotFound=type("FNF", (_Err,), {}),
        NVMLError_InvalidArgument=InvalidArgument,
        NVMLError_Timeout=Timeout,
        NVML_NVLINK_MAX_LINKS=18,
        NVML_FEATURE_ENABLED=1,
        NVML_DEVICE_MIG_ENABLE=1,
        NVML_TEMPERATURE_GPU=0,
        NVML_MEMORY_ERROR_TYPE_CORRECTED=0,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_VOLATILE_ECC=0,
        NVML_AGGREGATE_ECC=1,
        nvmlEventTypeXidCriticalError=8,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",  # old nvidia-ml-py returned bytes
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(busId=buses[h]),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=85520809984, used=1024 * 1024 * 1000),
        nvmlDeviceGetMigMode=lambda h: (0, 0),
        nvmlDeviceGetMinorNumber=lambda h: 7 - h,  # /dev/nvidia7 is GPU 0: minors need not follow the index
        nvmlDeviceGetNvLinkState=nvlink_state,
        nvmlDeviceGetNvLinkRemotePciInfo=lambda h, link: SimpleNamespace(busId=f"00000000:{0xA0 + link:02X}:00.0"),
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=93, memory=41),
        nvmlDeviceGetTemperature=lambda h, sensor: 64,
        nvmlDeviceGetPowerUsage=lambda h: 612345,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 700000,
        nvmlDeviceGetPerformanceState=lambda h: 0,
        nvmlDeviceGetEccMode=lambda h: (1 if ecc_on else 0, 1),
        nvmlDeviceGetTotalEccErrors=ecc_count,
        nvmlDeviceGetRemappedRows=lambda h: (0, 1, 1, 0) if h == 1 else (0, 0, 0, 0),
        nvmlEventSetCreate=lambda: object(),
        nvmlEventSetFree=lambda es: None,
        nvmlDeviceRegisterEvents=lambda h, mask, es: None,
        nvmlEventSetWait_v2=wait,
    )


def test_nvml_probe_converts_units_and_reads_nvlink_peers() -> None:
    p = NvmlGpuProbe(_fake_nvml())
    inv = p.inventory()
    assert [g.pci_bus_id for g in inv] == ["00000000:18:00.0", "00000000:2A:00.0"]
    g = inv[0]
    assert (g.name, g.memory_total_mib, g.mig_mode, g.nvlink_peers) == (
        "NVIDIA H100 80GB HBM3",
        81559,
        False,
        ("0000:a0:00", "0000:a1:00"),
    )
    assert [g.minor_number for g in inv] == [7, 6]  # the agent's device rule opens /dev/nvidia<minor>
    t0, t1 = p.telemetry()
    assert (t0.power_draw_w, t0.power_limit_w, t0.memory_used_mib, t0.gpu_util_pct) == (612.345, 700.0, 1000, 93.0)
    assert (t0.temperature_c, t0.performance_state, t0.ecc_volatile_uncorrected) == (64.0, "P0", 0)
    assert (t1.ecc_volatile_uncorrected, t1.ecc_volatile_corrected, t1.remapped_rows_pending) == (2, 7, True)
    p.close()


def test_nvml_probe_ecc_off_gives_no_counts() -> None:
    (t, _) = NvmlGpuProbe(_fake_nvml(ecc_on=False)).telemetry()
    assert t.ecc_enabled is False and t.ecc_volatile_uncorrected is None


def test_nvml_xid_events_are_attributed_to_gpus() -> None:
    p = NvmlGpuProbe(_fake_nvml(xids=[79, 48]))
    events = p.xid_events()
    assert [(e.code, e.gpu_index, e.pci_bus_id) for e in events] == [(79, 1, "0000:2a:00"), (48, 1, "0000:2a:00")]
    assert p.xid_events() == ()
