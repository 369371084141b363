"""Human units as users write them: durations (``4h``, ``1-02:00:00``), memory (``64Gi``) and points in time
(``2026-11-01``, ``now-7days``). Pure parsers: each raises InputError naming the text and what would be read.

Two duration syntaxes, because users bring both: the job file's ``<number><unit>`` pairs (``90s``, ``30m``,
``4h``, ``2d``, ``1w``, ``1h30m``; a bare number is seconds) and Slurm's ``--time`` forms (``minutes``,
``minutes:seconds``, ``hours:minutes:seconds``, ``days-hours[:minutes[:seconds]]``; a bare number is minutes).
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime

from gpupool.domain.errors import InputError

_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([A-Za-z]*)")
# Binary and decimal suffixes, and Slurm's single letters (``--mem=64G``: gibibytes, as Slurm means them).
_MEMORY_UNITS = {
    "": 1.0,  # a bare number is MiB, as ``memory_mib`` and Slurm's ``--mem`` read it
    "b": 1.0 / (1 << 20),
    "k": 1.0 / 1024,
    "ki": 1.0 / 1024,
    "kb": 1000.0 / (1 << 20),
    "m": 1.0,
    "mi": 1.0,
    "mb": 1e6 / (1 << 20),
    "g": 1024.0,
    "gi": 1024.0,
    "gb": 1e9 / (1 << 20),
    "t": 1024.0 * 1024,
    "ti": 1024.0 * 1024,
    "tb": 1e12 / (1 << 20),
}
_WHEN_UNITS = {
    "": 1.0,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
    "w": 604800.0,
    "week": 604800.0,
    "weeks": 604800.0,
}


def parse_duration(text: str | float | int, where: str = "duration") -> float:
    """Seconds in ``text``: a number (seconds) or ``<number><unit>`` pairs with units s, m, h, d, w."""
    if isinstance(text, bool):
        raise InputError(f"{text!r} is not a duration", source=where)
    if isinstance(text, int | float):
        value = float(text)
    else:
        s = text.strip().lower().replace(" ", "")
        if not s:
            raise InputError("an empty duration", source=where)
        value, pos = 0.0, 0
        for m in _DURATION_PART.finditer(s):
            if m.start() != pos:
                break
            number, unit = m.groups()
            if unit == "" and m.end() != len(s):
                break
            scale = _DURATION_UNITS.get(unit or "s")
            if scale is None:
                known = ", ".join(_DURATION_UNITS)
                raise InputError(f"unknown unit {unit!r} in duration {text!r} (known: {known})", source=where)
            value += float(number) * scale
            pos = m.end()
        if pos != len(s):
            raise InputError(f"{text!r} is not a duration (write 90s, 30m, 4h, 2d or 1h30m)", source=where)
    if not value > 0:
        raise InputError(f"a duration must be positive, got {text!r}", source=where)
    return value


def parse_slurm_time(text: str, where: str = "--time") -> float:
    """Seconds in a Slurm ``--time`` value; ``unlimited``/``infinite`` are refused (a limit is a number)."""
    s = text.strip()
    days = 0
    rest = s
    if "-" in s:
        d, _, rest = s.partition("-")
        if not d.isdigit():
            raise InputError(f"{text!r} is not a Slurm time (days-hours:minutes:seconds)", source=where)
        days = int(d)
    parts = rest.split(":") if rest else []
    if not parts or len(parts) > 3 or not all(p.isdigit() for p in parts):
        raise InputError(
            f"{text!r} is not a Slurm time (minutes, minutes:seconds, hours:minutes:seconds, days-hours[:minutes[:seconds]])",
            source=where,
        )
    n = [int(p) for p in parts]
    if "-" in s:  # days-hours[:minutes[:seconds]]
        n += [0] * (3 - len(n))
        seconds = days * 86400 + n[0] * 3600 + n[1] * 60 + n[2]
    elif len(n) == 1:
        seconds = n[0] * 60
    elif len(n) == 2:
        seconds = n[0] * 60 + n[1]
    else:
        seconds = n[0] * 3600 + n[1] * 60 + n[2]
    if seconds <= 0:
        raise InputError(f"a time limit must be positive, got {text!r}", source=where)
    return float(seconds)


def parse_memory_mib(text: str | int, where: str = "memory") -> int:
    """MiB in ``text``: ``64Gi``, ``512Mi``, ``64G`` (Slurm's gibibytes), ``1.5Ti``, ``16GB``, ``100B``; a bare
    number is MiB (as ``memory_mib`` and Slurm's ``--mem`` read it)."""
    if isinstance(text, bool):
        raise InputError(f"{text!r} is not an amount of memory", source=where)
    if isinstance(text, int):
        if text < 0:
            raise InputError(f"memory must be >= 0, got {text}", source=where)
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if m is None:
        raise InputError(f"{text!r} is not an amount of memory (write 64Gi, 512Mi or 16GB)", source=where)
    scale = _MEMORY_UNITS.get(m.group(2).lower())
    if scale is None:
        raise InputError(
            f"unknown unit {m.group(2)!r} in {text!r} (known: Ki, Mi, Gi, Ti, K, M, G, T, KB, MB, GB, TB)",
            source=where,
        )
    return round(float(m.group(1)) * scale)


def parse_when(text: str, now_s: float, where: str = "time") -> float:
    """Epoch seconds of ``text``: an ISO date or date-time (UTC unless it names a zone: ``2026-11-01``,
    ``2026-11-01T12:00``), ``now``, or sacct's ``now[+-]count[unit]`` (``now-7days``, ``now-3hours``)."""
    s = text.strip()
    m = re.fullmatch(r"now(?:([+-])(\d+(?:\.\d+)?)([a-z]*))?", s.lower())
    if m is not None:
        if m.group(1) is None:
            return now_s
        scale = _WHEN_UNITS.get(m.group(3))
        if scale is None:
            raise InputError(
                f"unknown unit {m.group(3)!r} in {text!r} (seconds, minutes, hours, days, weeks)", source=where
            )
        delta = float(m.group(2)) * scale
        return now_s + delta if m.group(1) == "+" else now_s - delta
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise InputError(
            f"{text!r} is not a time (write 2026-11-01, 2026-11-01T12:00 or now-7days)", source=where
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def month_window(text: str, where: str = "month") -> tuple[float, float]:
    """``[start, end)`` epoch seconds of the UTC calendar month ``YYYY-MM``."""
    m = re.fullmatch(r"(\d{4})-(\d{2})", text.strip())
    if m is None or not 1 <= int(m.group(2)) <= 12:
        raise InputError(f"{text!r} is not a month (write 2026-11)", source=where)
    year, month = int(m.group(1)), int(m.group(2))
    days = calendar.monthrange(year, month)[1]
    start = datetime(year, month, 1, tzinfo=UTC).timestamp()
    return start, start + days * 86400.0


def format_duration(seconds: float) -> str:
    """``[D-]HH:MM:SS``, as sacct prints elapsed times."""
    total = round(max(0.0, seconds))
    days, rest = divmod(total, 86400)
    h, rest = divmod(rest, 3600)
    mnt, sec = divmod(rest, 60)
    return f"{days}-{h:02d}:{mnt:02d}:{sec:02d}" if days else f"{h:02d}:{mnt:02d}:{sec:02d}"
