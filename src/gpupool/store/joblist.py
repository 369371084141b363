"""The jobs list: filtered, searched, sorted and paged in the database, with each job's current run.

One query serves ``GET /v1/jobs``, the CLI and the dashboard: a page (``limit``, ``offset``) of the jobs that
match, ``total`` (how many match in all), and with each job the run it is on or last had (started, ended,
exit code), joined from ``job_attempts`` so a page costs two statements whatever its size.

"Active" is a job that holds or wants GPUs: pending, placed or running, or ended while one of its ranks is
still releasing its GPUs (its agent has not yet confirmed the process gone). The default order shows active
jobs first, newest first; every order ends in (submit time, id), so pages never overlap or skip.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import ColumnElement, and_, case, func, literal, not_, or_, select
from sqlalchemy.engine import Row
from sqlalchemy.orm import InstrumentedAttribute, Session
from sqlalchemy.sql import Select
from sqlalchemy.sql.elements import UnaryExpression

from gpupool.domain.errors import InputError
from gpupool.domain.states import JobState
from gpupool.store.base import StoreBase, loads
from gpupool.store.jobs import job_record
from gpupool.store.records import JobRecord
from gpupool.store.rows import AllocationRow, AuditRow, JobAttemptRow, JobRow

ACTIVE_STATES = (JobState.PENDING, JobState.PLACED, JobState.RUNNING)
MAX_PAGE = 1000
# The lifecycle's order, for ``sort=state``: waiting, holding, then how it ended.
_STATE_ORDER = (
    JobState.PENDING,
    JobState.PLACED,
    JobState.RUNNING,
    JobState.FINISHED,
    JobState.FAILED,
    JobState.TIMEOUT,
    JobState.CANCELLED,
)


class JobSort(StrEnum):
    DEFAULT = "default"  # active first, then newest first
    SUBMITTED = "submitted"
    NAME = "name"
    STATE = "state"  # lifecycle order: pending, placed, running, finished, failed, timeout, cancelled
    TENANT = "tenant"
    GPUS = "gpus"
    RUNTIME = "runtime"  # the current (or last) run's: started to ended, or to now while it runs


# The direction each sort takes when none is asked for: what an operator looks for first.
NATURAL_DESC = frozenset({JobSort.DEFAULT, JobSort.SUBMITTED, JobSort.GPUS, JobSort.RUNTIME})


@dataclass(frozen=True, slots=True)
class JobQuery:
    """Which jobs, in which order, which page. Empty ``states``: any state."""

    states: frozenset[JobState] = frozenset()
    active: bool | None = None
    tenant: str | None = None
    pool: str | None = None
    array_id: str | None = None
    text: str | None = None  # a case-insensitive part of the name, or the start of the id
    submitted_after: float | None = None  # submit time >= this
    submitted_before: float | None = None  # submit time < this
    sort: JobSort = JobSort.DEFAULT
    descending: bool | None = None  # None: the sort's natural direction
    limit: int = 100
    offset: int = 0


@dataclass(frozen=True, slots=True)
class ListedJob:
    """A job as listed: its record and its current (or last) run; the run's fields are None before it ran."""

    record: JobRecord
    started_s: float | None
    ended_s: float | None
    exit_code: int | None


@dataclass(frozen=True, slots=True)
class JobPage:
    jobs: tuple[ListedJob, ...]
    total: int  # jobs matching the query, over all pages


def _active(releasing: Sequence[str]) -> ColumnElement[bool]:
    """Active: a live state, or one of ``releasing`` (the jobs with a rank still releasing: a few at most, read
    first, so the test per row is a lookup in a short list rather than a subquery)."""
    live = JobRow.state.in_([s.value for s in ACTIVE_STATES])
    return or_(live, JobRow.id.in_(list(releasing))) if releasing else live


