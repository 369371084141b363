"""Jobs and their allocations: idempotent submit, guarded state changes, allocations checked inside the write.

Every state change goes through ``gpupool.domain.states.transition`` and is written as a guarded update
(``WHERE version = expected``) in the same transaction as its audit event, so a stale writer changes nothing.
An allocation is live while its job is placed or running: leaving those states closes the job's usage
intervals and deletes its ended ranks in the same transaction; ranks still running become releasing and keep
their GPUs (every placement check counts them) until their agent confirms their process gone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpupool.domain.errors import (
    ConflictError,
    GpupoolError,
    InputError,
    NotFoundError,
    ParseError,
    StaleVersionError,
)
from gpupool.domain.jobs import Allocation, JobSpec, RetryOn, TaskAllocation
from gpupool.domain.states import JOB_TRANSITIONS, JobState, transition
from gpupool.store.base import StoreBase, loads
from gpupool.store.codec import spec_from_json, spec_to_json
from gpupool.store.fencing import Fence
from gpupool.store.placements import Placement, PlacementRows, check_capacity, chunks, gpus_held, placeable
from gpupool.store.records import AttemptRecord, JobRecord
from gpupool.store.rows import AllocationRow, Base, JobAttemptRow, JobRow, NodeRow, UsageIntervalRow

HOLDING = frozenset({JobState.PLACED, JobState.RUNNING})  # the states in which a job holds GPUs
MAX_KEY = 256


def job_record(row: JobRow) -> JobRecord:
    source = f"job {row.id}"
    try:
        state = JobState(row.state)
    except ValueError:
        raise ParseError(f"stored state {row.state!r} is not a job state", source=source) from None
    code, reason = row.reason_code, row.reason
    if row.wait_class is not None and state is JobState.PENDING and row.class_code is not None:
        code, reason = row.class_code, row.class_reason or ""  # the shared reason it points at (``WaitClassRow``)
    return JobRecord(
        spec=spec_from_json(row.spec, source=f"{source} (spec)"),
        state=state,
        version=row.version,
        idempotency_key=row.idempotency_key,
        reason_code=code,
        reason=reason,
        created_s=row.created_s,
        updated_s=row.updated_s,
        attempt=row.attempt or 0,
    )


def attempt_record(row: JobAttemptRow) -> AttemptRecord:
    hosts = loads(row.hosts, f"attempt {row.attempt} of job {row.job_id}")
    return AttemptRecord(
        job_id=row.job_id,
        attempt=row.attempt,
        assignment=row.assignment,
        tenant=row.tenant,
        pool=row.pool,
        gpu_model=row.gpu_model,
        milli_gpu=row.milli_gpu,
        hosts=tuple(str(h) for h in hosts),
        placed_s=row.placed_s,
        started_s=row.started_s,
        ended_s=row.ended_s,
        state=row.state,
        exit_code=row.exit_code,
        reason=row.reason,
    )


# How a run that ended by each retry cause is recorded (``JobAttemptRow.state``): what a policy's count counts.
CAUSE_OUTCOME = {RetryOn.FAILURE: "failed", RetryOn.NODE_LOST: "node_lost", RetryOn.PREEMPTION: "preempted"}


def retry_decision(s: Session, job: JobRow, spec: JobSpec, cause: RetryOn) -> tuple[bool | None, str]:
    """Whether a run that just ended by ``cause`` is run again under the job's retry policy: True (a retry is
    left), False (the policy counts this cause and none is left: the job fails), None (the policy does not
    count it: the cause's usual outcome); and a note for the reason."""
    policy = spec.retry
    if policy is None or cause not in policy.on:
        return None, ""
    counted = [CAUSE_OUTCOME[c] for c in policy.on]
    used = s.scalar(select(func.count()).where(JobAttemptRow.job_id == job.id, JobAttemptRow.state.in_(counted))) or 0
    if used < policy.count:
        return True, f"retry {used + 1} of {policy.count}"
    return False, f"no retry left ({policy.count} used)"


def allocation_from_rows(job_id: str, rows: Sequence[AllocationRow]) -> Allocation:
    tasks = []
    for r in sorted(rows, key=lambda r: r.task_index):
        gpus = loads(r.gpus, f"allocation of job {job_id}")
        if not (isinstance(gpus, list) and all(isinstance(g, int) for g in gpus)):
            raise ParseError(f"stored GPU list {r.gpus!r} is not a list of indices", source=f"allocation of {job_id}")
        tasks.append(
            TaskAllocation(
                host=r.host,
                gpus=tuple(gpus),
                milli_gpu=r.milli_gpu,
                gpu_memory_mib=r.gpu_memory_mib,
                cpu_millicores=r.cpu_millicores,
                memory_mib=r.memory_mib,
            )
        )
    return Allocation(job_id=job_id, tasks=tuple(tasks))


class JobsMixin(StoreBase):
    def submit_job(self, spec: JobSpec, idempotency_key: str | None, actor: str) -> tuple[JobRecord, bool]:
        """Store a new pending job; ``(job, created)``. The same key again (per tenant) returns the first job.

        Concurrent submits with one key: the unique (tenant, key) constraint lets one insert win; the others
        get an IntegrityError, roll back, and read the winner's job in a fresh transaction.
        """
        if idempotency_key is not None and not 0 < len(idempotency_key) <= MAX_KEY:
            raise InputError(f"an idempotency key has 1..{MAX_KEY} characters", source=f"job {spec.job_id}")
        try:
            with self._tx(write=True) as s:
                if idempotency_key is not None:
                    # Under SQLite's BEGIN IMMEDIATE this read is serialised with every other writer.
                    row = s.scalar(
                        select(JobRow).where(JobRow.tenant == spec.tenant, JobRow.idempotency_key == idempotency_key)
                    )
                    if row is not None:
                        return job_record(row), False
                self._require_tenant(s, spec.tenant)
                now = self._clock()
                # Core inserts, not ORM objects: submit is the hottest write and the unit of work costs ~2x here.
                # A taken job id fails the primary key and lands in the IntegrityError branch below.
                s.execute(
                    insert(JobRow).values(
                        id=spec.job_id,
                        tenant=spec.tenant,
                        pool=spec.pool,
                        name=spec.name,
                        priority=int(spec.priority),
                        state=JobState.PENDING.value,
                        submit_time_s=spec.submit_time_s,
                        spec=spec_to_json(spec),
                        idempotency_key=idempotency_key,
                        version=1,
                        reason_code="",
                        reason="",
                        created_s=now,
                        updated_s=now,
                        array_id=spec.array_id or None,
                        submitted_by=actor,
                        gpu_milli=spec.gpu_milli,
                    )
                )
                self._audit(s, actor, "job.submitted", f"job/{spec.job_id}", {"key": idempotency_key}, now)
            record = JobRecord(spec, JobState.PENDING, 1, idempotency_key, "", "", now, now)
            return record, True
        except IntegrityError:
            # Lost a race: on the same key, return the winner; on the same job id, it is a real conflict.
            if idempotency_key is not None:
                found = self._by_key(spec.tenant, idempotency_key)
                if found is not None:
                    return found, False
            raise ConflictError(f"job {spec.job_id}: a job with this id already exists") from None

    def _by_key(self, tenant: str, key: str) -> JobRecord | None:
        with self._tx(write=False) as s:
            row = s.scalar(select(JobRow).where(JobRow.tenant == tenant, JobRow.idempotency_key == key))
            return None if row is None else job_record(row)

    def attempts(self, job_id: str) -> list[AttemptRecord]:
        """Every run of ``job_id``, first first."""
        with self._tx(write=False) as s:
            rows = s.scalars(
                select(JobAttemptRow).where(JobAttemptRow.job_id == job_id).order_by(JobAttemptRow.attempt)
            )
            return [attempt_record(r) for r in rows]

    def get_job(self, job_id: str) -> JobRecord:
        with self._tx(write=False) as s:
            row = s.get(JobRow, job_id)
            if row is None:
                raise NotFoundError(f"job {job_id!r} is not stored")
            return job_record(row)

    def list_jobs(
        self,
        *,
        tenant: str | None = None,
        state: JobState | None = None,
        pool: str | None = None,
        limit: int = 100,
        array_id: str | None = None,
    ) -> list[JobRecord]:
        """Up to ``limit`` jobs in (submit time, id) order, filtered; ``array_id``: the elements of that array
        only (in index order: their submit times are). Pages, sorting and search: ``job_page``."""
        q = select(JobRow)
        if array_id is not None:
            q = q.where(JobRow.array_id == array_id)
        if tenant is not None:
            q = q.where(JobRow.tenant == tenant)
        if state is not None:
            q = q.where(JobRow.state == state.value)
        if pool is not None:
            q = q.where(JobRow.pool == pool)
        with self._tx(write=False) as s:
            rows = s.scalars(q.order_by(JobRow.submit_time_s, JobRow.id).limit(max(0, limit))).all()
            return [job_record(r) for r in rows]

    def set_job_reason(self, job_id: str, reason_code: str, reason: str) -> None:
        """Why a pending job waits, from the last scheduling cycle: advisory, so neither versioned nor audited."""
        with self._tx(write=True) as s:
            s.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.state == JobState.PENDING.value)
                .values(reason_code=reason_code, reason=reason, wait_class=None)
            )

    def transition_job(
        self,
        job_id: str,
        expected_version: int,
        new_state: JobState,
        reason: str,
        actor: str,
        *,
        reason_code: str = "",
        outcome: str = "",
        fence: Fence | None = None,
    ) -> JobRecord:
        """Move a job along its state machine under a guarded version; leaving placed/running frees its GPUs
        and ends its run as ``outcome`` (default: the new state; ``requeued`` when it goes back to the queue).
        ``fence``: the scheduling loop's lease, checked first (a stale leader's change is refused)."""
        if new_state is JobState.PLACED:
            raise InputError("a job becomes placed only with its allocation: use record_allocation", source=job_id)
        with self._tx(write=True, fence=fence) as s:
            row, current = self._guard(s, job_id, expected_version, new_state)
            now = self._clock()
            # The guarded update first: a stale writer fails before touching allocations or usage.
            # A reason code stays on a waiting job (the scheduler's) and on one that ended with a stable cause
            # (dependency_never_satisfied, time_limit); leaving the queue otherwise clears it.
            self._bump(s, row, new_state, reason_code if new_state not in HOLDING else "", reason, now)
            if current in HOLDING and new_state not in HOLDING:
                ended = outcome or ("requeued" if new_state is JobState.PENDING else new_state.value)
                self._free(s, job_id, now, ended, reason)
            data: dict[str, object] = {"from": current.value, "to": new_state.value, "reason": reason}
            if fence is not None:
                data["leader_token"] = fence.token
            self._audit(s, actor, f"job.{new_state.value}", f"job/{job_id}", data, now)
            return job_record(row)

    def release_allocation(
        self,
        job_id: str,
        expected_version: int,
        actor: str,
        *,
        new_state: JobState = JobState.PENDING,
        reason: str = "",
        cause: RetryOn | None = None,
        fence: Fence | None = None,
    ) -> JobRecord:
        """Free a placed or running job's GPUs, moving it to ``new_state`` (requeued by default). ``cause`` (a
        lost node, a preemption) ends the run as that cause: requeued, unless the job's retry policy counts
        the cause and has no retry left, when the job fails instead. ``fence``: the loop's lease."""
        rec = self.get_job(job_id)
        if rec.state not in HOLDING:
            raise InputError(f"job is {rec.state.value}: it holds no allocation", source=f"job {job_id}")
        if cause is None or new_state is not JobState.PENDING:
            return self.transition_job(job_id, expected_version, new_state, reason, actor, fence=fence)
        with self._tx(write=False) as s:
            row = s.get(JobRow, job_id)
            again, note = (None, "") if row is None else retry_decision(s, row, rec.spec, cause)
        final = JobState.FAILED if again is False else JobState.PENDING
        why = f"{reason}; {note}" if note else reason
        return self.transition_job(
            job_id, expected_version, final, why, actor, outcome=CAUSE_OUTCOME[cause], fence=fence
        )

    def record_allocation(
        self, job_id: str, expected_version: int, allocation: Allocation, actor: str, *, fence: Fence | None = None
    ) -> JobRecord:
        """Place one pending job (``record_allocations`` of one): its error raised, nothing stored."""
        got = self.record_allocations([(job_id, expected_version, allocation)], actor, fence=fence)[0]
        if isinstance(got, GpupoolError):
            raise got
        return got

    def record_allocations(
        self, placements: Sequence[Placement], actor: str, *, fence: Fence | None = None
    ) -> list[JobRecord | GpupoolError]:
        """Place pending jobs, each ``(job id, expected version, allocation)``, in ONE write: for each its
        allocation stored, its usage opened, the job moved to placed and audited; or its refusal, which stores
        nothing of it and leaves the others alone. A scheduling cycle's placements cost one transaction (and,
        with ``fence``, one lease check) instead of one each, and one statement per table: the loop hands it a
        whole cycle's (thousands at 1,000 nodes; the reads go 500 ids to an ``IN`` list).

        Refusals: the job unknown (NotFoundError), moved on since ``expected version`` (StaleVersionError), not
        pending (TransitionError), an allocation of another shape than the job asked for (InputError), or a GPU
        already held whole, or shares on one GPU past 1000 milli, counting the placements before it in the
        list (AllocationConflictError). The check reads the allocations after locking the node rows involved
        (``FOR UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` already holds the only write lock), so
        concurrent placements on one host are checked one after the other. The job updates are guarded by
        version: one that another writer changed meanwhile (PostgreSQL) rolls the whole batch back.

        ``fence``: the scheduling loop's lease, checked first; the rows carry its token (``leader_token``).
        """
        if not placements:
            return []
        with self._core_tx(write=True, fence=fence) as conn:
            now = self._clock()
            cols = select(JobRow.id, JobRow.state, JobRow.version, JobRow.spec, JobRow.idempotency_key)
            cols = cols.add_columns(JobRow.created_s, JobRow.attempt)
            jobs: dict[str, Any] = {}
            for ids in chunks([p[0] for p in placements]):
                jobs |= {r.id: r for r in conn.execute(cols.where(JobRow.id.in_(ids)))}
            hosts = sorted({h for _, _, a in placements for h in a.hosts})
            nodes: dict[str, Any] = {}
            for names in chunks(hosts):  # in name order, chunk after chunk: two writers lock in one order
                lock = select(NodeRow.name, NodeRow.state, NodeRow.gpu_count, NodeRow.gpu_model)
                lock = lock.where(NodeRow.name.in_(names)).order_by(NodeRow.name)
                nodes |= {r.name: r for r in conn.execute(lock.with_for_update() if self._postgres else lock)}
            used, whole = gpus_held(conn, hosts)
            out: list[JobRecord | GpupoolError] = []
            rows = PlacementRows()
            for job_id, expected, allocation in placements:
                try:
                    if job_id in rows.placed:
                        raise StaleVersionError(f"job {job_id}: placed twice in one batch")
                    spec = placeable(jobs.get(job_id), job_id, expected, allocation)
                    check_capacity(job_id, allocation, nodes, used, whole)
                except GpupoolError as e:
                    out.append(e)
                    continue
                job = jobs[job_id]
                attempt = (job.attempt or 0) + 1  # this placement starts the job's next run
                rows.add(job.version, attempt, spec, allocation, nodes, now, actor, fence)
                placed = JobRecord(
                    spec, JobState.PLACED, job.version + 1, job.idempotency_key, "", "", job.created_s, now, attempt
                )
                out.append(placed)
            rows.write(conn)
            return out

    @staticmethod
    def _guard(s: Session, job_id: str, expected_version: int, new_state: JobState) -> tuple[JobRow, JobState]:
        row = s.get(JobRow, job_id)
        if row is None:
            raise NotFoundError(f"job {job_id!r} is not stored")
        if row.version != expected_version:
            raise StaleVersionError(f"job {job_id}: expected version {expected_version}, stored {row.version}")
        current = job_record(row).state
        transition(JOB_TRANSITIONS, current, new_state, f"job {job_id}")
        return row, current

    @staticmethod
    def _bump(
        s: Session,
        row: JobRow,
        state: JobState,
        reason_code: str,
        reason: str,
        now: float,
        *,
        attempt: int | None = None,
    ) -> None:
        # The read in _guard saw the expected version, but on PostgreSQL another transaction may have committed
        # since: the WHERE on the version is the real guard, and a zero row count rolls the whole change back.
        result = s.execute(
            update(JobRow)
            .where(JobRow.id == row.id, JobRow.version == row.version)
            .values(
                state=state.value,
                version=row.version + 1,
                reason_code=reason_code,
                reason=reason,
                wait_class=None,
                updated_s=now,
                **({} if attempt is None else {"attempt": attempt}),
            )
            .execution_options(synchronize_session=False)
        )
        if getattr(result, "rowcount", 1) != 1:
            raise StaleVersionError(f"job {row.id}: changed by another writer during this update")
        s.refresh(row)

    @staticmethod
    def _free(s: Session, job_id: str, now: float, outcome: str, reason: str, exit_code: int | None = None) -> None:
        """The job no longer holds its allocation (``end_runs``)."""
        s.flush()  # the session's pending changes go first, as the autoflush of an ORM statement sent them
        end_runs(s.connection(), [RunEnd(job_id, now, outcome, reason, exit_code)])


