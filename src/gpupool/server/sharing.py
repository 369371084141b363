"""The scheduler's ``SharingPolicy`` built from the store (tenants' weights, quotas, pool calendars) and the
per-cycle usage the server measures.

The policy (weights, quotas, the merged calendar, preemption settings) is rebuilt only when what it is made
of changed: the tenants, quotas and pools are read each cycle (three small reads) and compared to what the
cached policy was built from. Decayed usage per tenant (``CycleInputs.usage_gpu_s``) is folded in each
cycle from the jobs that hold GPUs, so fair share sees history without reading the usage table.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from types import MappingProxyType

from gpupool.cluster.snapshot import ClusterSnapshot
from gpupool.domain.calendar import Calendar
from gpupool.domain.jobs import MILLI_PER_GPU
from gpupool.domain.sharing import decayed
from gpupool.scheduler import SharingPolicy
from gpupool.scheduler.types import PreemptionConfig
from gpupool.server.settings import Settings
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

    def __init__(self, store: Store, settings: Settings) -> None:
        self._store, self._settings = store, settings
        self._key: tuple[object, ...] | None = None
        self._static: SharingPolicy | None = None
        self._usage: dict[str, float] = {}
        self._usage_at: float | None = None
        self.latest: SharingPolicy | None = None

    def usage(self, snap: ClusterSnapshot, now_s: float) -> MappingProxyType[str, float]:
        """Decayed GPU-seconds per tenant up to ``now_s`` (call once per cycle: it folds in the time since)."""
        self._fold_usage(snap, now_s)
        return MappingProxyType(dict(self._usage))

    def policy(self) -> SharingPolicy:
        tenants = self._store.list_tenants()
        quotas = self._store.list_quotas()
        pools = self._store.list_pools()
        key = (tuple(tenants), tuple(quotas), tuple((p.name, p.version) for p in pools))
        if key != self._key or self._static is None:
            s = self._settings
            self._static = SharingPolicy(
                quotas=tuple(quotas),
                require_quota=s.require_quota,
                weights=MappingProxyType({t.name: t.weight for t in tenants}),
                usage_half_life_s=s.usage_half_life_s,
                calendar=merged_calendar(pools),
                preemption=PreemptionConfig(
                    enabled=s.preemption, min_runtime_s=s.preemption_min_runtime_s, grace_s=s.preemption_grace_s
                ),
            )
            self._key = key
        self.latest = self._static
        return self.latest

    def _fold_usage(self, snap: ClusterSnapshot, now_s: float) -> None:
        elapsed = 0.0 if self._usage_at is None else max(0.0, now_s - self._usage_at)
        self._usage_at = now_s
        added: dict[str, float] = defaultdict(float)
        for r in snap.running.values():
            added[r.spec.tenant] += r.gpu_milli / MILLI_PER_GPU * elapsed
        half = self._settings.usage_half_life_s
        for tenant in set(self._usage) | set(added):
            self._usage[tenant] = decayed(self._usage.get(tenant, 0.0), elapsed, added.get(tenant, 0.0), half)
