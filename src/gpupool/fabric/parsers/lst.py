"""LST link lists -> ``Fabric``: opensm's ``opensm-subnet.lst`` and ibdiagnet's ``ibdiagnet2.lst``.

Both tools write the same line per cabled port (opensm's ``osm_dump.c``; ibdiagnet documents its
``ibdiagnet2.lst`` as "Fabric link list in LST format"), one side of a link per line:

    { CA Ports:01 SystemGUID:b8cef60300c00000 NodeGUID:b8cef60300c00001 PortGUID:b8cef60300c00002
      VenID:000000 DevID:0000 Rev:000000A1 {gpu-a01 mlx5_0} LID:0008 PN:01 } { SW ... } PHY=4x LOG=ACT SPD=50

(one line in the file). Ports, LID and PN are hexadecimal; the node type is ``SW``, ``CA`` or ``Rt``, with
``-SM`` appended on the node the subnet manager runs on; ``SPD`` is the lane rate in Gb/s as the IB spec
names it (``2.5`` SDR ... ``50`` HDR, ``100`` NDR, ``FDR10``, ``??`` unknown). Copies of ibdiagnet2.lst
have been seen without the ``{description}`` of a node that has none; that is read as an empty description. A node is its node GUID and
carries its system image GUID, so HCAs of one machine can be grouped as in ``ibnetdiscover``. A link whose
logical state is ``DWN`` is not a link.
"""

from __future__ import annotations

import re
from pathlib import Path

from gpupool.domain.errors import ParseError
from gpupool.fabric.model import Port
from gpupool.fabric.parsers._linkdump import CA, RT, SW, DumpNode, HalfLink, IbImport, LinkDump, assemble
from gpupool.fabric.parsers._text import guid_from_hex, read_tool_output
from gpupool.fabric.parsers.attribution import NameSources

__all__ = ["LST_SPEEDS", "parse_lst", "read_lst"]

LST_SPEEDS = {
    "2.5": "SDR",
    "5": "DDR",
    "10": "QDR",
    "FDR10": "FDR10",
    "14": "FDR",
    "25": "EDR",
    "50": "HDR",
    "100": "NDR",
    "200": "XDR",
}
_KINDS = {"SW": SW, "CA": CA, "Rt": RT}
_END = (
    r"\{\s*(SW|CA|Rt)(?:-SM)?\s+Ports:([0-9a-fA-F]+)\s+SystemGUID:([0-9a-fA-F]{1,16})\s+NodeGUID:([0-9a-fA-F]{1,16})"
    r"\s+PortGUID:([0-9a-fA-F]{1,16})\s+VenID:[0-9a-fA-F]+\s+DevID:[0-9a-fA-F]+\s+Rev:[0-9a-fA-F]+(?:\s+\{(.*?)\})?"
    r"\s+LID:([0-9a-fA-F]+)\s+PN:([0-9a-fA-F]+)\s*\}"
)
_LINE_RE = re.compile(_END + r"\s*" + _END + r"\s*PHY=(\d+)x\s+LOG=(ACT|ARM|INI|DWN)\s+SPD=(\S+)")


def parse_lst(
    text: str, *, source: str = "<lst>", names: NameSources | None = None, allow_unknown_guids: bool = False
) -> IbImport:
    """Import an ``opensm-subnet.lst`` / ``ibdiagnet2.lst`` link list."""
    nodes: dict[str, DumpNode] = {}
    first: dict[str, int] = {}
    halves: list[HalfLink] = []
    n = 0
    for n, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE_RE.fullmatch(line)
        if m is None:
            raise ParseError(f"not a line of an LST link list: {line[:80]!r} (truncated?)", source=source, line=n)
        ends = []
        for off in (0, 8):
            kind, ports, sysguid, guid, _port_guid, desc, lid, pn = m.groups()[off : off + 8]
            node = DumpNode(
                _KINDS[kind],
                guid_from_hex(guid),
                (desc or "").strip(),
                int(ports, 16),
                int(lid, 16),
                guid_from_hex(sysguid),
            )
            prev = nodes.get(node.guid)
            if prev is not None and (prev.kind, prev.description, prev.ports) != (
                node.kind,
                node.description,
                node.ports,
            ):
                raise ParseError(
                    f"node {node.guid} is described differently here than on line {first[node.guid]}",
                    source=source,
                    line=n,
                )
            if prev is None:
                nodes[node.guid], first[node.guid] = node, n
            ends.append((node, int(pn, 16)))
        width, state, spd = int(m.group(17)), m.group(18), m.group(19)
        if state == "DWN":
            continue
        if spd != "??" and spd not in LST_SPEEDS:
            raise ParseError(f"unknown link speed SPD={spd}", source=source, line=n)
        (a, pa), (b, pb) = ends
        halves.append(HalfLink(Port(a.guid, pa), Port(b.guid, pb), b.kind, width, LST_SPEEDS.get(spd), n))
    if not nodes:
        raise ParseError("no links: not an LST link list", source=source, line=max(1, n))
    dump = LinkDump(tuple(nodes.values()), tuple(halves), ports_report=False)
    return assemble(dump, source, names or NameSources(), allow_unknown_guids=allow_unknown_guids)


def read_lst(path: str | Path, *, names: NameSources | None = None, allow_unknown_guids: bool = False) -> IbImport:
    return parse_lst(read_tool_output(path), source=str(path), names=names, allow_unknown_guids=allow_unknown_guids)
