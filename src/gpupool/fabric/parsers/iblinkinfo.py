"""``iblinkinfo`` output -> ``Fabric``: the default (sections per node) and the ``-l`` (one line per port) forms.

What infiniband-diags prints, and what follows from it:

- Default form: a ``Switch: 0x<node GUID> <description>:`` or ``CA: <description>:`` header, then a line per
  port: ``<LID> <port>[<ext>] ==( <width> <lane rate> Gbps <state>/ <phys state>)==> <peer LID> <peer
  port>[<ext>] "<peer description>" ( <what it could be> )``; a CA's port lines start with the port GUID.
  The peer is named by LID and port only, so a link is joined through LIDs: a file taken without a subnet
  manager (every LID 0) cannot be joined and is refused; ``-l`` names peers by GUID.
- ``-l``: ``0x<GUID> "<description, right-aligned in 30 columns>" <LID> <port>[..] ==( .. )==> 0x<peer GUID>
  <peer LID> <peer port>[..] "<peer description>" ( .. )``.
- A CA is known by its port GUID in both forms (as in ``ibnetdiscover -p``): a CA with two cabled ports is
  two CAs here. A switch by its node GUID, its port count the highest port listed.
- The lane rate is printed in Gb/s (``53.125`` is HDR, ``106.25`` NDR); a port that is down has no peer
  and no link. A rate that is not an InfiniBand lane rate is a ``ParseError`` at its line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gpupool.domain.errors import ParseError
from gpupool.fabric.model import Port
from gpupool.fabric.parsers._linkdump import CA, SW, DumpNode, HalfLink, IbImport, LinkDump, assemble
from gpupool.fabric.parsers._text import guid_from_hex, read_tool_output
from gpupool.fabric.parsers.attribution import NameSources

__all__ = ["LANE_RATES", "parse_iblinkinfo", "read_iblinkinfo"]

# Lane rates as iblinkinfo prints them (Gb/s, with the 64b/66b encoding of FDR and later in the figure).
LANE_RATES = {
    "2.5": "SDR",
    "5.0": "DDR",
    "10.0": "QDR",
    "10.3125": "FDR10",
    "14.0625": "FDR",
    "25.78125": "EDR",
    "53.125": "HDR",
    "106.25": "NDR",
    "212.5": "XDR",
}
_SWITCH_HEAD_RE = re.compile(r"Switch:\s+0x([0-9a-fA-F]{1,16})\s+(.*):")
_CA_HEAD_RE = re.compile(r"CA:\s+(.*):")
_LINK_RE = r"==\(\s*(?:(\d+)X\s+(\S+)\s+Gbps\s+)?([A-Za-z]+)/\s*([A-Za-z]+)\s*\)==>"
_PEER_RE = r'(?:\s*(?:0x([0-9a-fA-F]{1,16})\s+)?(\d+)\s+(\d+)\[[^\]]*\]\s+"(.*)"|\s*\[[^\]]*\]\s+"")\s*\((.*)\)'
_DEFAULT_PORT_RE = re.compile(r"(?:0x([0-9a-fA-F]{1,16})\s+)?(\d+)\s+(\d+)\[[^\]]*\]\s*" + _LINK_RE + _PEER_RE)
_LINE_RE = re.compile(r'0x([0-9a-fA-F]{1,16})\s+"(.*?)"\s+(\d+)\s+(\d+)\[[^\]]*\]\s*' + _LINK_RE + _PEER_RE)


@dataclass
class _Port:
    kind: str
    guid: str
    description: str
    lid: int
    port: int
    width: int
    speed: str | None
    peer_guid: str | None  # -l only
    peer_lid: int | None
    peer_port: int | None
    peer_description: str
    line: int


def _speed(token: str | None, source: str, n: int) -> str | None:
    if token is None:
        return None
    speed = LANE_RATES.get(token)
    if speed is None:
        raise ParseError(f"unknown lane rate {token} Gbps", source=source, line=n)
    return speed


def _ports(lines: list[str], source: str) -> tuple[list[_Port], bool]:
    ports: list[_Port] = []
    head: tuple[str, str, str] | None = None  # kind, node GUID (switches), description
    line_mode = False
    for n, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if m := _SWITCH_HEAD_RE.fullmatch(line):
            head = (SW, guid_from_hex(m.group(1)), m.group(2).strip())
            continue
        if (m := _CA_HEAD_RE.fullmatch(line)) and "==(" not in line:
            head = (CA, "", m.group(1).strip())
            continue
        if m := _LINE_RE.fullmatch(line):
            line_mode = True
            guid, desc, lid, port = guid_from_hex(m.group(1)), m.group(2).strip(), int(m.group(3)), int(m.group(4))
            g = m.groups()[4:]
        elif (m := _DEFAULT_PORT_RE.fullmatch(line)) and head is not None:
            if head[0] == CA and m.group(1) is None:
                raise ParseError("a CA's port line must start with its port GUID", source=source, line=n)
            guid = head[1] if head[0] == SW else guid_from_hex(m.group(1))
            desc, lid, port = head[2], int(m.group(2)), int(m.group(3))
            g = m.groups()[3:]
        else:
            raise ParseError(f"not a line of iblinkinfo output: {line[:80]!r} (truncated?)", source=source, line=n)
        width, rate, _state, _phys, peer_guid, peer_lid, peer_port, peer_desc, _could = g
        kind = head[0] if not line_mode and head is not None else ""
        if peer_lid is None:
            continue  # a port without a cable
        ports.append(
            _Port(
                kind,
                guid,
                desc,
                lid,
                port,
                int(width) if width else 4,
                _speed(rate, source, n),
                guid_from_hex(peer_guid) if peer_guid else None,
                int(peer_lid),
                int(peer_port),
                peer_desc.strip(),
                n,
            )
        )
    return ports, line_mode


def _dump_line_mode(ports: list[_Port], source: str) -> LinkDump:
    """``-l`` names no node kind: a GUID seen on more than one port (its own lines, or as a peer) is a switch
    (a CA is known per port GUID, so each CA "node" has one port), as is one described ``MF0;..``."""
    seen: dict[str, set[int]] = {}
    top: dict[str, int] = {}
    for p in ports:
        seen.setdefault(p.guid, set()).add(p.port)
        top[p.guid] = max(top.get(p.guid, 0), p.port)
        if p.peer_guid is None or p.peer_port is None:
            raise ParseError("-l line without a peer GUID", source=source, line=p.line)
        seen.setdefault(p.peer_guid, set()).add(p.peer_port)
    switch_named = {p.guid for p in ports if p.description.startswith("MF0;")}
    kind = {g: SW if len(ps) > 1 or g in switch_named else CA for g, ps in seen.items()}
    halves = [
        HalfLink(Port(p.guid, p.port), Port(p.peer_guid, p.peer_port), kind[p.peer_guid], p.width, p.speed, p.line)
        for p in ports
        if p.peer_guid is not None and p.peer_port is not None
    ]
    nodes: dict[str, DumpNode] = {}
    for p in ports:
        nodes.setdefault(p.guid, DumpNode(kind[p.guid], p.guid, p.description, top[p.guid], p.lid))
    return LinkDump(tuple(nodes.values()), tuple(halves), ports_report=True)


def _dump_sections(ports: list[_Port], source: str) -> LinkDump:
    """Default form: peers are (LID, port); a switch LID names the switch, a CA (LID, port) its port GUID."""
    switch_lid: dict[int, str] = {}
    ca_port: dict[tuple[int, int], str] = {}
    top: dict[str, int] = {}
    nodes: dict[str, DumpNode] = {}
    for p in ports:
        top[p.guid] = max(top.get(p.guid, 0), p.port)
        if p.kind == SW:
            switch_lid[p.lid] = p.guid
        else:
            ca_port[(p.lid, p.port)] = p.guid
    if ports and all(p.lid == 0 for p in ports):
        raise ParseError(
            "every LID is 0 (no subnet manager ran), so links cannot be joined; take iblinkinfo -l instead",
            source=source,
            line=ports[0].line,
        )
    halves: list[HalfLink] = []
    for p in ports:
        assert p.peer_lid is not None and p.peer_port is not None
        peer = switch_lid.get(p.peer_lid)
        peer_kind = SW
        if peer is None:
            peer, peer_kind = ca_port.get((p.peer_lid, p.peer_port)), CA
        if peer is None:
            raise ParseError(
                f"peer LID {p.peer_lid} port {p.peer_port} ({p.peer_description!r}) has no section of its own "
                "(truncated?)",
                source=source,
                line=p.line,
            )
        halves.append(HalfLink(Port(p.guid, p.port), Port(peer, p.peer_port), peer_kind, p.width, p.speed, p.line))
        nodes.setdefault(p.guid, DumpNode(p.kind, p.guid, p.description, top[p.guid], p.lid))
    return LinkDump(tuple(nodes.values()), tuple(halves), ports_report=True)


def parse_iblinkinfo(
    text: str, *, source: str = "<iblinkinfo>", names: NameSources | None = None, allow_unknown_guids: bool = False
) -> IbImport:
    """Import ``iblinkinfo`` or ``iblinkinfo -l`` output (detected from the lines)."""
    lines = [line.rstrip("\r") for line in text.split("\n")]
    ports, line_mode = _ports(lines, source)
    if not ports:
        raise ParseError(
            "no cabled port: not iblinkinfo output, or every port is down", source=source, line=max(1, len(lines))
        )
    dump = _dump_line_mode(ports, source) if line_mode else _dump_sections(ports, source)
    return assemble(dump, source, names or NameSources(), allow_unknown_guids=allow_unknown_guids)


def read_iblinkinfo(
    path: str | Path, *, names: NameSources | None = None, allow_unknown_guids: bool = False
) -> IbImport:
    return parse_iblinkinfo(
        read_tool_output(path), source=str(path), names=names, allow_unknown_guids=allow_unknown_guids
    )