@dataclass(frozen=True, slots=True)
class RunEnd:
    """A job leaving the holding states: its run ends as ``outcome`` (cut to the column's 16), with ``reason``."""

    job_id: str
    now: float
    outcome: str
    reason: str
    exit_code: int | None = None


def table_of(row: type[Base]) -> Table:
    return cast(Table, row.__table__)


def end_runs(conn: Connection, ends: Sequence[RunEnd]) -> None:
    """The jobs no longer hold their allocations, each statement once for all of them (executemany): ranks that
    ended are deleted; every other rank becomes releasing, its GPUs held until its agent confirms the process
    gone (``release_ranks``). That includes a rank never reported launched: its launch may be on its way or
    carried out with the report still in flight (a cancel 0.1 s after the launch handed its GPUs to the next job
    while the process ran on). Each job's run ends, and its usage intervals close."""
    if not ends:
        return
    attempts, allocs, usage = table_of(JobAttemptRow), table_of(AllocationRow), table_of(UsageIntervalRow)
    job = [{"b_id": e.job_id} for e in ends]
    at = [{"b_id": e.job_id, "b_now": e.now} for e in ends]
    run = [{"b_outcome": e.outcome[:16], "b_reason": e.reason, "b_code": e.exit_code} for e in ends]
    conn.execute(
        update(attempts)
        .where(attempts.c.job_id == bindparam("b_id"), attempts.c.ended_s.is_(None))
        .values(
            ended_s=bindparam("b_now"),
            state=bindparam("b_outcome"),
            reason=bindparam("b_reason"),
            exit_code=bindparam("b_code"),
        ),
        [a | r for a, r in zip(at, run, strict=True)],
    )
    mine = allocs.c.job_id == bindparam("b_id")
    conn.execute(delete(allocs).where(mine, allocs.c.exited_s.is_not(None)), job)
    conn.execute(update(allocs).where(mine, allocs.c.releasing_s.is_(None)).values(releasing_s=bindparam("b_now")), at)
    conn.execute(
        update(usage)
        .where(usage.c.job_id == bindparam("b_id"), usage.c.end_s.is_(None))
        .values(end_s=bindparam("b_now")),
        at,
    )
