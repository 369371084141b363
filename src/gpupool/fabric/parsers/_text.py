"""Text helpers every fabric parser shares: reading and decoding, ANSI stripping, GUIDs, natural order.

Tool output reaches the parsers either as text the caller already holds (the agent ran the tool) or as a
file (a fixture, a capture); both paths must end in a ``ParseError`` that names the source and the line.
One function per purpose, so that two parsers never disagree on what a GUID is or how ``mlx5_10`` sorts.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path

from gpupool.domain.errors import ParseError

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_GUID_RE = re.compile(r"^(?:0[xX])?([0-9a-fA-F]{1,16})$")
_SYSFS_GUID_RE = re.compile(r"^([0-9a-fA-F]{4}):([0-9a-fA-F]{4}):([0-9a-fA-F]{4}):([0-9a-fA-F]{4})$")
# ASCII digits only: str.isdigit() also accepts superscripts, which int() then refuses with a traceback.
_DIGITS_RE = re.compile(r"([0-9]+)")

NaturalKey = tuple[tuple[tuple[int, int | str], ...], str]


def decode_tool_output(data: bytes, *, source: str) -> str:
    """Bytes a tool (or an editor) wrote -> text; non-UTF-8 bytes are a ``ParseError`` at their line.

    A leading UTF-8 byte-order mark is dropped: Windows editors write one into hand-edited files such as
    ``topology.conf``, and left in place it would make the first line unparseable.
    """
    body = data.removeprefix(codecs.BOM_UTF8)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        offset = e.start + len(data) - len(body)
        line = data.count(b"\n", 0, offset) + 1
        raise ParseError(
            f"not UTF-8 text (byte 0x{data[offset]:02x} at offset {offset})", source=source, line=line
        ) from e


def read_tool_output(path: str | Path) -> str:
    """Read a saved tool output or configuration file as text (``decode_tool_output``).

    A file that cannot be read is a ``ParseError`` without a line, like one that cannot be decoded, so a
    caller (the CLI) has one error to report for "this input is unusable".
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ParseError(f"cannot read: {e.strerror or e}", source=str(p)) from e
    return decode_tool_output(data, source=str(p))


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences (``nvidia-smi topo -m`` underlines its header with them)."""
    return _ANSI_RE.sub("", text)


def line_starts(text: str) -> list[int]:
    """Offsets where each line begins, so an offset can be turned into a 1-based line number by bisection."""
    starts = [0]
    starts.extend(i + 1 for i, ch in enumerate(text) if ch == "\n")
    return starts


def is_decimal(text: str) -> bool:
    """True for a non-empty run of ASCII digits, the only digits ``int()`` of tool output should meet."""
    return text.isascii() and text.isdigit()


def guid_from_hex(digits: str) -> str:
    """1 to 16 hex digits (already matched by a parser's pattern) -> the canonical 16 lowercase digits."""
    return digits.lower().rjust(16, "0")


def normalise_guid(text: str) -> str | None:
    """``0x58a2e10300a7820e``, ``0X2C9``, ``2c9`` or sysfs ``58a2:e103:00a7:820e`` -> 16 lowercase hex digits.

    None when ``text`` is none of those, so each caller words its own error (and may demand a form).
    """
    t = text.strip()
    m = _SYSFS_GUID_RE.match(t)
    if m is not None:
        return "".join(m.groups()).lower()
    m = _GUID_RE.match(t)
    return None if m is None else guid_from_hex(m.group(1))


def sysfs_guid(guid: str) -> str:
    """``58a2e10300a7820e`` -> ``58a2:e103:00a7:820e``, the way the kernel prints ``node_guid``."""
    return ":".join(guid[i : i + 4] for i in range(0, 16, 4))


def natural_key(name: str) -> NaturalKey:
    """Sort key that orders embedded numbers by value: ``mlx5_2`` before ``mlx5_10``, ``c2`` before ``c10``.

    Letters compare without regard to case (host names are case-insensitive) and a number sorts before text
    at the same place, as in plain string order. The name itself breaks remaining ties (``n08``/``n8``,
    ``A``/``a``), so the order never depends on the order the names arrived in (``os.listdir``).
    """
    # re.split with one group alternates text (even positions) and digit runs (odd positions).
    parts = _DIGITS_RE.split(name)
    return tuple((0, int(p)) if i % 2 else (1, p.casefold()) for i, p in enumerate(parts) if p), name
