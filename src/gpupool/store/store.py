"""``Store``: the durable store's one entry point, built from a database URL.

Use cases are methods, each one short transaction with no network call inside (jobs in ``jobs``, the
operator's records in ``admin``); metering and the start-up load, which read across tables, live here.
"""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import case, func, or_, select

from gpupool.domain.errors import InputError
from gpupool.domain.jobs import MILLI_PER_GPU
from gpupool.domain.states import JobState
from gpupool.store.admin import AdminMixin, node_record, stored_fabric
from gpupool.store.arrays import ArraysMixin
from gpupool.store.commands import CommandsMixin
from gpupool.store.jobs import allocation_from_rows, job_record
from gpupool.store.lease import LeaseMixin
from gpupool.store.ranks import RanksMixin
from gpupool.store.records import LoadedState, UsageTotal
from gpupool.store.rows import AllocationRow, FabricRow, JobRow, NodeRow, UsageIntervalRow

_LIVE = (JobState.PENDING.value, JobState.PLACED.value, JobState.RUNNING.value)


class Store(RanksMixin, ArraysMixin, AdminMixin, LeaseMixin, CommandsMixin):
    """The durable store. ``Store("sqlite:///data/gpupool.db")`` or ``Store("postgresql+psycopg://...")``.

    Call ``migrate()`` once at start-up. Every method is safe to call from several threads at once.
    """

    def usage(self, from_s: float, to_s: float) -> list[UsageTotal]:
        """GPU-seconds per (tenant, GPU model, pool) in ``[from_s, to_s)``; intervals are clipped to the window,
        still-open ones end now, and a share of a GPU counts milli/1000 of its time."""
        if to_s < from_s:
            raise InputError(f"usage window ends ({to_s}) before it starts ({from_s})", source="usage")
        u = UsageIntervalRow
        now = self._clock()
        end = func.coalesce(u.end_s, now)
        start_c = case((u.start_s > from_s, u.start_s), else_=from_s)
        end_c = case((end < to_s, end), else_=to_s)
        seconds = func.sum((end_c - start_c) * u.milli_gpu)
        q = (
            select(u.tenant, u.gpu_model, u.pool, seconds)
            .where(u.start_s < to_s, or_(u.end_s.is_(None), u.end_s > from_s), end_c > start_c)
            .group_by(u.tenant, u.gpu_model, u.pool)
            .order_by(u.tenant, u.gpu_model, u.pool)
        )
        with self._tx(write=False) as s:
            rows = s.execute(q).all()
        return [UsageTotal(t, m, p, float(milli_s or 0.0) / MILLI_PER_GPU) for t, m, p, milli_s in rows]

    def load_state(self) -> LoadedState:
        """Live jobs, their allocations, nodes and the fabric, read in one transaction (one consistent view)."""
        with self._tx(write=False) as s:
            jobs = s.scalars(
                select(JobRow).where(JobRow.state.in_(_LIVE)).order_by(JobRow.submit_time_s, JobRow.id)
            ).all()
            by_job: dict[str, list[AllocationRow]] = defaultdict(list)
            releasing: dict[str, list[AllocationRow]] = defaultdict(list)
            for a in s.scalars(select(AllocationRow)):
                (by_job if a.releasing_s is None else releasing)[a.job_id].append(a)
            nodes = s.scalars(select(NodeRow).order_by(NodeRow.name)).all()
            fabric = s.get(FabricRow, 1)
            return LoadedState(
                jobs=tuple(job_record(r) for r in jobs),
                allocations=tuple(allocation_from_rows(j, by_job[j]) for j in sorted(by_job)),
                nodes=tuple(node_record(n) for n in nodes),
                fabric=None if fabric is None else stored_fabric(fabric),
                releasing=tuple(allocation_from_rows(j, releasing[j]) for j in sorted(releasing)),
            )
