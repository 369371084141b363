"""Each rank's lifecycle, stored with its allocation, and the gang transitions decided from it.

An agent reports a rank (one assignment id: job, allocation number, rank) as running, exited with a code, or
lost. Whichever replica receives the report stores it and, in the same short transaction, moves the job as
the ranks of its CURRENT allocation now say: placed -> running when every rank started, finished when every
rank exited 0, failed when one exited otherwise or was lost. The job row is locked first (``FOR UPDATE`` on
PostgreSQL; SQLite's one writer already serialises), so two replicas storing the last two exits of one gang
at once cannot each miss the other's and leave it running. Nothing lives in a process's memory: a restart,
a failover, or heartbeats spread over replicas change nothing.

The watchdog half (``rank_watch``) judges a node's beat against its stored ranks: a rank placed long ago that
its agent still does not run was never launched (the job is requeued), a rank its agent ran but no longer
lists without ever reporting its end was lost by it (the job fails).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, insert, select, update
from sqlalchemy.orm import Session

from gpupool.domain.errors import StaleVersionError
from gpupool.domain.jobs import Allocation, RetryOn
from gpupool.domain.states import JOB_TRANSITIONS, JobState, transition
from gpupool.store.base import StoreBase, dumps
from gpupool.store.jobs import (
    CAUSE_OUTCOME,
    HOLDING,
    JobsMixin,
    RunEnd,
    allocation_from_rows,
    end_runs,
    job_record,
    retry_decision,
    table_of,
)
from gpupool.store.rows import AllocationRow, AuditRow, JobAttemptRow, JobRow


@dataclass(frozen=True, slots=True)
class RankReport:
    """One rank's state as its agent reported it (``state``: running, exited or lost)."""

    job_id: str
    allocation: int
    rank: int
    host: str
    state: str
    exit_code: int | None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RankOutcome:
    """What storing a report did: ``stored`` False for a rank no live allocation has (stale: nothing to keep,
    the agent may stop repeating it); ``changed`` when a rank column or the job's state moved."""

    stored: bool
    changed: bool
    state: JobState | None


