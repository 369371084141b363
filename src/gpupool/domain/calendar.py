"""Pool calendars: which pool owns which share of which hosts at a given time.

A calendar is parsed from a small TOML text (``parse_calendar(text, source)``; the caller reads the
file, nothing here does I/O) and asked with an injected time (``shares_at(now_s)``); no clock is read.
Windows are cron-like: days of the week and a local start and end time in the calendar's time zone
(``zoneinfo`` data, so daylight saving is right). Example::

    timezone = "Asia/Shanghai"
    default_pool = "training"          # owns whatever no rule gives away

    [[pool]]
    name = "inference"
    sus = [1, 2]                       # 1-based scalable units (or hosts = ["dgx001", ...])
    share = 0.7                        # of those hosts while a window is open
    share_outside = 0.2                # the rest of the time
    windows = [{ days = "mon-sun", start = "08:00", end = "22:00" }]
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gpupool.domain.errors import ParseError

_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_TIME = re.compile(r"^([01]?\d|2[0-4]):([0-5]\d)$")


@dataclass(frozen=True, slots=True)
class Window:
    """Open on ``days`` (0 = Monday) from ``start_min`` to ``end_min`` minutes after local midnight; an end
    at or before the start means the window runs past midnight into the next day."""

    days: frozenset[int]
    start_min: int
    end_min: int

    def open_at(self, local: datetime) -> bool:
        minute = local.hour * 60 + local.minute
        today = local.weekday()
        if self.start_min < self.end_min:
            return today in self.days and self.start_min <= minute < self.end_min
        yesterday = (today - 1) % 7
        return (today in self.days and minute >= self.start_min) or (yesterday in self.days and minute < self.end_min)


@dataclass(frozen=True, slots=True)
class PoolRule:
    """``pool`` holds ``share`` of the selected hosts while any window is open, ``share_outside`` otherwise.
    No windows: ``share`` always."""

    pool: str
    sus: tuple[int, ...]  # 1-based scalable units
    hosts: tuple[str, ...]
    share: float
    share_outside: float
    windows: tuple[Window, ...]
    line: int  # where the rule starts in its file, for messages


@dataclass(frozen=True, slots=True)
class PoolShare:
    """One rule's answer at a time: ``pool`` holds ``fraction`` of the selected hosts since ``since_s``
    (the last window boundary that changed it; ``-inf`` when it never changes)."""

    pool: str
    sus: tuple[int, ...]
    hosts: tuple[str, ...]
    fraction: float
    since_s: float
    previous_fraction: float  # what it held before ``since_s`` (the same when it never changes)


@dataclass(frozen=True, slots=True)
class Calendar:
    timezone: str
    default_pool: str
    rules: tuple[PoolRule, ...]

    @property
    def pools(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.default_pool, *(r.pool for r in self.rules))))

    def shares_at(self, now_s: float) -> tuple[PoolShare, ...]:
        tz = ZoneInfo(self.timezone)
        out = []
        for r in self.rules:
            if not r.windows:
                out.append(PoolShare(r.pool, r.sus, r.hosts, r.share, -float("inf"), r.share))
                continue
            is_open = _open(r, now_s, tz)
            now_f, before_f = (r.share, r.share_outside) if is_open else (r.share_outside, r.share)
            out.append(PoolShare(r.pool, r.sus, r.hosts, now_f, _since(r, now_s, tz), before_f))
        return tuple(out)

    def next_change_s(self, now_s: float, horizon_s: float = 8 * 86400.0) -> float | None:
        """The first time after ``now_s`` (within the horizon) at which any rule's share changes."""
        tz = ZoneInfo(self.timezone)
        best: float | None = None
        for r in self.rules:
            before = _open(r, now_s, tz)
            for b in sorted(_boundaries(r, now_s, tz, forward=True)):
                if now_s < b <= now_s + horizon_s and _open(r, b, tz) != before:
                    best = b if best is None else min(best, b)
                    break
        return best


def _open(rule: PoolRule, t: float, tz: ZoneInfo) -> bool:
    local = datetime.fromtimestamp(t, tz)
    return any(w.open_at(local) for w in rule.windows)


def _boundaries(rule: PoolRule, now_s: float, tz: ZoneInfo, *, forward: bool = False) -> list[float]:
    """Window starts and ends on the local days around ``now_s`` (8 days back, or ahead)."""
    today = datetime.fromtimestamp(now_s, tz).date()
    out = []
    for d in range(-1, 9):
        day = today + timedelta(days=d if forward else -d)
        for w in rule.windows:
            if day.weekday() not in w.days:
                continue
            for minute, extra in ((w.start_min, 0), (w.end_min, 0 if w.start_min < w.end_min else 1)):
                local = datetime(day.year, day.month, day.day, tzinfo=tz) + timedelta(days=extra, minutes=minute)
                # Wall-clock arithmetic: rebuild the local time so daylight saving shifts are honoured.
                local = datetime(local.year, local.month, local.day, local.hour, local.minute, tzinfo=tz)
                out.append(local.timestamp())
    return out


def _since(rule: PoolRule, now_s: float, tz: ZoneInfo) -> float:
    is_open = _open(rule, now_s, tz)
    for b in sorted((b for b in _boundaries(rule, now_s, tz) if b <= now_s), reverse=True):
        if _open(rule, b, tz) == is_open and _open(rule, b - 1.0, tz) != is_open:
            return b
    return -float("inf")


# ------------------------------------------------------------------ parsing


def _key_line(lines: list[str], start: int, end: int, key: str) -> int:
    pat = re.compile(rf"^\s*{re.escape(key)}\s*=")
    for i in range(start, min(end, len(lines))):
        if pat.match(lines[i]):
            return i + 1
    return start + 1


