"""infiniband-diags' ``--node-name-map`` files: ``GUID "name"`` per line, ``#`` comments, blank lines.

rdma-core reads the GUID with ``strtoull(.., 0)`` and the name up to the first ``"`` or ``#``; we accept the
same layout with one deliberate difference: a GUID is always hexadecimal, with or without ``0x`` (a bare
``0002c903...`` would be octal or decimal to ``strtoull``, which is never what a map's author meant). A line
with a GUID but no name, and a GUID mapped twice, are errors here where rdma-core would silently skip them:
a map that renames nodes wrongly is worse than one that is refused.
"""

from __future__ import annotations

import re
from pathlib import Path

from gpupool.domain.errors import ParseError
from gpupool.fabric.parsers._text import guid_from_hex, read_tool_output

_GUID_RE = re.compile(r"(?:0[xX])?([0-9a-fA-F]{1,16})(?=\s|#|$)")


def parse_node_name_map(text: str, *, source: str) -> dict[str, str]:
    """Node GUID (16 lowercase hex digits, no ``0x``) -> name, in file order."""
    names: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for n, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
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
        if guid in names:
            raise ParseError(f"GUID {guid} is mapped twice (first on line {first_line[guid]})", source=source, line=n)
        names[guid] = name
        first_line[guid] = n
    return names


def read_node_name_map(path: str | Path) -> dict[str, str]:
    return parse_node_name_map(read_tool_output(path), source=str(path))