def _filters(q: JobQuery, releasing: Sequence[str]) -> list[ColumnElement[bool]]:
    out: list[ColumnElement[bool]] = []
    if q.states:
        out.append(JobRow.state.in_(sorted(s.value for s in q.states)))
    if q.active is not None:
        out.append(_active(releasing) if q.active else not_(_active(releasing)))
    if q.tenant is not None:
        out.append(JobRow.tenant == q.tenant)
    if q.pool is not None:
        out.append(JobRow.pool == q.pool)
    if q.array_id is not None:
        out.append(JobRow.array_id == q.array_id)
    if q.text:
        out.append(or_(JobRow.name.icontains(q.text, autoescape=True), JobRow.id.startswith(q.text, autoescape=True)))
    if q.submitted_after is not None:
        out.append(JobRow.submit_time_s >= q.submitted_after)
    if q.submitted_before is not None:
        out.append(JobRow.submit_time_s < q.submitted_before)
    return out


def check_query(q: JobQuery) -> None:
    """A query the list can answer, or an InputError naming the parameter."""
    if not 1 <= q.limit <= MAX_PAGE:
        raise InputError(f"limit is 1..{MAX_PAGE}, got {q.limit}", source="limit")
    if q.offset < 0:
        raise InputError(f"offset is 0 or more, got {q.offset}", source="offset")
    if q.submitted_after is not None and q.submitted_before is not None and q.submitted_after >= q.submitted_before:
        raise InputError("submitted_after must be before submitted_before", source="submitted_after")


def _bytewise(
    col: ColumnElement[str] | InstrumentedAttribute[str], postgres: bool
) -> ColumnElement[str] | InstrumentedAttribute[str]:
    return col.collate("C") if postgres else col


_Listing = Select[JobRow, float | None, float | None, int | None]
_ListedRow = Row[JobRow, float | None, float | None, int | None]


class JobListMixin(StoreBase):
    def job_page(self, q: JobQuery) -> JobPage:
        """One page of the jobs ``q`` matches, in its order, with how many match in all (one transaction: the
        page and its total agree)."""
        check_query(q)
        with self._tx(write=False) as s:
            now = self._clock()
            releasing = s.scalars(select(AllocationRow.job_id).where(AllocationRow.releasing_s.is_not(None)).distinct())
            held = tuple(releasing)
            where = _filters(q, held)
            total = int(s.scalar(select(func.count()).select_from(JobRow).where(*where)) or 0)
            rows: list[_ListedRow]
            if q.sort is JobSort.DEFAULT:
                rows = self._default_page(s, q, where, held, now)
            else:
                rows = list(s.execute(_page(where, _ordered(q, now, self._postgres), q.offset, q.limit)))
            jobs = tuple(ListedJob(job_record(r[0]), r[1], r[2], r[3]) for r in rows)
        return JobPage(jobs, total)

    def _default_page(
        self, s: Session, q: JobQuery, where: list[ColumnElement[bool]], held: Sequence[str], now: float
    ) -> list[_ListedRow]:
        """Active first, then the rest, each newest first: two reads in submit order that the indexes serve
        and stop at the page's end, instead of sorting every match by a computed key."""
        by_time = _ordered(dataclasses.replace(q, sort=JobSort.SUBMITTED), now, self._postgres)
        active = [*where, _active(held)]
        n_active = int(s.scalar(select(func.count()).select_from(JobRow).where(*active)) or 0)
        rows: list[_ListedRow] = []
        if q.offset < n_active:
            rows += s.execute(_page(active, by_time, q.offset, q.limit))
        if len(rows) < q.limit:
            rest = [*where, not_(_active(held))]
            rows += s.execute(_page(rest, by_time, max(0, q.offset - n_active), q.limit - len(rows)))
        return rows

    def jobs_by_id(self, job_ids: Sequence[str]) -> list[JobRecord]:
        """The stored jobs of ``job_ids`` (those not stored left out), in no particular order."""
        if not job_ids:
            return []
        with self._tx(write=False) as s:
            return [job_record(r) for r in s.scalars(select(JobRow).where(JobRow.id.in_(list(job_ids))))]


def _page(
    where: Sequence[ColumnElement[bool]], order: Sequence[UnaryExpression[Any]], offset: int, limit: int
) -> _Listing:
    """The matching jobs with their current run (joined from ``job_attempts``), ordered and cut to a page."""
    run = JobAttemptRow
    joined = and_(run.job_id == JobRow.id, run.attempt == JobRow.attempt)
    stmt = select(JobRow, run.started_s, run.ended_s, run.exit_code).outerjoin(run, joined).where(*where)
    return stmt.order_by(*order).offset(offset).limit(limit)