def _days(spec: Any, source: str, line: int) -> frozenset[int]:
    if not isinstance(spec, str) or not spec.strip():
        raise ParseError(
            f"days must be a string such as 'mon-fri' or 'sat,sun', got {spec!r}", source=source, line=line
        )
    out: set[int] = set()
    for part in spec.lower().replace(" ", "").split(","):
        a, _, b = part.partition("-")
        if a not in _DAYS or (b and b not in _DAYS):
            raise ParseError(f"unknown day in {spec!r}; days are {', '.join(_DAYS)}", source=source, line=line)
        i, j = _DAYS.index(a), _DAYS.index(b or a)
        out.update(range(i, j + 1) if i <= j else [*range(i, 7), *range(0, j + 1)])
    return frozenset(out)


def _minutes(spec: Any, what: str, source: str, line: int) -> int:
    m = _TIME.match(spec) if isinstance(spec, str) else None
    if m is None or (m.group(1) == "24" and m.group(2) != "00"):
        raise ParseError(f"{what} must be a time HH:MM, got {spec!r}", source=source, line=line)
    return int(m.group(1)) * 60 + int(m.group(2))


def _fraction(v: Any, what: str, source: str, line: int) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= float(v) <= 1.0:
        raise ParseError(f"{what} must be a number from 0 to 1, got {v!r}", source=source, line=line)
    return float(v)


def parse_calendar(text: str, source: str) -> Calendar:
    """Parse a calendar's TOML text; every problem raises ParseError naming ``source`` and the line."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        raise ParseError(f"not valid TOML: {e}", source=source, line=int(m.group(1)) if m else None) from None
    lines = text.splitlines()
    tz = doc.get("timezone", "UTC")
    try:
        ZoneInfo(tz) if isinstance(tz, str) and tz else None
    except (ZoneInfoNotFoundError, ValueError):
        tz = None
    if not isinstance(tz, str) or not tz:
        raise ParseError(
            f"unknown time zone {doc.get('timezone')!r}",
            source=source,
            line=_key_line(lines, 0, len(lines), "timezone"),
        )
    default_pool = doc.get("default_pool", "default")
    if not isinstance(default_pool, str) or not default_pool:
        raise ParseError(
            "default_pool must be a pool name", source=source, line=_key_line(lines, 0, len(lines), "default_pool")
        )
    unknown = set(doc) - {"timezone", "default_pool", "pool"}
    if unknown:
        raise ParseError(
            f"unknown key(s) {', '.join(sorted(unknown))}",
            source=source,
            line=_key_line(lines, 0, len(lines), sorted(unknown)[0]),
        )
    pools = doc.get("pool", [])
    if not isinstance(pools, list):
        raise ParseError(
            "pool must be an array of tables ([[pool]])", source=source, line=_key_line(lines, 0, len(lines), "pool")
        )
    heads = [i for i, ln in enumerate(lines) if ln.strip().startswith("[[pool]]")] or [0] * len(pools)
    heads = heads + [len(lines)] * (len(pools) - len(heads))
    rules = []
    for n, p in enumerate(pools):
        start, end = heads[n], heads[n + 1] if n + 1 < len(heads) else len(lines)
        rules.append(_rule(p, source, lines, start, end))
    return Calendar(tz, default_pool, tuple(rules))


def _rule(p: dict[str, Any], source: str, lines: list[str], start: int, end: int) -> PoolRule:
    def at(key: str) -> int:
        return _key_line(lines, start, end, key)

    unknown = set(p) - {"name", "sus", "hosts", "share", "share_outside", "windows"}
    if unknown:
        raise ParseError(
            f"unknown key(s) in a pool: {', '.join(sorted(unknown))}", source=source, line=at(sorted(unknown)[0])
        )
    name = p.get("name")
    if not isinstance(name, str) or not name:
        raise ParseError("a pool needs a name", source=source, line=start + 1)
    sus = p.get("sus", [])
    hosts = p.get("hosts", [])
    if not isinstance(sus, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in sus):
        raise ParseError(f"pool {name}: sus must be a list of SU numbers from 1", source=source, line=at("sus"))
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
        raise ParseError(f"pool {name}: hosts must be a list of host names", source=source, line=at("hosts"))
    if not sus and not hosts:
        raise ParseError(
            f"pool {name}: name the hosts it holds a share of (sus or hosts)", source=source, line=start + 1
        )
    if "share" not in p:
        raise ParseError(f"pool {name}: share is missing", source=source, line=start + 1)
    share = _fraction(p["share"], f"pool {name}: share", source, at("share"))
    windows_raw = p.get("windows", [])
    if not isinstance(windows_raw, list):
        raise ParseError(f"pool {name}: windows must be a list", source=source, line=at("windows"))
    windows = []
    for w in windows_raw:
        wl = at("windows")
        if not isinstance(w, dict) or set(w) - {"days", "start", "end"}:
            raise ParseError(f"pool {name}: a window has days, start and end only, got {w!r}", source=source, line=wl)
        s = _minutes(w.get("start"), "start", source, wl)
        e = _minutes(w.get("end"), "end", source, wl)
        if s == e or s == 24 * 60:
            raise ParseError(
                f"pool {name}: a window from {w.get('start')} to {w.get('end')} is empty", source=source, line=wl
            )
        windows.append(Window(_days(w.get("days", "mon-sun"), source, wl), s, e))
    outside = p.get("share_outside", share if not windows else None)
    if outside is None:
        raise ParseError(f"pool {name}: share_outside is missing (it has windows)", source=source, line=start + 1)
    outside_f = _fraction(outside, f"pool {name}: share_outside", source, at("share_outside"))
    return PoolRule(name, tuple(sus), tuple(hosts), share, outside_f, tuple(windows), start + 1)
