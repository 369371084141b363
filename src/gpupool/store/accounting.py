"""Metering: GPU time per (tenant, GPU model, pool) in a window (``usage``) and the per-run accounting records
it is the sum of (``accounting``), both from ``usage_intervals`` clipped to the window with one expression.

A record is one run of a job (``job_attempts``): a retried job has one per attempt. Its GPU-seconds are its
run's usage intervals clipped to the window, so the records of a window always sum to its usage.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, case, func, or_, select

from gpupool.domain.errors import InputError
from gpupool.domain.jobs import MILLI_PER_GPU
from gpupool.store.base import StoreBase
from gpupool.store.jobs import attempt_record
from gpupool.store.records import AccountingRecord, UsageTotal
from gpupool.store.rows import JobAttemptRow, JobRow, UsageIntervalRow

MAX_PAGE = 10_000
# The furthest page start: past it SQLite's 64-bit OFFSET overflows (a Python OverflowError, not an answer).
MAX_OFFSET = 1_000_000_000


class AccountingMixin(StoreBase):
    def _clipped(self, from_s: float, to_s: float) -> tuple[ColumnElement[Any], ColumnElement[bool]]:
        """Milli-GPU-seconds of a usage interval inside ``[from_s, to_s)`` (still-open ones end now), and the
        condition that it has some."""
        if to_s < from_s:
            raise InputError(f"usage window ends ({to_s}) before it starts ({from_s})", source="usage")
        u = UsageIntervalRow
        end = func.coalesce(u.end_s, self._clock())
        start_c = case((u.start_s > from_s, u.start_s), else_=from_s)
        end_c = case((end < to_s, end), else_=to_s)
        inside = and_(u.start_s < to_s, or_(u.end_s.is_(None), u.end_s > from_s), end_c > start_c)
        return (end_c - start_c) * u.milli_gpu, inside

    def usage(self, from_s: float, to_s: float) -> list[UsageTotal]:
        """GPU-seconds per (tenant, GPU model, pool) in ``[from_s, to_s)``; intervals are clipped to the window,
        still-open ones end now, and a share of a GPU counts milli/1000 of its time."""
        u = UsageIntervalRow
        milli_s, inside = self._clipped(from_s, to_s)
        q = (
            select(u.tenant, u.gpu_model, u.pool, func.sum(milli_s))
            .where(inside)
            .group_by(u.tenant, u.gpu_model, u.pool)
            .order_by(u.tenant, u.gpu_model, u.pool)
        )
        with self._tx(write=False) as s:
            rows = s.execute(q).all()
        return [UsageTotal(t, m, p, float(ms or 0.0) / MILLI_PER_GPU) for t, m, p, ms in rows]

    def accounting(
        self, from_s: float, to_s: float, tenant: str | None = None, *, offset: int = 0, limit: int = 1000
    ) -> list[AccountingRecord]:
        """The runs that held GPUs in ``[from_s, to_s)`` or ran in it, oldest placement first, with their
        GPU-seconds in the window; ``tenant`` None: every tenant's. ``offset``/``limit`` page through them."""
        if not 0 < limit <= MAX_PAGE or not 0 <= offset <= MAX_OFFSET:
            raise InputError(f"a page has 1..{MAX_PAGE} records from offset 0..{MAX_OFFSET}", source="accounting")
        u, a = UsageIntervalRow, JobAttemptRow
        milli_s, inside = self._clipped(from_s, to_s)
        used = (
            select(u.job_id, u.attempt, func.sum(milli_s).label("milli_s"))
            .where(inside)
            .group_by(u.job_id, u.attempt)
            .subquery()
        )
        ran = and_(a.placed_s < to_s, or_(a.ended_s.is_(None), a.ended_s > from_s))
        q = (
            select(a, used.c.milli_s, JobRow.name, JobRow.submit_time_s, JobRow.submitted_by)
            .join(JobRow, JobRow.id == a.job_id)
            .outerjoin(used, and_(used.c.job_id == a.job_id, used.c.attempt == a.attempt))
            .where(or_(ran, used.c.job_id.is_not(None)))
            .order_by(a.placed_s, a.job_id, a.attempt)
            .offset(offset)
            .limit(limit)
        )
        if tenant is not None:
            q = q.where(a.tenant == tenant)
        with self._tx(write=False) as s:
            rows = s.execute(q).all()
        return [
            AccountingRecord(attempt_record(row), name, submit_s, user, float(ms or 0.0) / MILLI_PER_GPU)
            for row, ms, name, submit_s, user in rows
        ]

    def finished_runs(self, limit: int = 5000) -> list[tuple[str, str, float]]:
        """(tenant, job name, seconds from start to end) of the last ``limit`` runs that finished, oldest first:
        the history expected starts take runtimes from (``scheduler.estimates``)."""
        a = JobAttemptRow
        q = (
            select(a.tenant, JobRow.name, a.ended_s - a.started_s)
            .join(JobRow, JobRow.id == a.job_id)
            .where(a.state == "finished", a.started_s.is_not(None), a.ended_s.is_not(None))
            .order_by(a.ended_s.desc(), a.job_id.desc())
            .limit(limit)
        )
        with self._tx(write=False) as s:
            rows = s.execute(q).all()
        return [(t, n, float(r or 0.0)) for t, n, r in reversed(rows)]
