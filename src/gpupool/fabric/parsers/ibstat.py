"""``ibstat`` and ``ibstatus`` (infiniband-diags): the host's channel adapters, their ports and link state.

``ibstat`` prints one ``CA '<name>'`` block per adapter with indented ``Key: value`` lines and one ``Port N:``
block per port. When a device vanishes mid-run it prints what it has, then ``ibpanic: ...`` and exits 255;
``parse_ibstat_report`` keeps the complete adapters before the panic and returns the message with them, while
``parse_ibstat`` refuses such output. ``ibstatus`` is a different script (one block per port, rate as
``200 Gb/sec (4X HDR)``) and lacks the adapter's type, firmware and node GUID; it yields the same types.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpupool.domain.errors import ParseError
from gpupool.fabric.model import Hca
from gpupool.fabric.parsers._text import normalise_guid
from gpupool.fabric.rates import LANE_GBPS

_CA_RE = re.compile(r"^CA '([^']+)'$")
_PORT_RE = re.compile(r"^Port (\d+):$")
_KV_RE = re.compile(r"^([A-Za-z][A-Za-z_ ]*?):\s*(.*)$")
_DIAG_RE = re.compile(r"^(ibpanic|ibwarn|iberror|ibstat)\b.*:")
_FATAL_RE = re.compile(r"^(ibpanic|iberror)\b")
_IBSTATUS_RE = re.compile(r"^Infiniband device '([^']+)' port (\d+) status:$")
_RATE_TEXT_RE = re.compile(r"^(\d+(?:\.\d+)?) Gb/sec \((\d+)X(?: ([A-Z0-9]+))?\)$")
_STATE_RE = re.compile(r"^(\d+): (\S.*)$")
_NUMBER_RE = re.compile(r"^\d+(?:\.\d+)?$")

_CA_REQUIRED = ("CA type", "Number of ports", "Node GUID")
_PORT_REQUIRED = ("State", "Physical state", "Rate", "Port GUID", "Link layer")


@dataclass(frozen=True, slots=True)
class IbPort:
    ca: str  # device name of the adapter, "mlx5_0"
    port: int
    state: str  # as printed: "Active" (ibstat) or "ACTIVE" (ibstatus)
    physical_state: str  # "LinkUp"
    rate_gbps: float
    link_layer: str  # "InfiniBand" or "Ethernet"
    base_lid: int = 0
    sm_lid: int = 0
    lmc: int = 0
    port_guid: str = ""  # 16 lowercase hex digits
    capability_mask: str = ""
    width: int | None = None  # only ibstatus prints width and speed
    speed: str | None = None

    @property
    def active(self) -> bool:
        return self.state.upper() == "ACTIVE"

    @property
    def infiniband(self) -> bool:
        return self.link_layer.lower() == "infiniband"


@dataclass(frozen=True, slots=True)
class IbCa:
    name: str
    ports: tuple[IbPort, ...]
    ca_type: str = ""  # "MT4129"; "" from ibstatus
    firmware: str = ""
    hardware: str = ""
    node_guid: str = ""  # 16 lowercase hex digits; "" from ibstatus
    system_image_guid: str = ""


@dataclass(frozen=True, slots=True)
class IbstatReport:
    cas: tuple[IbCa, ...]
    diagnostics: tuple[tuple[int, str], ...]  # (line, message) of ibpanic/iberror/ibwarn lines

    @property
    def complete(self) -> bool:
        """False when the run died part way (``ibpanic``/``iberror``): adapters after it are missing."""
        return not any(_FATAL_RE.match(message) for _, message in self.diagnostics)


def ib_ports(cas: Iterable[IbCa], include_ethernet: bool = False) -> tuple[IbPort, ...]:
    """All ports of ``cas``; Ethernet (RoCE) ports only when asked, since IB placement cannot use them."""
    return tuple(p for ca in cas for p in ca.ports if include_ethernet or p.infiniband)


def hcas_from_ibstat(cas: Iterable[IbCa], host: str | None = None) -> tuple[Hca, ...]:
    """The fabric's ``Hca`` per adapter with an InfiniBand port; LID and rate come from its first IB port."""
    out: list[Hca] = []
    for ca in cas:
        ib = [p for p in ca.ports if p.infiniband]
        if not ib:
            continue
        if not ca.node_guid:
            raise ParseError(f"{ca.name} has no node GUID (ibstatus output cannot name an HCA)", source=ca.name)
        out.append(Hca(guid=ca.node_guid, name=ca.name, lid=ib[0].base_lid, rate_gbps=ib[0].rate_gbps, host=host))
    return tuple(out)


def _guid(value: str, what: str, source: str, line: int) -> str:
    guid = normalise_guid(value)
    if guid is None or not value.startswith("0x"):
        raise ParseError(f"{what} {value!r} is not a 0x-prefixed 64-bit GUID", source=source, line=line)
    return guid