def parse_assignment_id(aid: str) -> tuple[str, int, int] | None:
    """``job.allocation.rank`` -> its three parts (a job id may contain dots), or None if malformed."""
    parts = aid.rsplit(".", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return parts[0], int(parts[1]), int(parts[2])


@dataclass(frozen=True, slots=True)
class _Verdict:
    state: JobState | None  # what the ranks call for; None: nothing decided yet
    why: str = ""
    exit_code: int | None = None  # the failing rank's (0 when every rank exited 0)
    cause: RetryOn | None = None  # a failure's cause, as a retry policy counts it


def _verdict(rows: Sequence[_Rank]) -> _Verdict:
    """The state the ranks of one allocation call for, and why."""
    if not rows:
        return _Verdict(None)
    for r in rows:
        if r.lost:
            why = f"rank {r.task_index} on {r.host} was lost by its agent"
            return _Verdict(JobState.FAILED, why, None, RetryOn.NODE_LOST)
        if r.exited_s is not None and r.exit_code != 0:
            why = f"rank {r.task_index} on {r.host} exited with {r.exit_code}"
            return _Verdict(JobState.FAILED, why, r.exit_code, RetryOn.FAILURE)
    if all(r.exited_s is not None for r in rows):
        return _Verdict(JobState.FINISHED, "every rank exited 0", 0)
    if all(r.started_s is not None for r in rows):
        return _Verdict(JobState.RUNNING, "every rank started")
    return _Verdict(None)


class _Job:
    """A job locked by ``record_ranks`` (its columns the moves need) and its state and version as the batch's
    moves so far leave them (the row itself is written once, at the end)."""

    __slots__ = ("attempt", "id", "state", "version")

    def __init__(self, id: str, state: str, version: int, attempt: int | None) -> None:
        self.id, self.state, self.version, self.attempt = id, JobState(state), version, attempt


class _Rank:
    """A live rank's row as ``record_ranks`` read it, changed in memory by the batch's reports (``dirty``) and
    written once at the end."""

    COLUMNS = ("job_id", "assignment", "task_index", "host", "launched_s", "started_s", "exited_s", "exit_code", "lost")
    __slots__ = (*COLUMNS, "dirty")

    def __init__(self, row: Sequence[Any]) -> None:
        self.job_id: str = row[0]
        self.assignment: int = row[1]
        self.task_index: int = row[2]
        self.host: str = row[3]
        self.launched_s: float | None = row[4]
        self.started_s: float | None = row[5]
        self.exited_s: float | None = row[6]
        self.exit_code: int | None = row[7]
        self.lost = bool(row[8])
        self.dirty = False


@dataclass(frozen=True, slots=True)
class _Move:
    """One step of a job's state decided by ``record_ranks``: from ``current`` at ``version`` to ``new``."""

    job_id: str
    version: int
    current: JobState
    new: JobState
    reason: str
    actor: str
    now: float
    outcome: str = ""
    exit_code: int | None = None


class RanksMixin(JobsMixin, StoreBase):
    def record_rank(self, report: RankReport, actor: str) -> RankOutcome:
        """Store ``report`` on its rank's row and move the job as its current allocation's ranks now say."""
        return self.record_ranks([(report, actor)])[0]

    def record_ranks(self, reports: Sequence[tuple[RankReport, str]]) -> list[RankOutcome]:
        """``record_rank`` for each (report, actor), in order, in one transaction: the outcome of each is what it
        would have been stored alone after the ones before it. The jobs are locked together (in id order, so
        two replicas' batches cannot deadlock) and their live ranks read in one statement; the jobs' moves are
        decided report by report (on the states the batch's earlier moves left) and written at the end, each
        kind of statement once for all of them (``_write_moves``)."""
        if not reports:
            return []
        jobs_t, allocs = table_of(JobRow), table_of(AllocationRow)
        with self._tx(write=True) as s:
            conn = s.connection()  # Core reads and writes: no ORM entity is loaded or flushed here
            ids = sorted({r.job_id for r, _ in reports})
            lock = (
                select(jobs_t.c.id, jobs_t.c.state, jobs_t.c.version, jobs_t.c.attempt)
                .where(jobs_t.c.id.in_(ids))
                .order_by(jobs_t.c.id)
            )
            jobs = {j[0]: _Job(*j) for j in conn.execute(lock.with_for_update() if self._postgres else lock)}
            live = [j for j, job in jobs.items() if job.state in HOLDING]
            ranks: dict[str, list[_Rank]] = defaultdict(list)
            if live:
                cols = [allocs.c[n] for n in _Rank.COLUMNS]
                q = select(*cols).where(allocs.c.job_id.in_(live), allocs.c.releasing_s.is_(None))
                for row in conn.execute(q.order_by(allocs.c.job_id, allocs.c.task_index)):
                    ranks[row[0]].append(_Rank(row))
            out: list[RankOutcome] = []
            moves: list[_Move] = []
            for report, actor in reports:
                job = jobs.get(report.job_id)
                out.append(self._record(s, job, ranks.get(report.job_id, []), report, actor, moves))
            self._write_ranks(conn, [r for rows in ranks.values() for r in rows if r.dirty])
            if moves:
                self._write_moves(conn, moves)
            return out

    @staticmethod
    def _write_ranks(conn: Connection, ranks: Sequence[_Rank]) -> None:
        """The rank columns the batch's reports changed, one executemany (before the jobs' guarded updates)."""
        if not ranks:
            return
        allocs = table_of(AllocationRow)
        key = (allocs.c.job_id == bindparam("b_job"), allocs.c.assignment == bindparam("b_alloc"))
        conn.execute(
            update(allocs)
            .where(*key, allocs.c.task_index == bindparam("b_rank"))
            .values(
                launched_s=bindparam("b_launched"),
                started_s=bindparam("b_started"),
                exited_s=bindparam("b_exited"),
                exit_code=bindparam("b_code"),
                lost=bindparam("b_lost"),
            ),
            [
                {"b_job": r.job_id, "b_alloc": r.assignment, "b_rank": r.task_index, "b_launched": r.launched_s}
                | {"b_started": r.started_s, "b_exited": r.exited_s, "b_code": r.exit_code, "b_lost": r.lost}
                for r in ranks
            ],
        )

    def _record(
        self,
        s: Session,
        job: _Job | None,
        rows: Sequence[_Rank],
        report: RankReport,
        actor: str,
        moves: list[_Move],
    ) -> RankOutcome:
        """One report inside ``record_ranks``' transaction (``rows``: the job's live ranks as read there); the job's
        move, if the ranks call for one, is added to ``moves`` and to ``job``'s state."""
        if job is None or job.state not in HOLDING:
            return RankOutcome(False, False, None if job is None else job.state)
        row = next((r for r in rows if (r.assignment, r.task_index) == (report.allocation, report.rank)), None)
        if row is None or row.host != report.host:
            return RankOutcome(False, False, job.state)  # an earlier allocation's rank
        now = self._clock()
        changed = self._note(row, report, now)
        if report.reason and report.state == "exited" and report.exit_code != 0:
            why_extra = f": {report.reason}"
        else:
            why_extra = ""
        added = self._decide(s, job, rows, why_extra, actor, now)  # every time: a repeat may complete it
        moves += added
        return RankOutcome(True, changed or bool(added), job.state)

    @staticmethod
    def _note(row: _Rank, report: RankReport, now: float) -> bool:
        if row.exited_s is not None or row.lost:
            return False  # an end is final: a repeat (or a late "running") changes nothing
        before = (row.launched_s, row.started_s)
        row.launched_s = row.launched_s or now
        if report.state in ("running", "exited"):
            row.started_s = row.started_s or now
        if report.state == "exited":
            row.exited_s, row.exit_code = now, report.exit_code
        elif report.state == "lost":
            row.exited_s, row.lost = now, True
        elif (row.launched_s, row.started_s) == before:
            return False
        row.dirty = True
        return True

    @staticmethod
    def _decide(s: Session, job: _Job, rows: Sequence[_Rank], extra: str, actor: str, now: float) -> list[_Move]:
        """The moves the ranks call for (none, one, or placed -> running -> finished), applied to ``job``'s state
        and version as they will be stored."""
        current = job.state
        v = _verdict(rows)
        verdict, why = v.state, v.why
        if verdict is None or verdict is current:
            return []
        outcome = verdict.value
        if verdict is JobState.FAILED:
            why += extra
            assert v.cause is not None
            row = s.get(JobRow, job.id)  # the whole row (its spec's retry policy): only for a failure
            assert row is not None  # locked by this transaction
            again, note = retry_decision(s, row, job_record(row).spec, v.cause)
            if again:  # run again: this run ends failed (or lost), the job goes back to the queue
                verdict, outcome = JobState.PENDING, CAUSE_OUTCOME[v.cause]
            if note:
                why = f"attempt {job.attempt}: {why}; {note}"
        # Placed -> finished passes through running (every rank did start); placed -> failed is its own edge.
        steps = [JobState.RUNNING, verdict] if (current, verdict) == (JobState.PLACED, JobState.FINISHED) else [verdict]
        out = []
        for step in steps:
            transition(JOB_TRANSITIONS, job.state, step, f"job {job.id}")
            if step is JobState.RUNNING:
                move = _Move(job.id, job.version, job.state, step, "every rank started", actor, now)
            else:
                move = _Move(job.id, job.version, job.state, step, why, actor, now, outcome, v.exit_code)
            out.append(move)
            job.state, job.version = step, job.version + 1
        return out

    @staticmethod
    def _write_moves(conn: Connection, moves: Sequence[_Move]) -> None:
        """Store ``moves`` (in order; a job's second move follows its first): each statement once, executemany.
        The jobs' update is guarded by version as ``_bump``'s is (the rows are locked, so it cannot miss); a
        move out of the holding states frees the job's ranks and ends its run (``end_runs``, as ``_free`` does)."""
        jobs, attempts = table_of(JobRow), table_of(JobAttemptRow)
        guarded = conn.execute(
            update(jobs)
            .where(jobs.c.id == bindparam("b_id"), jobs.c.version == bindparam("b_version"))
            .values(
                state=bindparam("b_state"),
                version=bindparam("b_next"),
                reason_code="",
                reason=bindparam("b_reason"),
                wait_class=None,
                updated_s=bindparam("b_now"),
            ),
            [
                {"b_id": m.job_id, "b_version": m.version, "b_next": m.version + 1}
                | {"b_state": m.new.value, "b_reason": m.reason, "b_now": m.now}
                for m in moves
            ],
        )
        if conn.dialect.supports_sane_multi_rowcount and getattr(guarded, "rowcount", len(moves)) != len(moves):
            raise StaleVersionError("a job reported on was changed by another writer during this update")
        started = [{"b_id": m.job_id, "b_now": m.now} for m in moves if m.new is JobState.RUNNING]
        if started:
            conn.execute(
                update(attempts)
                .where(attempts.c.job_id == bindparam("b_id"), attempts.c.ended_s.is_(None))
                .values(started_s=bindparam("b_now"), state=JobState.RUNNING.value),
                started,
            )
        end_runs(
            conn,
            [
                RunEnd(m.job_id, m.now, m.outcome or m.new.value, m.reason, m.exit_code)
                for m in moves
                if m.new not in HOLDING
            ],
        )
        conn.execute(
            insert(table_of(AuditRow)),
            [
                {
                    "at_s": m.now,
                    "actor": m.actor,
                    "action": f"job.{m.new.value}",
                    "subject": f"job/{m.job_id}",
                    "data": dumps({"from": m.current.value, "to": m.new.value, "reason": m.reason}),
                }
                for m in moves
            ],
        )

    # -- the watchdog ------------------------------------------------------------------------------------------
    def rank_watch(self, host: str, running: Collection[str], launch_after_s: float, actor: str) -> list[str]:
        """Judge ``host``'s beat (``running``: the assignment ids its agent runs or just reported) against its
        stored live ranks. A rank placed over ``launch_after_s`` ago that the agent never ran: its job goes
        back to the queue. A rank it ran (launched that long ago) but no longer lists, with no end reported:
        lost, the job fails. Returns the jobs moved."""
        now = self._clock()
        moved: list[str] = []
        with self._tx(write=False) as s:
            q = (
                select(AllocationRow.job_id, AllocationRow.assignment, AllocationRow.task_index)
                .join(JobRow, JobRow.id == AllocationRow.job_id)
                .where(
                    AllocationRow.host == host,
                    JobRow.state.in_([st.value for st in HOLDING]),
                    AllocationRow.exited_s.is_(None),
                    AllocationRow.releasing_s.is_(None),
                )
            )
            candidates = [
                (j, a, r, placed, launched)
                for j, a, r, placed, launched in s.execute(
                    q.add_columns(AllocationRow.placed_s, AllocationRow.launched_s)
                )
                if f"{j}.{a}.{r}" not in running
            ]
        for job_id, alloc, rank, placed, launched in candidates:
            if launched is not None and now - launched > launch_after_s:
                out = self.record_rank(RankReport(job_id, alloc, rank, host, "lost", None), actor)
                if out.changed:
                    moved.append(job_id)
            elif placed is not None and now - placed > launch_after_s:
                why = f"rank {rank} was never launched on {host} ({now - placed:.0f} s after its placement)"
                if self._requeue(job_id, alloc, rank, why, actor):
                    moved.append(job_id)
        return moved

    def _requeue(self, job_id: str, alloc: int, rank: int, why: str, actor: str) -> bool:
        """Requeue ``job_id`` if (job, alloc, rank) is still its live, never launched rank: one transaction."""
        with self._tx(write=True) as s:
            lock = select(JobRow).where(JobRow.id == job_id)
            job = s.scalar(lock.with_for_update() if self._postgres else lock)
            row = s.get(AllocationRow, (job_id, alloc, rank))
            if (
                job is None
                or JobState(job.state) not in HOLDING
                or row is None
                or row.launched_s is not None
                or row.releasing_s is not None
            ):
                return False
            now, before = self._clock(), job.state
            self._guard(s, job_id, job.version, JobState.PENDING)
            self._bump(s, job, JobState.PENDING, "rank_not_launched", why, now)
            self._free(s, job_id, now, "requeued", why)
            data = {"from": before, "to": JobState.PENDING.value, "reason": why}
            self._audit(s, actor, "job.pending", f"job/{job_id}", data, now)
            return True

    # -- releasing ranks ---------------------------------------------------------------------------------------
    def release_ranks(self, host: str, assignment_ids: Collection[str]) -> int:
        """Free the releasing ranks of ``host`` named (their agent confirmed their processes gone): their GPUs
        become placeable. A rank that is not releasing is left alone. Returns how many were freed."""
        keys = [k for k in map(parse_assignment_id, assignment_ids) if k is not None]
        if not keys:
            return 0
        freed = 0
        with self._tx(write=True) as s:
            for job_id, alloc, rank in keys:
                row = s.get(AllocationRow, (job_id, alloc, rank))
                if row is not None and row.host == host and row.releasing_s is not None:
                    s.delete(row)
                    freed += 1
        return freed

    def releasing_allocations(self) -> dict[str, Allocation]:
        """Per job, its releasing ranks (the scheduling loop holds their GPUs): one read of those rows only."""
        by_job: dict[str, list[AllocationRow]] = defaultdict(list)
        with self._tx(write=False) as s:
            for row in s.scalars(select(AllocationRow).where(AllocationRow.releasing_s.is_not(None))):
                by_job[row.job_id].append(row)
        return {j: allocation_from_rows(j, rows) for j, rows in by_job.items()}
