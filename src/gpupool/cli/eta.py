"""A pending job's expected start as one human line for ``gpupool job ID`` (kept apart so the job display can
change around it)."""

from __future__ import annotations

from datetime import datetime


def _duration(seconds: float) -> str:
    """12 s, 12 min, 3 h 5 min, 2 d 4 h: two units at most, rounded down."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h" + (f" {m} min" if m else "")
    d, h = divmod(s // 3600, 24)
    return f"{d} d" + (f" {h} h" if h else "")


def expected_start_line(expected_s: float | None, now_s: float) -> str:
    """``expected start: in 12 min (14:05)`` in local time (the date too when not today); unknown when the
    server could not say (a job ahead with no estimate, or past the projection's horizon)."""
    if expected_s is None:
        return "expected start: unknown (a job it waits for has no runtime estimate, or it is too far ahead)"
    at = datetime.fromtimestamp(expected_s).astimezone()
    today = datetime.fromtimestamp(now_s).astimezone().date()
    when = at.strftime("%H:%M") if at.date() == today else at.strftime("%Y-%m-%d %H:%M")
    if expected_s <= now_s:
        return f"expected start: now ({when})"
    return f"expected start: in {_duration(expected_s - now_s)} ({when})"