def _ordered(q: JobQuery, now: float, postgres: bool) -> list[UnaryExpression[Any]]:
    """``q``'s order for every sort but the default (``_default_page``), ended by (submit time, id) in the
    same direction, so pages never overlap. Text sorts by code point on both databases (PostgreSQL's ``C``
    collation is SQLite's own), so the same jobs come in the same order whichever stores them."""
    desc = q.sort in NATURAL_DESC if q.descending is None else q.descending
    run = JobAttemptRow

    def way(col: ColumnElement[Any] | InstrumentedAttribute[Any]) -> UnaryExpression[Any]:
        return col.desc().nulls_last() if desc else col.asc().nulls_last()

    keys: list[UnaryExpression[Any]] = []
    if q.sort is JobSort.NAME:
        keys = [way(_bytewise(func.lower(JobRow.name), postgres))]
    elif q.sort is JobSort.STATE:
        rank = case(*((JobRow.state == s.value, i) for i, s in enumerate(_STATE_ORDER)), else_=len(_STATE_ORDER))
        keys = [way(rank)]
    elif q.sort is JobSort.TENANT:
        keys = [way(_bytewise(JobRow.tenant, postgres))]
    elif q.sort is JobSort.GPUS:
        keys = [way(JobRow.gpu_milli)]
    elif q.sort is JobSort.RUNTIME:
        keys = [way(func.coalesce(run.ended_s, literal(now)) - run.started_s)]
    if desc:
        return [*keys, JobRow.submit_time_s.desc(), JobRow.id.desc()]
    return [*keys, JobRow.submit_time_s.asc(), JobRow.id.asc()]


@dataclass(frozen=True, slots=True)
class RankRecord:
    """One rank of a job's latest placement, as its rows say (``store.ranks``)."""

    rank: int
    host: str
    gpus: tuple[int, ...]
    placed_s: float | None
    launched_s: float | None
    started_s: float | None
    exited_s: float | None
    exit_code: int | None
    lost: bool
    releasing_s: float | None


class ViewsMixin(StoreBase):
    """What the operator's views read beyond jobs: a job's ranks, GPUs held per node, why nodes are out."""

    def gpus_held(self) -> dict[str, float]:
        """GPUs held per node by every rank with a row (running, placed, or releasing until its process is
        gone): whole GPUs count one each, a share its fraction."""
        out: dict[str, float] = {}
        with self._tx(write=False) as s:
            for host, gpus, milli in s.execute(select(AllocationRow.host, AllocationRow.gpus, AllocationRow.milli_gpu)):
                n = len(loads(gpus, f"allocation on {host}"))
                out[host] = out.get(host, 0.0) + n * milli / 1000
        return out

    def node_reasons(self, names: Sequence[str]) -> dict[str, str]:
        """Why each of ``names`` is in its current state: the reason of its last state change (a drain's)."""
        if not names:
            return {}
        subjects = {f"node/{n}": n for n in names}
        q = select(AuditRow.subject, AuditRow.data).where(
            AuditRow.subject.in_(list(subjects)), AuditRow.action.in_(["node.drained", "node.lost", "node.up"])
        )
        out: dict[str, str] = {}
        with self._tx(write=False) as s:
            for subject, data in s.execute(q.order_by(AuditRow.id)):
                reason = loads(data, f"audit of {subject}").get("reason", "")
                out[subjects[subject]] = str(reason)
        return out

    def job_ranks(self, job_id: str) -> list[RankRecord]:
        """The ranks of the job's latest placement that still have rows: live ones, and releasing ones until
        their agent confirms them gone (a job that left placed/running keeps no ended rank)."""
        with self._tx(write=False) as s:
            rows = s.scalars(
                select(AllocationRow)
                .where(AllocationRow.job_id == job_id)
                .order_by(AllocationRow.assignment.desc(), AllocationRow.task_index)
            ).all()
        latest = [r for r in rows if r.assignment == rows[0].assignment] if rows else []
        return [
            RankRecord(
                r.task_index,
                r.host,
                tuple(int(g) for g in loads(r.gpus, f"allocation of job {job_id}")),
                r.placed_s,
                r.launched_s,
                r.started_s,
                r.exited_s,
                r.exit_code,
                bool(r.lost),
                r.releasing_s,
            )
            for r in latest
        ]
