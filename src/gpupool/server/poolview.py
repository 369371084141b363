"""The pools as they stand, for ``GET /v1/pools``: what each owns now, what its jobs use, lend and borrow.

From the leader's last cycle (its snapshot, sharing policy and ``now``, immutable), with the scheduler's own
resolution of the calendar to hosts (``scheduler.pools.pool_map``), so the view is the one the scheduler
placed by. A GPU is lent when a job of another pool holds it on a host this pool owns, and borrowed by the
pool of that job. Without a calendar every host is the default pool's and nothing is lent or borrowed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from gpupool.domain.jobs import MILLI_PER_GPU
from gpupool.scheduler.driver import CycleRun
from gpupool.scheduler.pools import pool_busy, pool_map


@dataclass(frozen=True, slots=True)
class PoolState:
    name: str
    gpus: int | None  # GPUs on the hosts it owns now (None: no calendar, pools own no hosts)
    used: float  # GPUs its jobs hold, wherever
    lent: float  # GPUs on its hosts that other pools' jobs hold
    borrowed: float  # GPUs its jobs hold on other pools' hosts
    share: float | None  # its calendar rule's fraction of its hosts now (None: no rule, e.g. the default pool)
    share_since_s: float | None  # when that fraction last changed (None: never)
    next_change_s: float | None  # the calendar's next change of any share (within 8 days)


def pool_states(run: CycleRun) -> dict[str, PoolState]:
    request = run.request
    snap, now, calendar = request.snapshot, request.now_s, request.sharing.calendar
    ix = snap.index
    used: dict[str, float] = defaultdict(float)
    lent: dict[str, float] = defaultdict(float)
    borrowed: dict[str, float] = defaultdict(float)
    pm = (
        None
        if calendar is None
        else pool_map(ix, calendar, now, request.inputs.pool_demand, pool_busy(ix, snap.running))
    )
    for r in snap.running.values():
        pool = r.spec.pool
        for t in r.allocation.tasks:
            g = len(t.gpus) * t.milli_gpu / MILLI_PER_GPU
            used[pool] += g
            if pm is None or not ix.fabric.has_host(t.host):
                continue
            owner = pm.names[int(pm.owner[ix.host_index(t.host)])]
            if owner != pool:
                lent[owner] += g
                borrowed[pool] += g
    names = set(used) | set(pm.names if pm is not None else ())
    shares = {} if calendar is None else {s.pool: s for s in calendar.shares_at(now)}
    change = None if calendar is None else calendar.next_change_s(now)
    out = {}
    for name in sorted(names):
        s = shares.get(name)
        since = None if s is None or s.since_s == float("-inf") else s.since_s
        out[name] = PoolState(
            name=name,
            gpus=None if pm is None else pm.gpus(ix, name),
            used=used.get(name, 0.0),
            lent=lent.get(name, 0.0),
            borrowed=borrowed.get(name, 0.0),
            share=None if s is None else s.fraction,
            share_since_s=since,
            next_change_s=change,
        )
    return out