def _int(value: str, what: str, source: str, line: int, base: int = 10) -> int:
    try:
        return int(value, base)
    except ValueError:
        raise ParseError(f"{what} {value!r} is not a number", source=source, line=line) from None


class _Block:
    """Key/value lines of one CA or port, remembering where each was, so errors can point at them."""

    def __init__(self, name: str, line: int) -> None:
        self.name = name
        self.line = line
        self.values: dict[str, tuple[str, int]] = {}

    def get(self, key: str, source: str, *, required: bool = True) -> tuple[str, int]:
        if key in self.values:
            return self.values[key]
        if required:
            raise ParseError(f"{self.name} has no '{key}' line (truncated output?)", source=source, line=self.line)
        return "", self.line


def _build_port(ca: str, number: int, b: _Block, source: str) -> IbPort:
    for key in _PORT_REQUIRED:
        b.get(key, source)
    rate, rate_line = b.values["Rate"]
    if not _NUMBER_RE.match(rate):
        raise ParseError(f"Rate {rate!r} is not a number of Gb/s", source=source, line=rate_line)
    guid, guid_line = b.values["Port GUID"]
    lid, lid_line = b.get("Base lid", source, required=False)
    sm, sm_line = b.get("SM lid", source, required=False)
    lmc, lmc_line = b.get("LMC", source, required=False)
    return IbPort(
        ca=ca,
        port=number,
        state=b.values["State"][0],
        physical_state=b.values["Physical state"][0],
        rate_gbps=float(rate),
        link_layer=b.values["Link layer"][0],
        base_lid=_int(lid, "Base lid", source, lid_line) if lid else 0,
        sm_lid=_int(sm, "SM lid", source, sm_line) if sm else 0,
        lmc=_int(lmc, "LMC", source, lmc_line) if lmc else 0,
        port_guid=_guid(guid, "Port GUID", source, guid_line),
        capability_mask=b.get("Capability mask", source, required=False)[0],
    )


def _build_ca(name: str, ca: _Block, ports: list[tuple[int, _Block]], source: str) -> IbCa:
    for key in _CA_REQUIRED:
        ca.get(key, source)
    declared, declared_line = ca.values["Number of ports"]
    if _int(declared, "Number of ports", source, declared_line) != len(ports):
        raise ParseError(
            f"{ca.name} declares {declared} ports but lists {len(ports)} (truncated output?)",
            source=source,
            line=declared_line,
        )
    node_guid, node_line = ca.values["Node GUID"]
    image, image_line = ca.get("System image GUID", source, required=False)
    return IbCa(
        name=name,
        ports=tuple(_build_port(name, n, b, source) for n, b in ports),
        ca_type=ca.values["CA type"][0],
        firmware=ca.get("Firmware version", source, required=False)[0],
        hardware=ca.get("Hardware version", source, required=False)[0],
        node_guid=_guid(node_guid, "Node GUID", source, node_line),
        system_image_guid=_guid(image, "System image GUID", source, image_line) if image else "",
    )


def _indent(line: str) -> int:
    return len(line.expandtabs(8)) - len(line.lstrip())


def parse_ibstat_report(text: str, *, source: str = "<ibstat>") -> IbstatReport:
    """Parse ``ibstat``, keeping the adapters a failed run printed in full before its ``ibpanic`` line."""
    cas: list[IbCa] = []
    diagnostics: list[tuple[int, str]] = []
    name = ""
    ca: _Block | None = None
    ports: list[tuple[int, _Block]] = []
    port: _Block | None = None
    port_indent = 0
    for no, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip():
            continue
        if not line[0].isspace():
            if _DIAG_RE.match(line):
                diagnostics.append((no, line))
                continue
            if any(_FATAL_RE.match(msg) for _, msg in diagnostics):
                raise ParseError("output continues after an ibpanic line", source=source, line=no)
            m = _CA_RE.match(line)
            if m is None:
                raise ParseError(f"not an ibstat line: {line[:60]!r}", source=source, line=no)
            if ca is not None:
                cas.append(_build_ca(name, ca, ports, source))
            name, ca, ports, port = m.group(1), _Block(f"CA '{m.group(1)}'", no), [], None
            continue
        if ca is None:
            raise ParseError("indented line before the first CA", source=source, line=no)
        stripped = line.strip()
        pm = _PORT_RE.match(stripped)
        if pm is not None:
            port, port_indent = _Block(f"CA '{name}' port {pm.group(1)}", no), _indent(line)
            ports.append((int(pm.group(1)), port))
            continue
        kv = _KV_RE.match(stripped)
        if kv is None:
            raise ParseError(f"not an ibstat line: {stripped[:60]!r}", source=source, line=no)
        # A port's lines are indented one level deeper than its "Port N:" line and the CA's own keys.
        target = port if port is not None and _indent(line) > port_indent else ca
        target.values[kv.group(1)] = (kv.group(2).strip(), no)
    if ca is not None:
        cas.append(_build_ca(name, ca, ports, source))
    if not cas and not diagnostics:
        raise ParseError("no CA found (empty or not ibstat output)", source=source, line=None)
    return IbstatReport(cas=tuple(cas), diagnostics=tuple(diagnostics))


