"""``ibnetdiscover`` output -> ``Fabric``: the default topology file, ``-g`` (grouping) and ``-p`` (ports).

Decisions, each forced by a fixture or by how infiniband-diags prints:

- GUIDs are normalised to 16 lowercase hex digits. In the default format a node is its node GUID (``"S-..."``,
  ``"H-..."``) and carries the ``sysimgguid`` of its block; the ``-p`` report prints only port GUIDs, so there
  an HCA is its port GUID (a switch's port GUIDs all equal its node GUID, so switches are the same in both
  formats) and a switch's port count is the highest port number seen.
- ``-g`` prints the default format with chassis grouping: ``Chassis N (guid ..)`` and ``Non-Chassis Nodes``
  lines, ``# Spine Nodes``-style comments and ``# Chassis N`` after header lines; none of it changes a node.
- ``--node-name-map`` output is the default format with the map's names as descriptions; a bare name there
  is a host (``attribution``).
- libibnetdisc prints a block for every node it has a port line to, so in the default format a port line
  naming a GUID without a block means a truncated or edited file: a ``ParseError`` at that line.
  A link listed by one side only is kept, with a warning.

Everything after the parse (links, hosts, warnings) is ``_linkdump.assemble``.
"""

from __future__ import annotations

import re
from pathlib import Path

from gpupool.domain.errors import ParseError
from gpupool.fabric.model import Port
from gpupool.fabric.parsers._linkdump import (
    CA,
    KIND_WORD,
    RT,
    SW,
    DumpNode,
    HalfLink,
    IbImport,
    LinkDump,
    assemble,
    link_rate,
    split_switch_description,
)
from gpupool.fabric.parsers._text import guid_from_hex, read_tool_output
from gpupool.fabric.parsers.attribution import NameSources, split_description

__all__ = ["IbImport", "parse_ibnetdiscover", "read_ibnetdiscover", "split_description", "split_switch_description"]

_HEADER_RE = re.compile(
    r"(vendid|devid|sysimgguid|switchguid|caguid|rtguid)=0x([0-9a-fA-F]+)(?:\([0-9a-fA-F]+\))?(?:\s*#.*)?"
)
_GROUP_RE = re.compile(r"Chassis\s+\d+(?:\s+\(.*\))?|Non-Chassis Nodes")
_NODE_RE = re.compile(r'(Switch|Ca|Rt)\s+(\d+)\s+"([SHR])-([0-9a-fA-F]{1,16})"\s*#\s*"(.*)"(.*)')
_SWITCH_TAIL_RE = re.compile(r"\s*(?:enhanced|base)\s+port\s+0\s+lid\s+(\d+)\s+lmc\s+\d+\s*")
_PORT_RE = re.compile(
    r'\[(\d+)\](?:\[ext \d+\])?(?:\(([0-9a-fA-F]{1,16})\))?\s*"([SHR])-([0-9a-fA-F]{1,16})"\[(\d+)\](?:\[ext \d+\])?'
    r'(?:\(([0-9a-fA-F]{1,16})\))?\s*#\s*(?:lid\s+(\d+)\s+lmc\s+\d+\s+)?"(.*)"\s+lid\s+(\d+)\s+(\S+)(?:\s+\w+=\S*)*\s*'
)
_PORTS_START_RE = re.compile(r"(?:SW|CA|RT)\s+\d+\s+\d+\s+0x")
_PORTS_LINE_RE = re.compile(
    r"(SW|CA|RT)\s+(\d+)\s+(\d+)\s+0x([0-9a-fA-F]{1,16})\s+(\S+)\s+(\S+)"
    r"(?:\s+-\s+(SW|CA|RT)\s+(\d+)\s+(\d+)\s+0x([0-9a-fA-F]{1,16})\s+\((.*)\)|(.*))"
)
_QUOTED_PAIR_RE = re.compile(r"\s*'(.*)'\s+-\s+'(.*)'\s*")
_PREFIX_KIND = {"S": SW, "H": CA, "R": RT}
_NODE_KIND = {"Switch": SW, "Ca": CA, "Rt": RT}


# ---------------------------------------------------------------------------------------------- default format


