"""XID events from the kernel log: ``NVRM: Xid (PCI:0000:9b:00): 119, pid=..., name=..., <message>`` lines.

The reader tails a file (``/var/log/kern.log``, or ``dmesg`` output saved to a file), remembers how far it
has read so each event is returned once, and starts again from the top when the file was rotated (a new
inode) or truncated (shorter than the offset, or its first bytes changed under us).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpupool.domain.errors import ParseError

# The driver prints the bus id without the function (PCI:0000:9b:00); old drivers omit the "PCI:" prefix.
_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.\d)?\): ?(?P<rest>.*)$"
)
_CODE_RE = re.compile(r"^(?P<code>\d+)(?:,|$)\s*(?P<tail>.*)$")
_PID_RE = re.compile(r"^pid=(?P<pid>'?<unknown>'?|\d+),\s*(?P<tail>.*)$")
_NAME_RE = re.compile(r"^name=(?P<name>[^,]*),\s*(?P<tail>.*)$")
_STAMP_RE = re.compile(r"^(?P<stamp>\[[^\]]*\]|\S+\s+\d+\s+[\d:]+\s+\S+\s+kernel:)\s*")
_BUS_RE = re.compile(r"^(?:PCI:)?([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.([0-7]))?$")
_FINGERPRINT_BYTES = 256


def pci_key(bus_id: str) -> str:
    """One spelling of a PCI address for matching: ``00000000:9B:00.0`` and ``PCI:0000:9b:00`` -> ``0000:9b:00``."""
    m = _BUS_RE.match(bus_id.strip())
    if m is None:
        raise ParseError(f"not a PCI bus id: {bus_id!r}", source="pci bus id")
    return f"{int(m.group(1), 16):04x}:{int(m.group(2), 16):02x}:{int(m.group(3), 16):02x}"


@dataclass(frozen=True, slots=True)
class XidEvent:
    code: int
    pci_bus_id: str  # as pci_key spells it
    gpu_index: int | None  # None: the bus id is not in the inventory
    pid: int | None = None
    process: str | None = None
    message: str = ""
    stamp: str = ""  # the log's own time prefix, verbatim ("[Sun Feb 23 16:24:18 2025]"); "" for NVML events


def parse_xid_line(
    line: str, bus_to_index: Mapping[str, int], *, source: str = "<kernel log>", line_no: int | None = None
) -> XidEvent | None:
    """The event on ``line``; None for every other kernel line. An ``NVRM: Xid`` line we cannot read raises."""
    m = _XID_RE.search(line)
    if m is None:
        if "NVRM: Xid" in line:
            raise ParseError(f"unreadable NVRM: Xid line: {line.strip()[:80]!r}", source=source, line=line_no)
        return None
    c = _CODE_RE.match(m.group("rest"))
    if c is None:
        raise ParseError(f"NVRM: Xid line without an XID number: {line.strip()[:80]!r}", source=source, line=line_no)
    tail = c.group("tail")
    pid: int | None = None
    name: str | None = None
    p = _PID_RE.match(tail)
    if p is not None:
        pid = int(p.group("pid")) if p.group("pid").isdigit() else None
        tail = p.group("tail")
        n = _NAME_RE.match(tail)
        if n is not None:
            name = n.group("name").strip() or None
            if name in ("<unknown>", "'<unknown>'"):
                name = None
            tail = n.group("tail")
    stamp_m = _STAMP_RE.match(line)
    bus = pci_key(m.group("bus"))
    return XidEvent(
        code=int(c.group("code")),
        pci_bus_id=bus,
        gpu_index=bus_to_index.get(bus),
        pid=pid,
        process=name,
        message=tail.strip(),
        stamp=stamp_m.group("stamp") if stamp_m else "",
    )


class KernelLogXidReader:
    """Tails one kernel log file; ``read()`` returns the XID events written since the previous call.

    ``bus_to_index`` maps ``pci_key`` spellings to GPU indices (from the inventory). With ``from_end`` the
    first read skips what is already in the file: an agent that starts must not re-report the XIDs of an
    earlier boot. A partial last line (the kernel still writing it) waits for its newline.
    """

    def __init__(self, path: str | Path, bus_to_index: Mapping[str, int] | None = None, *, from_end: bool = False):
        self.path = Path(path)
        self.bus_to_index: Mapping[str, int] = dict(bus_to_index or {})
        self._offset = 0
        self._line_no = 0
        self._inode: int | None = None
        self._fingerprint = b""
        self._skip_existing = from_end
        self.errors: tuple[ParseError, ...] = ()  # unreadable Xid lines of the last read; they are skipped

    def _restart(self) -> None:
        self._offset = 0
        self._line_no = 0
        self._fingerprint = b""

    def read(self) -> tuple[XidEvent, ...]:
        self.errors = ()
        try:
            f = self.path.open("rb")
        except FileNotFoundError:
            self._restart()  # rotated away and not yet recreated: the new file starts from its top
            self._inode = None
            return ()
        with f:
            st = os.fstat(f.fileno())
            head = f.read(_FINGERPRINT_BYTES)
            if self._inode is not None and st.st_ino != self._inode:
                self._restart()  # rotated: a different file under the same name
            elif st.st_size < self._offset or head[: len(self._fingerprint)] != self._fingerprint:
                self._restart()  # truncated (copytruncate) or rewritten from the top
            self._inode = st.st_ino
            f.seek(self._offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        if self._skip_existing:
            self._skip_existing = False
            self._line_no += chunk[:end].count(b"\n")
            self._offset += end
            self._fingerprint = head[: min(self._offset, _FINGERPRINT_BYTES)]
            return ()
        if end == 0:
            return ()
        events: list[XidEvent] = []
        errors: list[ParseError] = []
        for raw in chunk[:end].split(b"\n")[:-1]:
            self._line_no += 1
            text = raw.decode("utf-8", errors="replace")
            if "NVRM: Xid" not in text:
                continue
            try:
                ev = parse_xid_line(text, self.bus_to_index, source=str(self.path), line_no=self._line_no)
            except ParseError as e:
                errors.append(e)  # one odd line must not stop the agent from seeing the next fault
                continue
            if ev is not None:
                events.append(ev)
        self._offset += end
        if len(self._fingerprint) < _FINGERPRINT_BYTES:
            self._fingerprint = head[: min(self._offset, _FINGERPRINT_BYTES)]
        self.errors = tuple(errors)
        return tuple(events)
