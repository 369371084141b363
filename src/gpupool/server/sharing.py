"""The scheduler's ``SharingPolicy`` from the ``scheduler`` settings and the store's tenants' weights, quotas
and pool calendars, through the one builder (``scheduler.settings.sharing_policy``) the simulator uses too.

It is rebuilt only when what it is made of changed: the tenants, quotas and pools are read each cycle (three
small reads) and compared to what the cached policy was built from.
"""

from __future__ import annotations

import logging

from gpupool.domain.calendar import Calendar
from gpupool.scheduler import SharingPolicy
from gpupool.scheduler.settings import SchedulerSettings, sharing_policy
from gpupool.store import PoolRecord, Store

log = logging.getLogger("gpupool.server.sharing")


def merged_calendar(pools: list[PoolRecord]) -> Calendar | None:
    """One calendar from every pool's: their rules together; time zone and default pool from the first.

    Each pool's calendar names the hosts it claims; the scheduler takes one calendar for the fabric.
    """
    cals = [p.calendar for p in pools if p.calendar.rules]
    if not cals:
        return None
    first = cals[0]
    for c in cals[1:]:
        if c.timezone != first.timezone:
            log.warning(
                "pool calendars disagree on the time zone (%s, %s): %s wins", first.timezone, c.timezone, first.timezone
            )
    return Calendar(first.timezone, first.default_pool, tuple(r for c in cals for r in c.rules))


class SharingBuilder:
    """Owned by the scheduling loop's thread (not thread-safe); ``latest`` may be read from any thread."""

    def __init__(self, store: Store, settings: SchedulerSettings) -> None:
        self._store, self._settings = store, settings
        self._key: tuple[object, ...] | None = None
        self.latest: SharingPolicy | None = None

    def policy(self) -> SharingPolicy:
        tenants = self._store.list_tenants()
        quotas = self._store.list_quotas()
        pools = self._store.list_pools()
        key = (tuple(tenants), tuple(quotas), tuple((p.name, p.version) for p in pools))
        if key != self._key or self.latest is None:
            self.latest = sharing_policy(
                self._settings,
                quotas=tuple(quotas),
                weights={t.name: t.weight for t in tenants},
                calendar=merged_calendar(pools),
            )
            self._key = key
        return self.latest