def _parse_default(lines: list[str], source: str) -> LinkDump:
    # One pass over the lines as a small state machine (header lines, a node line, its port lines, a blank
    # line): kept in one function so every state change sits beside the line kind that causes it.
    nodes: list[DumpNode] = []
    halves: list[HalfLink] = []
    declared: dict[str, int] = {}
    cur: tuple[str, str, int, int] | None = None  # kind, guid, port count, lid
    cur_desc = ""
    cur_lid: int | None = None
    header_line = 0  # first line of a block whose Switch/Ca line has not come yet
    sysimg = cur_sysimg = ""  # sysimgguid of the block being read / of the node being read
    seen_as: dict[str, str] = {}  # node GUID -> its description as other nodes' port lines print it

    def close() -> None:
        nonlocal cur
        if cur is not None:
            kind, guid, ports, lid = cur
            nodes.append(DumpNode(kind, guid, cur_desc, ports, lid if cur_lid is None else cur_lid, cur_sysimg))
        cur = None

    for n, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            if header_line:
                raise ParseError(
                    f"node block starting on line {header_line} has no Switch or Ca line", source=source, line=n
                )
            close()
        elif line.startswith("#") or _GROUP_RE.fullmatch(line):
            continue
        elif line.startswith("["):
            if cur is None:
                raise ParseError("port line outside a Switch or Ca block", source=source, line=n)
            m = _PORT_RE.fullmatch(line)
            if m is None:
                raise ParseError(f"cannot parse port line {line!r} (truncated?)", source=source, line=n)
            port = int(m.group(1))
            if not 1 <= port <= cur[2]:
                raise ParseError(f"port {port} outside 1..{cur[2]} of {cur[1]}", source=source, line=n)
            if cur[0] != SW and cur_lid is None and m.group(7) is not None:
                cur_lid = int(m.group(7))
            width, speed = link_rate(m.group(10), source, n)
            remote = Port(guid_from_hex(m.group(4)), int(m.group(5)))
            seen_as.setdefault(remote.node, m.group(8).strip())
            halves.append(HalfLink(Port(cur[1], port), remote, _PREFIX_KIND[m.group(3)], width, speed, n))
        elif (h := _HEADER_RE.fullmatch(line)) is not None:
            close()
            header_line = header_line or n
            if h.group(1) == "sysimgguid":
                sysimg = guid_from_hex(h.group(2))
        else:
            m = _NODE_RE.fullmatch(line)
            if m is None:
                raise ParseError(f"not a line of an ibnetdiscover topology file: {line[:80]!r}", source=source, line=n)
            close()
            kind, guid = _NODE_KIND[m.group(1)], guid_from_hex(m.group(4))
            if _PREFIX_KIND[m.group(3)] != kind:
                raise ParseError(f"{m.group(1)} line names node {m.group(3)}-{m.group(4)}", source=source, line=n)
            if guid in declared:
                raise ParseError(f"node {guid} declared twice (first on line {declared[guid]})", source=source, line=n)
            lid = 0
            if kind == SW:
                tail = _SWITCH_TAIL_RE.fullmatch(m.group(6))
                if tail is None:
                    raise ParseError("Switch line lacks 'port 0 lid N lmc N' (truncated?)", source=source, line=n)
                lid = int(tail.group(1))
            elif m.group(6).strip():
                raise ParseError(
                    f"unexpected text after the description: {m.group(6).strip()!r}", source=source, line=n
                )
            declared[guid] = n
            cur, cur_desc, cur_lid, header_line = (kind, guid, int(m.group(2)), lid), m.group(5).strip(), None, 0
            cur_sysimg, sysimg = sysimg, ""
    if header_line:
        raise ParseError(
            f"file ends inside the node block starting on line {header_line} (truncated?)",
            source=source,
            line=len(lines),
        )
    close()
    renamed = tuple(
        (nd.guid, seen_as[nd.guid]) for nd in nodes if seen_as.get(nd.guid, nd.description) != nd.description
    )
    return LinkDump(tuple(nodes), tuple(halves), ports_report=False, tool_names=renamed)


# ---------------------------------------------------------------------------------------------- -p format


