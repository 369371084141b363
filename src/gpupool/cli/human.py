"""Times and durations as people read and write them, for every command: one way in, one way out.

In: ``read_when`` (ISO dates and times, UTC unless a zone is named; ``now``, ``now-2h``, ``now-7days``; a
plain number is epoch seconds).
Out: ``when`` (``2026-12-01T08:30:00``, UTC, as ``gpupool acct`` has always printed), ``duration``
(sacct's ``[D-]HH:MM:SS``) and ``ago`` (``5m ago``, ``in 2h``); an absent value is ``-``, never ``None``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gpupool.domain.errors import InputError
from gpupool.domain.units import format_duration, parse_when

NONE = "-"
_EARLIEST, _LATEST = 0.0, 253_402_300_799.0  # 1970-01-01 .. 9999-12-31T23:59:59 UTC


def read_when(text: str, now_s: float, where: str) -> float:
    """Epoch seconds of a human time (``parse_when``) or of a plain number (epoch seconds, as scripts write
    them), refused past what a date can say."""
    try:
        t = float(text)
    except ValueError:
        t = parse_when(text, now_s, where)
    if t != t:
        raise InputError(f"{text!r} is not a time", source=where)
    if not _EARLIEST <= t <= _LATEST:
        raise InputError(f"{text!r} is outside 1970-01-01..9999-12-31", source=where)
    return t


def when(seconds: float | None, empty: str = "") -> str:
    """``YYYY-MM-DDTHH:MM:SS`` in UTC; ``empty`` for none."""
    return empty if seconds is None else datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def duration(seconds: float | None, empty: str = NONE) -> str:
    return empty if seconds is None else format_duration(seconds)


def ago(seconds: float | None, now_s: float) -> str:
    """How long before (or after) ``now_s``: ``5m ago``, ``in 2h``, in the largest whole unit."""
    if seconds is None:
        return NONE
    delta = now_s - seconds
    size = abs(delta)
    for unit, scale in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if size >= scale:
            text = f"{int(size // scale)}{unit}"
            break
    else:
        text = f"{int(size)}s"
    return f"{text} ago" if delta >= 0 else f"in {text}"
