"""The REST API v1 wire formats of the operator's routes beyond ``schemas.api``'s: changing and deleting
tenants, every quota at once, and a pool calendar read at a time (``server.admin_routes``).

The admin commands (``gpupool admin tenants|quotas|pools|calendars``) validate their flags and files with
these same models (and ``schemas.api``'s ``TenantIn``, ``QuotaIn``, ``PoolIn``), so a bad value is refused on
the command line exactly as the server would refuse it, naming the flag or the file's entry.
"""

from __future__ import annotations

from pydantic import Field

from gpupool.domain.calendar import Calendar, PoolRule
from gpupool.schemas.base import In, Out, Text


class TenantPatch(In):
    """What ``PATCH /v1/tenants/{name}`` changes: the fair-share weight (the name is the tenant's key)."""

    weight: float = Field(gt=0, le=1e6, description="fair-share weight: a tenant of weight 2 gets twice the share")


class QuotaKeyOut(Out):
    """What a delete removed."""

    tenant: str
    pool: str
    gpu_model: str


class DeletedOut(Out):
    """What a delete removed: its kind and name."""

    kind: str
    name: str


class WindowOut(Out):
    days: list[int] = Field(description="0 = Monday")
    start: str = Field(description="local time HH:MM")
    end: str = Field(description="local time HH:MM; at or before start: the window runs past midnight")


class CalendarRuleOut(Out):
    pool: str
    sus: list[int]
    hosts: list[str]
    share: float = Field(description="the share of the selected hosts while a window is open")
    share_outside: float = Field(description="the share the rest of the time")
    windows: list[WindowOut]
    share_now: float = Field(description="the share at at_s")
    since_s: float | None = Field(description="when share_now began (null: it never changes)")


class CalendarOut(Out):
    """A pool's calendar read at ``at_s``: each rule's share then, since when, and the next change."""

    pool: str
    version: int
    timezone: str
    default_pool: str
    at_s: float
    next_change_s: float | None = Field(description="the next time any rule's share changes (within 8 days)")
    rules: list[CalendarRuleOut]


def calendar_out(pool: str, version: int, cal: Calendar, now: float) -> CalendarOut:
    """``cal`` at ``now`` on the wire: the rules as written, each with its share at ``now`` and since when."""
    shares = cal.shares_at(now)
    return CalendarOut(
        pool=pool,
        version=version,
        timezone=cal.timezone,
        default_pool=cal.default_pool,
        at_s=now,
        next_change_s=cal.next_change_s(now),
        rules=[_rule_out(r, s.fraction, s.since_s) for r, s in zip(cal.rules, shares, strict=True)],
    )


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _rule_out(r: PoolRule, share_now: float, since_s: float) -> CalendarRuleOut:
    return CalendarRuleOut(
        pool=r.pool,
        sus=list(r.sus),
        hosts=list(r.hosts),
        share=r.share,
        share_outside=r.share_outside,
        windows=[WindowOut(days=sorted(w.days), start=_hhmm(w.start_min), end=_hhmm(w.end_min)) for w in r.windows],
        share_now=share_now,
        since_s=None if since_s == -float("inf") else since_s,
    )


__all__ = [
    "CalendarOut",
    "CalendarRuleOut",
    "DeletedOut",
    "QuotaKeyOut",
    "TenantPatch",
    "Text",
    "WindowOut",
    "calendar_out",
]