def parse_ibstat(text: str, *, source: str = "<ibstat>") -> tuple[IbCa, ...]:
    """Parse ``ibstat``; output of a failed run (an ``ibpanic`` line) is refused: use the report form."""
    report = parse_ibstat_report(text, source=source)
    for line, message in report.diagnostics:
        if not _FATAL_RE.match(message):
            continue
        raise ParseError(f"ibstat failed part way: {message}", source=source, line=line)
    return report.cas


def parse_rate_text(value: str, *, source: str, line: int | None) -> tuple[float, int, str | None]:
    """``"400 Gb/sec (4X NDR)"`` -> ``(400.0, 4, "NDR")``, the sysfs and ibstatus form of a port's rate."""
    m = _RATE_TEXT_RE.match(value.strip())
    if m is None:
        raise ParseError(f"rate {value!r} is not like '400 Gb/sec (4X NDR)'", source=source, line=line)
    speed = m.group(3)
    if speed is not None and speed not in LANE_GBPS:
        raise ParseError(f"unknown link speed {speed!r} in rate {value!r}", source=source, line=line)
    return float(m.group(1)), int(m.group(2)), speed


def parse_state_text(value: str, what: str, *, source: str, line: int | None) -> tuple[int, str]:
    """``"4: ACTIVE"`` -> ``(4, "ACTIVE")``, the sysfs and ibstatus form of a port state."""
    m = _STATE_RE.match(value.strip())
    if m is None:
        raise ParseError(f"{what} {value!r} is not like '4: ACTIVE'", source=source, line=line)
    return int(m.group(1)), m.group(2)


def _gid_port_guid(gid: str, source: str, line: int) -> str:
    groups = gid.split(":")
    if len(groups) != 8 or not all(re.fullmatch(r"[0-9a-fA-F]{4}", g) for g in groups):
        raise ParseError(f"default gid {gid!r} is not eight groups of four hex digits", source=source, line=line)
    return "".join(groups[4:]).lower()


def parse_ibstatus(text: str, *, source: str = "<ibstatus>") -> tuple[IbCa, ...]:
    """Parse ``ibstatus`` into adapters (grouped by device, in order seen) with only port facts filled in."""
    blocks: list[tuple[str, int, _Block]] = []
    current: _Block | None = None
    for no, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip():
            continue
        m = _IBSTATUS_RE.match(line)
        if m is not None:
            current = _Block(f"device '{m.group(1)}' port {m.group(2)}", no)
            blocks.append((m.group(1), int(m.group(2)), current))
            continue
        kv = _KV_RE.match(line.strip())
        if current is None or not line[0].isspace() or kv is None:
            raise ParseError(f"not an ibstatus line: {line.strip()[:60]!r}", source=source, line=no)
        current.values[kv.group(1)] = (kv.group(2).strip(), no)
    if not blocks:
        raise ParseError("no 'Infiniband device' block (empty or not ibstatus output)", source=source, line=None)
    by_ca: dict[str, list[IbPort]] = {}
    for ca, number, b in blocks:
        for key in ("state", "phys state", "rate", "link_layer"):
            b.get(key, source)
        _, state = parse_state_text(b.values["state"][0], "state", source=source, line=b.values["state"][1])
        _, phys = parse_state_text(
            b.values["phys state"][0], "phys state", source=source, line=b.values["phys state"][1]
        )
        gbps, width, speed = parse_rate_text(b.values["rate"][0], source=source, line=b.values["rate"][1])
        gid, gid_line = b.get("default gid", source, required=False)
        lid, lid_line = b.get("base lid", source, required=False)
        sm, sm_line = b.get("sm lid", source, required=False)
        by_ca.setdefault(ca, []).append(
            IbPort(
                ca=ca,
                port=number,
                state=state,
                physical_state=phys,
                rate_gbps=gbps,
                link_layer=b.values["link_layer"][0],
                base_lid=_int(lid, "base lid", source, lid_line, 16) if lid else 0,
                sm_lid=_int(sm, "sm lid", source, sm_line, 16) if sm else 0,
                # ibstatus prints "unknown" when the port has no GID (an Ethernet port without an address).
                port_guid=_gid_port_guid(gid, source, gid_line) if gid and gid != "unknown" else "",
                width=width,
                speed=speed,
            )
        )
    return tuple(IbCa(name=ca, ports=tuple(ports)) for ca, ports in by_ca.items())
