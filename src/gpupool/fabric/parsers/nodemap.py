"""GUID -> name files that sites keep beside a fabric dump: opensm node-name maps, ``ibhosts``/``ibswitches``
lists, and host maps (``/etc/hosts``-style or CSV).

**Node-name map** (infiniband-diags' ``--node-name-map``): ``GUID "name"`` per line, ``#`` comments, blank
lines. rdma-core reads the GUID with ``strtoull(.., 0)`` and the name up to the first ``"`` or ``#``; we accept
the same layout with one deliberate difference: a GUID is always hexadecimal, with or without ``0x`` (a bare
``0002c903...`` would be octal or decimal to ``strtoull``, which is never what a map's author meant). A line
with a GUID but no name, and a GUID mapped twice, are errors here where rdma-core would silently skip them:
a map that renames nodes wrongly is worse than one that is refused.

**ibhosts / ibswitches** print one node per line (``Ca : 0x0002c903002db102 ports 1 "atlas mlx4_0"``); run
with a node-name map they print the mapped names, so the same file is a node-name map in another layout and
``read_node_name_map`` takes either.

**Host map**: a GUID and the host it belongs to, from whatever the site keeps: ``GUID host [alias...]`` per
line like ``/etc/hosts`` (address first), or CSV ``GUID,host`` with an optional header row. The GUID is a
node GUID (as ``ibstat`` prints it); a host map says only which machine an HCA is in, never its device.

Every parser keeps the line each GUID came from (``GuidNames.lines``), so an importer can point at the line
of an entry whose GUID is not in the fabric.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from gpupool.domain.errors import ParseError
from gpupool.fabric.parsers._text import guid_from_hex, normalise_guid, read_tool_output

_GUID_RE = re.compile(r"(?:0[xX])?([0-9a-fA-F]{1,16})(?=\s|#|$)")
_IBNODES_RE = re.compile(r'(Ca|Switch|Router)\s*:\s*0x([0-9a-fA-F]{1,16})\s+ports\s+(\d+)\s+"(.*)"(.*)')
_IBNODES_START_RE = re.compile(r"(?:Ca|Switch|Router)\s*:\s*0x")
_HOST_WORD_RE = re.compile(r"[^\W_][\w.-]*")  # a host name: letters (any script), digits, '.', '-', '_'


class GuidNames(dict[str, str]):
    """Node GUID (16 lowercase hex digits) -> name, in file order, plus where each entry came from."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source
        self.lines: dict[str, int] = {}

    def add(self, guid: str, name: str, line: int) -> None:
        if guid in self:
            raise ParseError(
                f"GUID {guid} is mapped twice (first on line {self.lines[guid]})", source=self.source, line=line
            )
        self[guid] = name
        self.lines[guid] = line


def _content_lines(text: str) -> list[tuple[int, str]]:
    return [(n, s) for n, raw in enumerate(text.split("\n"), start=1) if (s := raw.strip()) and not s.startswith("#")]


def parse_node_name_map(text: str, *, source: str) -> GuidNames:
    """A node-name map, or ``ibhosts``/``ibswitches`` output (detected from the first line)."""
    lines = _content_lines(text)
    if lines and _IBNODES_START_RE.match(lines[0][1]):
        return _parse_ibnodes(lines, source)
    names = GuidNames(source)
    for n, line in lines:
        m = _GUID_RE.match(line)
        if m is None:
            word = line.split()[0]
            raise ParseError(
                f"expected a hexadecimal node GUID at the start of the line, found {word!r}", source=source, line=n
            )
        guid = guid_from_hex(m.group(1))
        rest = line[m.end() :].strip()
        if rest.startswith('"'):
            end = rest.find('"', 1)
            if end < 0:
                raise ParseError(f"name of GUID {guid} opens a quote that never closes", source=source, line=n)
            name = rest[1:end]
        else:
            name = rest.split("#", 1)[0].strip()
        if not name:
            raise ParseError(f"GUID {guid} has no name", source=source, line=n)
        names.add(guid, name, n)
    return names


def _parse_ibnodes(lines: list[tuple[int, str]], source: str) -> GuidNames:
    """``ibhosts``/``ibswitches``/``ibrouters`` output: the node GUID and its (possibly mapped) description."""
    names = GuidNames(source)
    for n, line in lines:
        m = _IBNODES_RE.fullmatch(line)
        if m is None:
            raise ParseError(
                f"not a line of ibhosts/ibswitches output: {line[:80]!r} (truncated?)", source=source, line=n
            )
        if m.group(1) == "Switch" and not re.fullmatch(
            r"\s*(?:enhanced|base)\s+port\s+0\s+lid\s+\d+\s+lmc\s+\d+\s*", m.group(5)
        ):
            raise ParseError("Switch line lacks 'port 0 lid N lmc N' (truncated?)", source=source, line=n)
        if m.group(1) != "Switch" and m.group(5).strip():
            raise ParseError(f"unexpected text after the description: {m.group(5).strip()!r}", source=source, line=n)
        names.add(guid_from_hex(m.group(2)), m.group(4).strip(), n)
    return names


def read_node_name_map(path: str | Path) -> GuidNames:
    return parse_node_name_map(read_tool_output(path), source=str(path))


def _host_entry(guid_text: str, host: str, source: str, n: int) -> tuple[str, str]:
    guid = normalise_guid(guid_text)
    if guid is None:
        raise ParseError(f"expected a node GUID, found {guid_text.strip()!r}", source=source, line=n)
    host = host.strip()
    if not host:
        raise ParseError(f"GUID {guid} has no host name", source=source, line=n)
    if not _HOST_WORD_RE.fullmatch(host):
        raise ParseError(f"{host!r} is not a host name", source=source, line=n)
    return guid, host


def parse_host_map(text: str, *, source: str) -> GuidNames:
    """``GUID host [alias...]`` lines or ``GUID,host`` CSV (chosen by a comma on the first line) -> GUID -> host."""
    lines = _content_lines(text)
    hosts = GuidNames(source)
    if lines and "," in lines[0][1]:
        for k, (n, line) in enumerate(lines):
            row = next(csv.reader([line]))
            if len(row) != 2:
                raise ParseError(f"expected two columns GUID,host; found {len(row)}", source=source, line=n)
            if k == 0 and normalise_guid(row[0]) is None and "guid" in row[0].lower():
                continue  # a header row
            guid, host = _host_entry(row[0], row[1], source, n)
            hosts.add(guid, host, n)
        return hosts
    for n, line in lines:
        words = line.split("#", 1)[0].split()
        if len(words) < 2:
            raise ParseError("expected 'GUID host [alias...]'", source=source, line=n)
        guid, host = _host_entry(words[0], words[1], source, n)
        hosts.add(guid, host, n)
    return hosts


def read_host_map(path: str | Path) -> GuidNames:
    return parse_host_map(read_tool_output(path), source=str(path))
