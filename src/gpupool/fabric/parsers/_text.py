"""Small helpers shared by the host-side tool parsers: decoding, ANSI stripping, GUIDs, natural order.

Tool output reaches the parsers either as text the caller already holds (the agent ran the tool) or as a
file (a fixture, a capture); both paths must end in a ``ParseError`` that names the source and the line.
"""

from __future__ import annotations

import re
from pathlib import Path

from gpupool.domain.errors import InputError, ParseError

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_GUID_RE = re.compile(r"^(?:0x)?([0-9a-fA-F]{1,16})$")
_SYSFS_GUID_RE = re.compile(r"^([0-9a-fA-F]{4}):([0-9a-fA-F]{4}):([0-9a-fA-F]{4}):([0-9a-fA-F]{4})$")
_DIGITS_RE = re.compile(r"(\d+)")


def decode_tool_output(data: bytes, source: str) -> str:
    """Bytes a tool wrote -> text; non-UTF-8 bytes are a ``ParseError`` at the line that holds them."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        bad = data[e.start : e.start + 1].hex()
        raise ParseError(f"not UTF-8 text (byte 0x{bad} at offset {e.start})", source=source, line=line) from e


def read_tool_output(path: str | Path) -> str:
    """Read a saved tool output as UTF-8 text, turning every failure into an ``InputError``."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", source=str(p)) from e
    return decode_tool_output(data, str(p))


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences (``nvidia-smi topo -m`` underlines its header with them)."""
    return _ANSI_RE.sub("", text)


def line_starts(text: str) -> list[int]:
    """Offsets where each line begins, so an offset can be turned into a 1-based line number by bisection."""
    starts = [0]
    starts.extend(i + 1 for i, ch in enumerate(text) if ch == "\n")
    return starts


def normalize_guid(text: str) -> str | None:
    """``0x58a2e10300a7820e`` or sysfs ``58a2:e103:00a7:820e`` -> ``58a2e10300a7820e``; None if neither."""
    t = text.strip()
    m = _SYSFS_GUID_RE.match(t)
    if m is not None:
        return "".join(m.groups()).lower()
    m = _GUID_RE.match(t)
    if m is None:
        return None
    return m.group(1).lower().rjust(16, "0")


def sysfs_guid(guid: str) -> str:
    """``58a2e10300a7820e`` -> ``58a2:e103:00a7:820e``, the way the kernel prints ``node_guid``."""
    return ":".join(guid[i : i + 4] for i in range(0, 16, 4))


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that puts ``mlx5_2`` before ``mlx5_10``, as tools list devices."""
    return tuple((1, int(part)) if part.isdigit() else (0, part) for part in _DIGITS_RE.split(name) if part != "")
