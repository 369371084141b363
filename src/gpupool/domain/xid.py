"""NVIDIA XID codes: what each one means for the GPU's health and what an operator should do about it.

A pure data table. Facts follow NVIDIA's "Xid Errors" catalogue (docs.nvidia.com/deploy/xid-errors, the
table of causes per XID and the "Recommended action" column added for Ampere/Hopper) and the GPU memory
error management guide (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt) for the ECC/row-remap codes.
Application-level XIDs (13, 31, 43, 45) say a program misbehaved, not that the GPU did: they grade OK.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType

from gpupool.domain.events import HealthGrade


class XidAction(IntEnum):
    """What to do after an XID, mildest first, so the worst of several is ``max``."""

    NONE = 0  # nothing on the node: the application (or its user) has to act
    RESET_GPU = 1  # drain the GPU's work, then ``nvidia-smi -r`` (a reset clears the fault or applies a remap)
    DRAIN = 2  # keep work off the node until a person has looked (hardware suspected, reset not known to help)
    REBOOT = 3  # the GPU cannot be reached any more: only a node reboot (or a power cycle) brings it back


@dataclass(frozen=True, slots=True)
class XidInfo:
    code: int
    name: str
    grade: HealthGrade
    action: XidAction
    hardware: bool  # False: caused by the application, the GPU is fine


def _x(code: int, name: str, grade: HealthGrade, action: XidAction, hardware: bool = True) -> tuple[int, XidInfo]:
    return code, XidInfo(code, name, grade, action, hardware)


_OK, _DEG, _BAD = HealthGrade.OK, HealthGrade.DEGRADED, HealthGrade.BAD

XID_TABLE: Mapping[int, XidInfo] = MappingProxyType(
    dict(
        [
            # Catalogue: "GPU stopped processing"; driver or hardware hang; reset recovers it.
            _x(8, "GPU stopped processing", _DEG, XidAction.RESET_GPU),
            # Catalogue: "Graphics Engine Exception", almost always an illegal memory access or out-of-range
            # index in the user's kernel (NVIDIA lists hardware only as a rare cause): application level.
            _x(13, "Graphics engine exception", _OK, XidAction.NONE, hardware=False),
            # Catalogue: "GPU memory page fault": MMU fault from an illegal address in the application.
            _x(31, "GPU memory page fault", _OK, XidAction.NONE, hardware=False),
            # Catalogue: "Invalid or corrupted push buffer stream": driver/application; hardware unlikely.
            _x(32, "Invalid or corrupted push buffer stream", _OK, XidAction.NONE, hardware=False),
            # Catalogue: "GPU stopped processing" as a result of a user application fault (channel reset).
            _x(43, "Reset channel verification error", _OK, XidAction.NONE, hardware=False),
            # Catalogue: "Preemptive cleanup, due to previous errors": the process was killed/ended (Ctrl-C,
            # OOM kill); follows other XIDs; by itself not a GPU fault.
            _x(45, "Preemptive cleanup", _OK, XidAction.NONE, hardware=False),
            # Catalogue: "Double Bit ECC Error" (DBE): uncorrectable memory error; the page is retired or the
            # row remapped at the next reset, so the GPU must be reset before it is trusted again.
            _x(48, "Double bit ECC error", _BAD, XidAction.RESET_GPU),
            # Catalogue: "Internal micro-controller breakpoint/warning": firmware trouble, reset advised.
            _x(61, "Internal micro-controller breakpoint/warning", _DEG, XidAction.RESET_GPU),
            # Catalogue: "Internal micro-controller halt": the GPU stops working until reset.
            _x(62, "Internal micro-controller halt", _BAD, XidAction.RESET_GPU),
            # Memory error guide: 63 = a page retirement / row remapping was recorded; it takes effect at the
            # next GPU reset, which should happen once the GPU is idle.
            _x(63, "ECC page retirement or row remapping recorded", _DEG, XidAction.RESET_GPU),
            # Memory error guide: 64 = recording the retirement/remap failed (no spare rows left): the
            # memory fault stays live; reset and, if it repeats, the board goes back to the vendor.
            _x(64, "ECC page retirement or row remapping failure", _BAD, XidAction.DRAIN),
            # Catalogue: "Graphics Engine class error": hardware or driver; reset advised.
            _x(69, "Graphics engine class error", _DEG, XidAction.RESET_GPU),
            # Catalogue: "NVLink Error": a link to a peer GPU/NVSwitch failed; collective jobs on the island
            # hang or fail; reset the GPU, and check the NVLink/NVSwitch hardware if it repeats.
            _x(74, "NVLink error", _BAD, XidAction.RESET_GPU),
            # Catalogue: "GPU has fallen off the bus": no longer reachable over PCIe; a reset cannot reach
            # it, the node must be rebooted (and the GPU/riser checked if it repeats).
            _x(79, "GPU has fallen off the bus", _BAD, XidAction.REBOOT),
            # Catalogue: "High single-bit ECC error rate": corrected for now, a sign of failing memory.
            _x(92, "High single-bit ECC error rate", _DEG, XidAction.DRAIN),
            # Memory error guide: 94 = contained ECC error: only the application that touched the row was
            # affected (and killed); others keep running; reset when idle to remap the row.
            _x(94, "Contained ECC error", _DEG, XidAction.RESET_GPU),
            # Memory error guide: 95 = uncontained ECC error: every application on the GPU is affected; the
            # GPU must be reset before use.
            _x(95, "Uncontained ECC error", _BAD, XidAction.RESET_GPU),
            # Catalogue: 119 = "GSP RPC timeout", 120 = "GSP error": the GPU System Processor stopped
            # answering; the driver cannot manage the GPU until it is reset (often only a reboot helps).
            _x(119, "GSP RPC timeout", _BAD, XidAction.RESET_GPU),
            _x(120, "GSP error", _BAD, XidAction.RESET_GPU),
        ]
    )
)


def xid_info(code: int) -> XidInfo:
    """The table's entry; an XID we do not know is treated as suspect hardware until a person looks."""
    known = XID_TABLE.get(code)
    if known is not None:
        return known
    return XidInfo(code, f"XID {code} (not in gpupool's table)", HealthGrade.DEGRADED, XidAction.DRAIN, True)