def _split_pair(text: str) -> tuple[str, str]:
    """``'a' - 'b'`` -> ``(a, b)``. Old releases print names unquoted; those split at the first `` - ``."""
    m = _QUOTED_PAIR_RE.fullmatch(text)
    if m is not None:
        return m.group(1).strip(), m.group(2).strip()
    left, _, right = text.partition(" - ")
    return left.strip(), right.strip()


def _unquote(text: str) -> str:
    t = text.strip()
    return t[1:-1].strip() if len(t) >= 2 and t[0] == t[-1] == "'" else t


def _parse_ports(lines: list[str], source: str) -> LinkDump:
    kinds: dict[str, str] = {}
    first: dict[str, int] = {}
    desc: dict[str, str] = {}
    lid: dict[str, int] = {}
    top_port: dict[str, int] = {}
    halves: list[HalfLink] = []

    def see(kind: str, guid: str, node_lid: int, port: int, name: str, n: int) -> None:
        if guid in kinds and kinds[guid] != kind:
            raise ParseError(
                f"GUID {guid} is a {KIND_WORD[kinds[guid]]} on line {first[guid]} and a {KIND_WORD[kind]} here",
                source=source,
                line=n,
            )
        if guid not in kinds:
            kinds[guid], first[guid], lid[guid], top_port[guid] = kind, n, node_lid, port
        top_port[guid] = max(top_port[guid], port)
        if name and not desc.get(guid):
            desc[guid] = name

    for n, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _PORTS_LINE_RE.fullmatch(line)
        if m is None or (m.group(12) is not None and re.match(r"-\s+(?:SW|CA|RT)\b", m.group(12).strip())):
            raise ParseError(f"not a line of an ibnetdiscover -p report: {line[:80]!r}", source=source, line=n)
        kind, guid, port = m.group(1), guid_from_hex(m.group(4)), int(m.group(3))
        if m.group(7) is None:
            see(kind, guid, int(m.group(2)), port, _unquote(m.group(12)), n)
            continue
        name, remote_name = _split_pair(m.group(11))
        rkind, rguid, rport = m.group(7), guid_from_hex(m.group(10)), int(m.group(9))
        see(kind, guid, int(m.group(2)), port, name, n)
        see(rkind, rguid, int(m.group(8)), rport, remote_name, n)
        width, speed = link_rate(f"{m.group(5)}{m.group(6)}", source, n)
        halves.append(HalfLink(Port(guid, port), Port(rguid, rport), rkind, width, speed, n))
    nodes = tuple(DumpNode(k, g, desc.get(g, ""), top_port[g], lid[g]) for g, k in kinds.items())
    return LinkDump(nodes, tuple(halves), ports_report=True)


# ---------------------------------------------------------------------------------------------- public API


def parse_ibnetdiscover(
    text: str,
    *,
    source: str = "<ibnetdiscover>",
    names: NameSources | None = None,
    allow_unknown_guids: bool = False,
) -> IbImport:
    """Import any ``ibnetdiscover`` format (detected from the first non-comment line).

    ``names`` brings a node-name map (replacing switch and CA descriptions), a host map and domain
    stripping; see ``attribution`` for how hosts are found. A map entry whose GUID is not in the dump is a
    ``ParseError`` at its line unless ``allow_unknown_guids`` (a site-wide map).
    """
    lines = [line.rstrip("\r") for line in text.split("\n")]
    if lines and not lines[-1]:
        lines.pop()  # the newline that ends the last line starts no line of its own
    first = next((s for s in (line.strip() for line in lines) if s and not s.startswith("#")), "")
    dump = _parse_ports(lines, source) if _PORTS_START_RE.match(first) else _parse_default(lines, source)
    if not dump.nodes:
        raise ParseError(
            "no nodes: neither a Switch/Ca block nor a -p port line", source=source, line=max(1, len(lines))
        )
    return assemble(dump, source, names or NameSources(), allow_unknown_guids=allow_unknown_guids)


def read_ibnetdiscover(
    path: str | Path, *, names: NameSources | None = None, allow_unknown_guids: bool = False
) -> IbImport:
    return parse_ibnetdiscover(
        read_tool_output(path), source=str(path), names=names, allow_unknown_guids=allow_unknown_guids
    )
