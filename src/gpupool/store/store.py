"""``Store``: the durable store's one entry point, built from a database URL.

Use cases are methods, each one short transaction with no network call inside (jobs in ``jobs``, the
operator's records in ``admin``); metering and the start-up load, which read across tables, live here.
"""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import select

from gpupool.domain.states import JobState
from gpupool.store.accounting import AccountingMixin
from gpupool.store.admin import AdminMixin, node_record, stored_fabric
from gpupool.store.arrays import ArraysMixin
from gpupool.store.commands import CommandsMixin
from gpupool.store.joblist import JobListMixin, ViewsMixin
from gpupool.store.jobs import allocation_from_rows, job_record
from gpupool.store.lease import LeaseMixin
from gpupool.store.ranks import RanksMixin
from gpupool.store.records import LoadedState
from gpupool.store.rows import AllocationRow, FabricRow, JobRow, NodeRow
from gpupool.store.tokens import TokensMixin

_LIVE = (JobState.PENDING.value, JobState.PLACED.value, JobState.RUNNING.value)


class Store(
    JobListMixin,
    ViewsMixin,
    RanksMixin,
    ArraysMixin,
    AdminMixin,
    LeaseMixin,
    CommandsMixin,
    AccountingMixin,
    TokensMixin,
):
    """The durable store. ``Store("sqlite:///data/gpupool.db")`` or ``Store("postgresql+psycopg://...")``.

    Call ``migrate()`` once at start-up. Every method is safe to call from several threads at once.
    """

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
