"""An emulated GPU node: the files a real one exposes, kept current as simulated time passes.

Under ``root`` it writes ``sys/class/infiniband`` (through the fabric's own ``write_sysfs_infiniband``),
``nvidia-smi-q.xml`` (``nvidia-smi -q -x`` shape, DTD v12 layout as on a 535-series driver) and
``kern.log``. The agent's real probes (``FileGpuProbe``, ``SysfsIbProbe``, ``KernelLogXidReader``) read
them, so the code under test on a build machine is the code that runs on a GPU node. Nothing here is
random: the same calls give the same files.

Faults from outside the agent's process (a test driving ``gpupool agent --emulate``): an XID is a line
appended to ``kern.log``, as the driver writes it; congestion and heat are ``faults.json`` under the root
(``write_faults``): per HCA name the ``PortXmitWait`` ticks per second its port accumulates, per GPU index a
temperature it is held at. The node reads the file whenever it changed, at its next ``advance``; without
the file, no such fault stands.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from xml.sax.saxutils import escape

from gpupool.agent.gpu import SMI_XML_NAME
from gpupool.domain.xid import xid_info
from gpupool.fabric.model import Hca, Host
from gpupool.fabric.parsers.sysfs import SysfsDevice, SysfsPort, write_sysfs_infiniband
from gpupool.fabric.rates import speed_for_gbps

SYSFS_DIR = "sys/class/infiniband"
KERNEL_LOG = "kern.log"
FAULTS = "faults.json"
# A DGX H100's GPU bus numbers (nvidia-smi order); other hosts get evenly spaced made-up ones.
_DGX_H100_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
_IDLE_C = 32.0
_C_PER_UTIL_PCT = 0.45  # an H100 SXM at full load settles near 77 C with good cooling
_THERMAL_TAU_S = 30.0
_IDLE_W = 70.0
_MTU_BYTES = 4096
_LINK_EFFICIENCY = 0.8  # share of the signalling rate a busy rail carries as payload
_XID_MESSAGES = {
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0.",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap row.",
    74: "NVLink: fatal error detected on link 3(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20801348 0x4).",
}
_COUNTER_NAMES = (
    "VL15_dropped",
    "excessive_buffer_overrun_errors",
    "link_downed",
    "link_error_recovery",
    "local_link_integrity_errors",
    "multicast_rcv_packets",
    "multicast_xmit_packets",
    "port_rcv_constraint_errors",
    "port_rcv_data",
    "port_rcv_errors",
    "port_rcv_packets",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors",
    "port_xmit_data",
    "port_xmit_discards",
    "port_xmit_packets",
    "port_xmit_wait",
    "symbol_error",
    "unicast_rcv_packets",
    "unicast_xmit_packets",
)


@dataclass(frozen=True, slots=True)
class _GpuState:
    util_pct: float = 0.0
    memory_fraction: float = 0.0
    temperature_c: float = _IDLE_C
    extra_c: float = 0.0  # a cooling fault: the GPU settles this much hotter
    held_c: float | None = None  # a fault holds the GPU at this temperature, whatever its load
    ecc_uncorrected: int = 0
    ecc_corrected: int = 0
    pid: int | None = None
    process: str | None = None


def _bus_id(index: int, count: int) -> str:
    bus = _DGX_H100_BUSES[index] if count <= len(_DGX_H100_BUSES) else 0x10 + index * (0xF0 // max(count, 1))
    return f"00000000:{bus:02X}:00.0"


class EmulatedNode:
    """One host's GPUs and HCAs as files. Mutable on purpose: it stands in for hardware whose state changes."""

    def __init__(self, root: str | Path, host: Host, hcas: Sequence[Hca], *, uptime_s: float = 1000.0) -> None:
        self.root = Path(root)
        self.host = host
        self.hcas = tuple(hcas)
        self.now_s = uptime_s
        self.sysfs_root = self.root / SYSFS_DIR
        self.smi_xml_path = self.root / SMI_XML_NAME
        self.kernel_log_path = self.root / KERNEL_LOG
        n = len(host.gpus)
        self.uuids = tuple(
            g.uuid or f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{host.name}.gpu{g.index}')}" for g in host.gpus
        )
        self.bus_ids = tuple(g.pci_bus_id or _bus_id(i, n) for i, g in enumerate(host.gpus))
        self._gpus = [_GpuState() for _ in host.gpus]
        self._counters = [dict.fromkeys(_COUNTER_NAMES, 0) for _ in self.hcas]
        self._link_up = [True for _ in self.hcas]
        self._xmit_wait_per_s = [0.0 for _ in self.hcas]
        self._faults_seen: tuple[int, int, int] | None = None  # (inode, mtime ns, size) of the faults applied
        self._written: dict[str, str] = {}  # the sysfs files as this node last wrote them: only changes are rewritten
        self.root.mkdir(parents=True, exist_ok=True)
        self.kernel_log_path.touch()
        self.write()

    # --- what runs on the node -------------------------------------------------------------------------
    def place(
        self,
        gpus: Iterable[int],
        util_pct: float = 95.0,
        memory_fraction: float = 0.8,
        *,
        pid: int | None = None,
        process: str = "python",
    ) -> None:
        """A workload starts on ``gpus``: they get busy (temperature follows as time advances)."""
        # The name comes from a tenant's argv: like the kernel's 15-character comm, printable and short, so it
        # can neither break the XML nor add a line to the kernel log that the probes read back.
        process = "".join(c for c in process if c.isprintable())[:15] or "?"
        for g in gpus:
            self._gpus[g] = replace(
                self._gpus[g], util_pct=util_pct, memory_fraction=memory_fraction, pid=pid, process=process
            )

    def release(self, gpus: Iterable[int]) -> None:
        for g in gpus:
            self._gpus[g] = replace(self._gpus[g], util_pct=0.0, memory_fraction=0.0, pid=None, process=None)

    # --- faults (the kernel log line appears at once; the rest shows in the files at the next write) ----
    def inject_xid(self, gpu_index: int, code: int) -> str:
        """Append an ``NVRM: Xid`` line for ``gpu_index`` as the driver prints it; returns the line."""
        st = self._gpus[gpu_index]
        bus = self.bus_ids[gpu_index].split(":", 1)[1].rsplit(".", 1)[0].lower()  # "18:00"
        who = f"pid={st.pid}, name={st.process}" if st.pid is not None else "pid='<unknown>', name=<unknown>"
        msg = _XID_MESSAGES.get(code, xid_info(code).name)
        line = f"[{self.now_s:12.6f}] NVRM: Xid (PCI:0000:{bus}): {code}, {who}, {msg}\n"
        with self.kernel_log_path.open("a", encoding="utf-8") as f:
            f.write(line)
        return line

    def inject_ecc(self, gpu_index: int, uncorrectable: int = 0, correctable: int = 0) -> None:
        st = self._gpus[gpu_index]
        self._gpus[gpu_index] = replace(
            st, ecc_uncorrected=st.ecc_uncorrected + uncorrectable, ecc_corrected=st.ecc_corrected + correctable
        )

    def cooling_fault(self, gpu_index: int, extra_c: float) -> None:
        self._gpus[gpu_index] = replace(self._gpus[gpu_index], extra_c=extra_c)

    def set_link(self, hca_index: int, up: bool) -> None:
        self._link_up[hca_index] = up
        if not up:
            self._counters[hca_index]["link_downed"] += 1

    def add_port_errors(self, hca_index: int, counter: str, n: int) -> None:
        self._counters[hca_index][counter] += n

    def set_congestion(self, hca_index: int, xmit_wait_per_s: float) -> None:
        self._xmit_wait_per_s[hca_index] = xmit_wait_per_s

    def hold_temperature(self, gpu_index: int, temperature_c: float | None) -> None:
        """The GPU reads ``temperature_c`` from now on (None: it follows its load again)."""
        st = self._gpus[gpu_index]
        self._gpus[gpu_index] = replace(
            st, held_c=temperature_c, temperature_c=st.temperature_c if temperature_c is None else temperature_c
        )

    def read_faults(self) -> None:
        """Apply ``faults.json`` if it changed since last read (a file half written, or not JSON, waits for
        the next read: ``write_faults`` replaces it in one rename)."""
        path = self.root / FAULTS
        try:
            st = path.stat()
            seen = (st.st_ino, st.st_mtime_ns, st.st_size)
            if seen == self._faults_seen:
                return
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            doc, seen = {}, None
            if self._faults_seen is None:
                return
        except (OSError, ValueError):
            return
        self._faults_seen = seen
        waits = doc.get("xmit_wait_per_s", {}) if isinstance(doc, dict) else {}
        temps = doc.get("temperature_c", {}) if isinstance(doc, dict) else {}
        for i, hca in enumerate(self.hcas):
            self.set_congestion(i, float(waits.get(self._device_name(i, hca), 0.0)))
        for g in range(len(self._gpus)):
            held = temps.get(str(g))
            if held is not None or self._gpus[g].held_c is not None:
                self.hold_temperature(g, None if held is None else float(held))

    # --- time --------------------------------------------------------------------------------------------
    def gpu_hca(self, gpu_index: int) -> int | None:
        """Position in ``hcas`` of the GPU's rail HCA: the host's affinity when known, else rail order."""
        if not self.hcas:
            return None
        if self.host.gpu_hca:
            return self.host.gpu_hca[gpu_index]
        return gpu_index % len(self.hcas)

    def advance(self, dt_s: float) -> None:
        """Let ``dt_s`` seconds pass: counters grow with traffic, temperatures drift toward their load's."""
        if dt_s < 0:
            raise ValueError("time does not run backwards")
        self.now_s += dt_s
        self.read_faults()
        k = 1.0 - math.exp(-dt_s / _THERMAL_TAU_S)
        for i, st in enumerate(self._gpus):
            if st.held_c is not None:
                continue
            target = _IDLE_C + _C_PER_UTIL_PCT * st.util_pct + st.extra_c
            self._gpus[i] = replace(st, temperature_c=st.temperature_c + (target - st.temperature_c) * k)
        load = [0.0 for _ in self.hcas]
        users = [0 for _ in self.hcas]
        for g, st in enumerate(self._gpus):
            h = self.gpu_hca(g)
            if h is not None:
                load[h] += st.util_pct / 100.0
                users[h] += 1
        for h, hca in enumerate(self.hcas):
            c = self._counters[h]
            if not self._link_up[h]:
                continue
            share = load[h] / users[h] if users[h] else 0.0
            nbytes = int(share * hca.rate_gbps * 1e9 / 8 * _LINK_EFFICIENCY * dt_s)
            for direction in ("xmit", "rcv"):
                c[f"port_{direction}_data"] += nbytes // 4
                packets = -(-nbytes // _MTU_BYTES)
                c[f"port_{direction}_packets"] += packets
                c[f"unicast_{direction}_packets"] += packets
            c["port_xmit_wait"] += int(self._xmit_wait_per_s[h] * dt_s)
        self.write()

    # --- files -------------------------------------------------------------------------------------------
    @staticmethod
    def _device_name(i: int, hca: Hca) -> str:
        """The HCA's name in sysfs (what the agent reports): the fabric's when it is a device name."""
        return hca.name if hca.name.startswith("mlx") else f"mlx5_{i}"

    def _device(self, i: int, hca: Hca) -> SysfsDevice:
        rate = hca.rate_gbps or 400.0
        up = self._link_up[i]
        port = SysfsPort(
            port=1,
            state="ACTIVE" if up else "DOWN",
            state_code=4 if up else 1,
            phys_state="LinkUp" if up else "Disabled",
            phys_state_code=5 if up else 3,
            rate_gbps=rate,
            width=4,
            speed=speed_for_gbps(rate / 4),
            link_layer=hca.link_layer or "InfiniBand",
            lid=hca.lid or i + 1,
            sm_lid=1,
            counters=MappingProxyType(dict(self._counters[i])),
        )
        name = self._device_name(i, hca)
        return SysfsDevice(
            name=name,
            ports=(port,),
            node_guid=hca.guid,
            sys_image_guid=hca.guid,
            node_desc=hca.description or f"{self.host.name} {name}",
            node_type="1: CA",
            hca_type="MT4129",
            board_id="MT_0000000838",
            fw_ver="28.41.1000",
            hw_rev="0x0",
            numa_node=hca.numa_node if hca.numa_node >= 0 else None,
        )

    def _gpu_xml(self, i: int) -> str:
        g = self.host.gpus[i]
        st = self._gpus[i]
        used = int(g.memory_mib * st.memory_fraction)
        reserved = min(597, g.memory_mib - used)
        limit = 700.0
        power = _IDLE_W + (limit - _IDLE_W) * st.util_pct / 100.0
        bus = self.bus_ids[i]
        bus_no = bus.split(":")[1]
        procs = (
            f"<process_info><gpu_instance_id>N/A</gpu_instance_id><compute_instance_id>N/A</compute_instance_id>"
            f"<pid>{st.pid}</pid><type>C</type><process_name>{escape(st.process or '')}</process_name>"
            f"<used_memory>{used} MiB</used_memory></process_info>"
            if st.pid is not None
            else ""
        )
        return f"""    <gpu id="{bus}">
        <product_name>{escape(g.model)}</product_name>
        <product_brand>NVIDIA</product_brand>
        <product_architecture>Hopper</product_architecture>
        <persistence_mode>Enabled</persistence_mode>
        <mig_mode>
            <current_mig>{"Enabled" if g.mig_mode else "Disabled"}</current_mig>
            <pending_mig>{"Enabled" if g.mig_mode else "Disabled"}</pending_mig>
        </mig_mode>
        <serial>1654922{i:06d}</serial>
        <uuid>{self.uuids[i]}</uuid>
        <minor_number>{i}</minor_number>
        <pci>
            <pci_bus>{bus_no}</pci_bus>
            <pci_device>00</pci_device>
            <pci_domain>0000</pci_domain>
            <pci_device_id>233010DE</pci_device_id>
            <pci_bus_id>{bus}</pci_bus_id>
        </pci>
        <performance_state>{"P0" if st.util_pct > 0 else "P5"}</performance_state>
        <fb_memory_usage>
            <total>{g.memory_mib} MiB</total>
            <reserved>{reserved} MiB</reserved>
            <used>{used} MiB</used>
            <free>{g.memory_mib - used - reserved} MiB</free>
        </fb_memory_usage>
        <compute_mode>Default</compute_mode>
        <utilization>
            <gpu_util>{round(st.util_pct)} %</gpu_util>
            <memory_util>{round(st.util_pct * 0.6)} %</memory_util>
            <encoder_util>0 %</encoder_util>
            <decoder_util>0 %</decoder_util>
        </utilization>
        <ecc_mode>
            <current_ecc>Enabled</current_ecc>
            <pending_ecc>Enabled</pending_ecc>
        </ecc_mode>
        <ecc_errors>
            <volatile>
                <sram_correctable>0</sram_correctable>
                <sram_uncorrectable>0</sram_uncorrectable>
                <dram_correctable>{st.ecc_corrected}</dram_correctable>
                <dram_uncorrectable>{st.ecc_uncorrected}</dram_uncorrectable>
            </volatile>
            <aggregate>
                <sram_correctable>0</sram_correctable>
                <sram_uncorrectable>0</sram_uncorrectable>
                <dram_correctable>{st.ecc_corrected}</dram_correctable>
                <dram_uncorrectable>{st.ecc_uncorrected}</dram_uncorrectable>
            </aggregate>
        </ecc_errors>
        <retired_pages>
            <multiple_single_bit_retirement>
                <retired_count>N/A</retired_count>
                <retired_pagelist>N/A</retired_pagelist>
            </multiple_single_bit_retirement>
            <double_bit_retirement>
                <retired_count>N/A</retired_count>
                <retired_pagelist>N/A</retired_pagelist>
            </double_bit_retirement>
            <pending_blacklist>N/A</pending_blacklist>
            <pending_retirement>N/A</pending_retirement>
        </retired_pages>
        <remapped_rows>
            <remapped_row_corr>0</remapped_row_corr>
            <remapped_row_unc>{min(st.ecc_uncorrected, 1)}</remapped_row_unc>
            <remapped_row_pending>{"Yes" if st.ecc_uncorrected else "No"}</remapped_row_pending>
            <remapped_row_failure>No</remapped_row_failure>
        </remapped_rows>
        <temperature>
            <gpu_temp>{round(st.temperature_c)} C</gpu_temp>
            <gpu_temp_max_threshold>92 C</gpu_temp_max_threshold>
            <gpu_temp_slow_threshold>89 C</gpu_temp_slow_threshold>
            <memory_temp>{round(st.temperature_c + 8)} C</memory_temp>
        </temperature>
        <gpu_power_readings>
            <power_state>{"P0" if st.util_pct > 0 else "P5"}</power_state>
            <power_draw>{power:.2f} W</power_draw>
            <current_power_limit>{limit:.2f} W</current_power_limit>
            <default_power_limit>{limit:.2f} W</default_power_limit>
        </gpu_power_readings>
        <processes>{procs}</processes>
    </gpu>
"""

    def smi_xml(self) -> str:
        gpus = "".join(self._gpu_xml(i) for i in range(len(self.host.gpus)))
        return f"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
    <timestamp>uptime {self.now_s:.0f} s</timestamp>
    <driver_version>535.161.08</driver_version>
    <cuda_version>12.2</cuda_version>
    <attached_gpus>{len(self.host.gpus)}</attached_gpus>
{gpus}</nvidia_smi_log>
"""

    def write(self) -> None:
        """Bring every file up to date. The XML is replaced in one rename, so a reader never sees half of it."""
        write_sysfs_infiniband(self.sysfs_root, (self._device(i, h) for i, h in enumerate(self.hcas)), self._written)
        tmp = self.smi_xml_path.with_suffix(".xml.tmp")
        tmp.write_text(self.smi_xml(), encoding="utf-8")
        os.replace(tmp, self.smi_xml_path)


def write_faults(
    root: str | Path,
    *,
    xmit_wait_per_s: Mapping[str, float] | None = None,
    temperature_c: Mapping[int, float] | None = None,
) -> None:
    """Set the faults of the emulated node under ``root`` (replacing the previous ones): ``xmit_wait_per_s``
    per HCA name (``mlx5_0``), ``temperature_c`` per GPU index. Written in one rename, read at the node's next
    ``advance`` (the agent's next sample)."""
    doc = {
        "xmit_wait_per_s": dict(xmit_wait_per_s or {}),
        "temperature_c": {str(g): c for g, c in (temperature_c or {}).items()},
    }
    path = Path(root) / FAULTS
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc), encoding="utf-8")
    os.replace(tmp, path)
