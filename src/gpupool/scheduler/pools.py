"""Which pool owns which host at ``now``: the calendar's shares and pools' demand, resolved to hosts.

Every host belongs to the calendar's default pool unless a rule gives it away. A rule holding fraction f
of its selected hosts owns the first round(f x n) of them that no earlier rule took, so a pool's night
share is a prefix of its day share and a window only moves the boundary. The selection is ordered with the
hosts the pool's running jobs occupy first (most of their GPUs first), then fabric order: a pool shrinks
away from its jobs, so a closing window hands over free hosts before it strands a running service.
The hosts between the two boundaries changed owner when the window last opened or closed; ``since`` says
when, so the jobs that were placed there before then (borrowers now) get their grace from that moment.
A pool's demand target (replicas x GPUs + headroom) extends its prefix further when its share is short,
and the hosts that cover the target are kept: not lent to other pools even when idle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpupool.cluster.index import FabricIndex
from gpupool.cluster.snapshot import RunningJob
from gpupool.domain.calendar import Calendar
from gpupool.domain.sharing import PoolDemand
from gpupool.fabric.model import Domain

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class PoolMap:
    names: tuple[str, ...]  # pool code -> name; code 0 is the default pool
    owner: IntArray  # (hosts,) pool code
    since: FloatArray  # (hosts,) when the owner last changed (-inf: never)
    # (hosts,) hosts a pool with a demand target keeps for it (its services and their headroom): never lent,
    # so a new service finds room at once instead of waiting out a reclaim's grace. None: no demand targets.
    kept: BoolArray | None = None

    def code(self, pool: str) -> int:
        return self.names.index(pool) if pool in self.names else -1

    def owned_by(self, pool: str) -> BoolArray:
        out: BoolArray = self.owner == self.code(pool)
        return out

    def lendable_to(self, pool: str) -> BoolArray:
        """Hosts a job of ``pool`` may use: its pool's, and other pools' that are not kept for their demand."""
        own = self.owned_by(pool)
        if self.kept is None:
            return np.ones_like(own)
        out: BoolArray = own | ~self.kept
        return out

    def gpus(self, ix: FabricIndex, pool: str) -> int:
        return int(ix.host_gpus[self.owned_by(pool)].sum())


def _selection(ix: FabricIndex, sus: tuple[int, ...], hosts: tuple[str, ...]) -> IntArray:
    sel = np.zeros(ix.n_hosts, dtype=np.bool_)
    su = ix.level(Domain.SU)
    if sus and su is not None:
        sel |= np.isin(su.ids, np.array([s - 1 for s in sus], dtype=np.int64))
    for name in hosts:
        if ix.fabric.has_host(name):
            sel[ix.host_index(name)] = True
    return np.flatnonzero(sel).astype(np.int64)


def pool_busy(ix: FabricIndex, running: Mapping[str, RunningJob]) -> dict[str, IntArray]:
    """Per pool, the GPUs its running jobs hold on each host."""
    out: dict[str, IntArray] = {}
    for r in running.values():
        per = out.get(r.spec.pool)
        if per is None:
            per = out[r.spec.pool] = np.zeros(ix.n_hosts, dtype=np.int64)
        for t in r.allocation.tasks:
            per[ix.host_index(t.host)] += len(t.gpus)
    return out


def pool_map(
    ix: FabricIndex,
    calendar: Calendar,
    now_s: float,
    demand: tuple[PoolDemand, ...] = (),
    busy: Mapping[str, IntArray] | None = None,
) -> PoolMap:
    """``busy``: ``pool_busy`` of the running jobs (None: every selection in plain fabric order)."""
    names = calendar.pools
    owner = np.zeros(ix.n_hosts, dtype=np.int64)
    since = np.full(ix.n_hosts, -np.inf, dtype=np.float64)
    taken = np.zeros(ix.n_hosts, dtype=np.bool_)
    kept = np.zeros(ix.n_hosts, dtype=np.bool_)
    wanted = {d.pool: d for d in demand}
    for share in calendar.shares_at(now_s):
        sel = _selection(ix, share.sus, share.hosts)
        sel = sel[~taken[sel]]
        held = busy.get(share.pool) if busy is not None else None
        if held is not None and sel.size:
            # Stable sort: hosts with more of the pool's GPUs in use first, fabric order among equals.
            sel = sel[np.argsort(-held[sel], kind="stable")]
        n = sel.size
        k_now, k_before = round(share.fraction * n), round(share.previous_fraction * n)
        code = names.index(share.pool)
        owner[sel[:k_now]] = code
        lo, hi = sorted((k_now, k_before))
        since[sel[lo:hi]] = share.since_s
        d = wanted.get(share.pool)
        if d is not None:
            need = np.cumsum(ix.host_gpus[sel]) < d.gpus
            kept[sel[: min(int(need.sum()) + 1, n)]] = True  # the first hosts (its services' first) cover it
            have = int(ix.host_gpus[sel[:k_now]].sum())
            extra = k_now
            while have < d.gpus and extra < n:
                owner[sel[extra]] = code
                since[sel[extra]] = max(float(since[sel[extra]]), d.since_s)
                have += int(ix.host_gpus[sel[extra]])
                extra += 1
            k_now = extra
        taken[sel[:k_now]] = True
    return PoolMap(names, owner, since, kept if demand else None)
