"""What the control-plane server needs beyond the core store: job commands, agent registrations, batch writes.

A job's command (argv and extra environment) is not part of ``JobSpec`` (the scheduler never needs it), so it
lives in its own table and is written in the same transaction as the job row: no job is ever stored without
its command. Agents' registrations (the node token's hash, the agent's URL and address, its inventory) are
``agents``' (``ServerOps`` is an ``AgentRegistry`` too). Their rows (``JobCommandRow``, ``AgentRow``) are store
rows on the shared metadata, created by migration 0002.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpupool.domain.errors import (
    ConflictError,
    GpupoolError,
    InputError,
    TenantPendingLimitError,
    UnknownNameError,
    UnstorableInputError,
)
from gpupool.domain.jobs import JobSpec
from gpupool.domain.states import JobState
from gpupool.store.agents import AgentRegistry
from gpupool.store.base import dumps, gpu_indices, loads
from gpupool.store.codec import spec_to_json
from gpupool.store.fencing import Fence
from gpupool.store.jobs import MAX_KEY, job_record
from gpupool.store.launches import FixedInputs, LaunchInputs, read_launch_inputs
from gpupool.store.records import JobRecord, WaitWrites
from gpupool.store.rows import (
    AgentRow,
    AllocationRow,
    AuditRow,
    FabricRow,
    JobCommandRow,
    JobRow,
    TenantRow,
    WaitClassRow,
)
from gpupool.store.store import Store

_ROWS_PER_INSERT = 1000  # 17 columns x 1,000 rows: well under PostgreSQL's 65,535 parameters a statement
_JOB_COLUMNS = (
    "id",
    "tenant",
    "pool",
    "name",
    "priority",
    "state",
    "submit_time_s",
    "spec",
    "idempotency_key",
    "version",
    "reason_code",
    "reason",
    "created_s",
    "updated_s",
    "array_id",
    "submitted_by",
    "gpu_milli",
)


@dataclass(frozen=True, slots=True)
class Submission:
    """One job to store: its spec, command, idempotency key (None: none) and who submits it. An array is one
    submission: ``elements`` (``spec`` the first of them) stored all or none, with one command for all of
    them (kept under the array's id), the key on the first."""

    spec: JobSpec
    argv: tuple[str, ...]
    env: Mapping[str, str]
    idempotency_key: str | None
    actor: str
    elements: tuple[JobSpec, ...] = ()
    # How its ranks are launched beyond argv and env (``server_job_commands.launch``): {"container": ...} for a
    # container image, {"slurm": true} for a job ``gpupool sbatch`` submitted (its ranks get Slurm's variables).
    launch: Mapping[str, Any] = field(default_factory=dict)

    @property
    def jobs(self) -> tuple[JobSpec, ...]:
        return self.elements or (self.spec,)


@dataclass(frozen=True, slots=True)
class LiveJob:
    """A job as the scheduling loop syncs it: cheap columns only, the spec is read when first seen."""

    job_id: str
    state: JobState
    version: int


@dataclass(frozen=True, slots=True)
class ChangeMark:
    """Where the next read of the jobs' changes starts: every change stamped ``next`` or later, and every one
    stamped by a transaction of ``open`` (running when the mark was taken, so not seen yet: PostgreSQL's ids
    are handed out in start order, not commit order). A change is read once: a later read skips what the
    snapshot the mark came from could see."""

    next: int
    open: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Assignment:
    """One rank of a placed or running job on one host: what an agent should be running."""

    assignment_id: str
    job_id: str
    rank: int
    host: str
    gpus: tuple[int, ...]
    state: JobState
    # The rank's stored lifecycle (``store.ranks``): when placed, and whether its agent reported it launched,
    # started, ended (exited or lost). The gateway skips storing what is already stored from these.
    placed_s: float | None = None
    launched: bool = False
    started: bool = False
    ended: bool = False
    # Its job stopped while its process may still run: not to be launched or kept, only seen gone (its GPUs
    # stay held until then).
    releasing: bool = False
    launched_s: float | None = None
    releasing_s: float | None = None  # when its job stopped (the server's clock): its agent's absence counts after


def assignment_id(job_id: str, assignment: int, rank: int) -> str:
    return f"{job_id}.{assignment}.{rank}"


AssignmentRow = tuple[Any, ...]  # a row of ``ServerOps.assignment_rows``
_STATES = {st.value: st for st in JobState}


def assignment_of(row: AssignmentRow) -> Assignment:
    job_id, number, task, on, gpus, placed_s, launched_s, started_s, exited_s, releasing_s, state = row
    return Assignment(
        assignment_id(job_id, number, task),
        job_id,
        task,
        on,
        gpu_indices(gpus),
        _STATES[state],
        placed_s,
        launched_s is not None,
        started_s is not None,
        exited_s is not None,
        releasing_s is not None,
        launched_s,
        releasing_s,
    )


def _change_mark(row: Sequence[Any]) -> ChangeMark:
    return ChangeMark(int(row[0]), tuple(int(x) for x in row[1] or ()))


class ServerOps(AgentRegistry):
    """The server's store use cases, on the same engine (and SQLite writer lock) as ``store``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        # The group commit runs its statements on the transaction's own DB-API cursor: through SQLAlchemy each
        # one cost ~80 us of Python (events, parameter processing, result set-up), most of a small batch's CPU.
        # Plain columns only (text, integers, floats), so there is nothing for SQLAlchemy to convert.
        dialect = store._engine.dialect
        if dialect.paramstyle not in ("qmark", "format", "pyformat"):
            raise GpupoolError(f"unsupported DB-API parameter style {dialect.paramstyle!r}")
        self._mark = "?" if dialect.paramstyle == "qmark" else "%s"
        self._dbapi_integrity: type[Exception] = dialect.loaded_dbapi.IntegrityError
        # SQLite's executemany loops in C in this process; over the network one INSERT of many rows is one
        # round trip and one statement for the server to parse (what SQLAlchemy's "insertmanyvalues" does).
        self._multi_row = dialect.name != "sqlite"
        self._insert_jobs = (JobRow.__tablename__, _JOB_COLUMNS)
        self._insert_commands = (JobCommandRow.__tablename__, ("job_id", "argv", "env", "launch"))
        self._insert_audits = (AuditRow.__tablename__, ("at_s", "actor", "action", "subject", "data"))
        self._fixed = FixedInputs()  # jobs' specs and commands parsed for launches (``launch_inputs``)

    def _insert(self, cur: Any, into: tuple[str, Sequence[str]], rows: Sequence[Sequence[Any]]) -> None:
        table, columns = into
        head = f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
        one = self._in(len(columns))
        if not self._multi_row:
            cur.executemany(head + one, rows)
            return
        for start in range(0, len(rows), _ROWS_PER_INSERT):
            chunk = rows[start : start + _ROWS_PER_INSERT]
            cur.execute(head + ", ".join([one] * len(chunk)), [v for row in chunk for v in row])

    def _in(self, n: int) -> str:
        return "(" + ", ".join([self._mark] * n) + ")"

    # -- jobs --------------------------------------------------------------------------------------------------
    def submit(
        self,
        spec: JobSpec,
        argv: Sequence[str],
        env: Mapping[str, str],
        idempotency_key: str | None,
        actor: str,
    ) -> tuple[JobRecord, bool]:
        """Store a pending job and its command in one transaction; the same key again returns the first job."""
        (out,) = self.submit_many([Submission(spec, tuple(argv), dict(env), idempotency_key, actor)])
        if isinstance(out, Exception):
            raise out
        return out

    def submit_many(
        self, batch: Sequence[Submission], room: dict[str, int] | None = None, *, retrying: bool = False
    ) -> list[tuple[JobRecord, bool] | GpupoolError]:
        """Store many submissions in one transaction (one commit for all): per item, (record, created) or the
        error that refused it alone. A key seen earlier in the batch or already stored returns that job.

        ``room``, if given, is how many more pending jobs each tenant named in it may have: a submission that
        would create one more is refused (TenantPendingLimitError), and what is created is taken off ``room``.

        A batch the database refuses as a whole (another replica stored one of the keys, or an id, between
        our read and our commit; a value the database cannot store) is retried one submission per transaction,
        so each item gets its own answer and one bad submission never fails another.

        ``retrying``: this batch was given before and that call failed with its outcome unknown (a connection
        lost during the commit), so a submission whose job id is already stored, with its spec, was stored by
        that call and is answered as created, not as a conflict.
        """
        out: list[tuple[JobRecord, bool] | GpupoolError | None] = [None] * len(batch)
        for i, sub in enumerate(batch):
            if not sub.argv:
                out[i] = InputError("a job needs a command (argv)", source=f"job {sub.spec.job_id}")
            elif sub.idempotency_key is not None and not 0 < len(sub.idempotency_key) <= MAX_KEY:
                out[i] = InputError(f"an idempotency key has 1..{MAX_KEY} characters", source=f"job {sub.spec.job_id}")
        todo = [i for i in range(len(batch)) if out[i] is None]
        if not todo:
            return [o for o in out if o is not None]
        trial = None if room is None else dict(room)  # taken from only if the batch commits
        try:
            self._submit_batch(batch, todo, out, trial, retrying)
        except (IntegrityError, self._dbapi_integrity, UnstorableInputError) as e:
            if len(todo) == 1 and isinstance(e, UnstorableInputError):
                out[todo[0]] = UnstorableInputError(e.reason, source=f"job {batch[todo[0]].spec.job_id}")
            elif len(todo) == 1:
                self._after_conflict(batch[todo[0]], todo[0], out, retrying)
            else:
                for i in todo:
                    out[i] = self.submit_many([batch[i]], room, retrying=retrying)[0]
        else:
            if room is not None and trial is not None:
                room.update(trial)
        assert all(o is not None for o in out)
        return [o for o in out if o is not None]

    def _submit_batch(
        self,
        batch: Sequence[Submission],
        todo: list[int],
        out: list[tuple[JobRecord, bool] | GpupoolError | None],
        room: dict[str, int] | None,
        retrying: bool,
    ) -> None:
        st = self.store
        # The cursor is this transaction's DB-API connection's (see __init__).
        with st._core_tx(write=True) as conn, closing(conn.connection.cursor()) as cur:
            self._submit_rows(conn, cur, batch, todo, out, room, retrying)

    def _submit_rows(
        self,
        conn: Connection,
        cur: Any,
        batch: Sequence[Submission],
        todo: list[int],
        out: list[tuple[JobRecord, bool] | GpupoolError | None],
        room: dict[str, int] | None,
        retrying: bool,
    ) -> None:
        tenants = sorted({batch[i].spec.tenant for i in todo})
        cur.execute(f"SELECT name FROM {TenantRow.__tablename__} WHERE name IN {self._in(len(tenants))}", tenants)
        known = {r[0] for r in cur.fetchall()}
        keyed: dict[tuple[str, str], JobRecord] = {}
        for tenant in tenants:
            keys = sorted({k for i in todo if batch[i].spec.tenant == tenant for k in [batch[i].idempotency_key] if k})
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                cur.execute(
                    f"SELECT id FROM {JobRow.__tablename__} WHERE tenant = {self._mark}"
                    f" AND idempotency_key IN {self._in(len(chunk))}",
                    [tenant, *chunk],
                )
                seen = [r[0] for r in cur.fetchall()]
                if seen:  # rare: a repeated key; its stored job is read whole
                    with Session(bind=conn) as s:
                        for row in s.scalars(select(JobRow).where(JobRow.id.in_(seen))):
                            assert row.idempotency_key is not None
                            keyed[(tenant, row.idempotency_key)] = job_record(row)
        now = self.store._clock()
        pending = JobState.PENDING.value
        jobs: list[tuple[Any, ...]] = []
        commands: list[tuple[str, str, str, str]] = []
        audits: list[tuple[Any, ...]] = []
        for i in todo:
            sub = batch[i]
            spec, key = sub.spec, sub.idempotency_key
            if key is not None and (spec.tenant, key) in keyed:
                stored = keyed[(spec.tenant, key)]
                # Its own job id: stored by an earlier try of this batch whose commit went unanswered.
                out[i] = (stored, retrying and stored.job_id == spec.job_id)
                continue
            if spec.tenant not in known:
                out[i] = UnknownNameError(f"unknown tenant {spec.tenant!r}")
                continue
            members = sub.jobs
            if room is not None and spec.tenant in room:
                if room[spec.tenant] < len(members):
                    out[i] = TenantPendingLimitError(
                        f"tenant {spec.tenant!r} has as many pending jobs as a tenant may queue; retry as they start"
                    )
                    continue
                room[spec.tenant] -= len(members)
            argv = list(sub.argv)
            commands.append((spec.array_id or spec.job_id, dumps(argv), dumps(dict(sub.env)), dumps(dict(sub.launch))))
            for n, member in enumerate(members):
                # In _JOB_COLUMNS' order; the key on the first element only (it is unique per tenant).
                jobs.append(
                    (
                        member.job_id,
                        member.tenant,
                        member.pool,
                        member.name,
                        int(member.priority),
                        pending,
                        member.submit_time_s,
                        spec_to_json(member),
                        key if n == 0 else None,
                        1,
                        "",
                        "",
                        now,
                        now,
                        member.array_id or None,
                        sub.actor,
                        member.gpu_milli,
                    )
                )
                data = dumps({"key": key, "argv": argv} if n == 0 else {"array": member.array_id})
                audits.append((now, sub.actor, "job.submitted", f"job/{member.job_id}", data))
            rec = JobRecord(spec, JobState.PENDING, 1, key, "", "", now, now)
            out[i] = (rec, True)
            if key is not None:
                keyed[(spec.tenant, key)] = rec  # a later submission of the batch with this key gets this job
        if jobs:
            self._insert(cur, self._insert_jobs, jobs)
            self._insert(cur, self._insert_commands, commands)
            self._insert(cur, self._insert_audits, audits)

    def _after_conflict(
        self, sub: Submission, i: int, out: list[tuple[JobRecord, bool] | GpupoolError | None], retrying: bool
    ) -> None:
        """One submission refused by a unique constraint: its key was stored meanwhile, or its id is taken
        (by this very submission, when an earlier try's commit succeeded unanswered: see ``submit_many``)."""
        with self.store._tx(write=False) as s:
            if sub.idempotency_key is not None:
                row = s.scalar(
                    select(JobRow).where(
                        JobRow.tenant == sub.spec.tenant, JobRow.idempotency_key == sub.idempotency_key
                    )
                )
                if row is not None:
                    out[i] = (job_record(row), retrying and row.id == sub.spec.job_id)
                    return
            row = s.get(JobRow, sub.spec.job_id) if retrying else None
            if row is not None and row.tenant == sub.spec.tenant and row.spec == spec_to_json(sub.spec):
                out[i] = (job_record(row), True)
                return
        out[i] = ConflictError(f"job {sub.spec.job_id}: a job with this id already exists")

    def pending_counts(self) -> dict[str, int]:
        """Pending jobs per tenant (tenants with none are absent): what the per-tenant cap counts."""
        sql = f"SELECT tenant, count(*) FROM {JobRow.__tablename__} WHERE state = {self._mark} GROUP BY tenant"
        with self.store._core_tx(write=False) as conn, closing(conn.connection.cursor()) as cur:
            cur.execute(sql, [JobState.PENDING.value])
            return {str(t): int(n) for t, n in cur.fetchall()}

    def launch_inputs(self, job_ids: Sequence[str]) -> dict[str, LaunchInputs | GpupoolError]:
        """What the launches of ``job_ids``' ranks need, in one read transaction (``store.launches``)."""
        with self.store._core_tx(write=False) as conn, closing(conn.connection.cursor()) as cur:
            return read_launch_inputs(cur, self._mark, job_ids, self._fixed)

    def change_mark(self) -> ChangeMark:
        """Where a read of the jobs' changes starts so that it misses nothing committed from now on (the loop's
        rebuild takes it before it reads the store, so a change made meanwhile is read again, not lost)."""
        with self.store._core_tx(write=False) as conn, closing(conn.connection.cursor()) as cur:
            cur.execute(f"SELECT {self._next_mark} FROM {self._snapshot}")
            return _change_mark(cur.fetchall()[0])

    def job_changes(self, since: ChangeMark) -> tuple[list[LiveJob], ChangeMark]:
        """Every job whose state or version changed after mark ``since`` (live or not: an ended job is read with
        how it ended), in submission order, and the mark to read from next. None is missed and none is read
        twice, whatever else runs on the database (a long transaction elsewhere holds nothing back).

        Migration 0015 stamps a row with its writer's transaction id (PostgreSQL) or a counter in commit order
        (SQLite, whose writers are serialized). On PostgreSQL the rows and the next mark come from one statement,
        so from one snapshot: the next read takes what that snapshot could not see, ids from its ``xmax`` on and
        those it saw running. Read on the DB-API cursor (like the group commit): it runs every cycle.
        """
        jobs = JobRow.__tablename__
        newer = f"change_seq >= {self._mark}"
        if since.open:
            newer = f"({newer} OR change_seq IN {self._in(len(since.open))})"
        sql = (
            f"SELECT {jobs}.id, state, version, {self._next_mark} FROM {self._snapshot}"
            f" LEFT JOIN {jobs} ON {newer} ORDER BY submit_time_s, {jobs}.id"
        )
        states = {st.value: st for st in JobState}
        with self.store._core_tx(write=False) as conn, closing(conn.connection.cursor()) as cur:
            cur.execute(sql, (since.next, *since.open))
            rows = cur.fetchall()
        mark = _change_mark(rows[0][3:])
        return [LiveJob(i, states[st], v) for i, st, v, *_ in rows if st in states], mark

    @property
    def _snapshot(self) -> str:
        """One row: the statement's own snapshot on PostgreSQL (``pg_current_snapshot`` is the snapshot the
        statement reads with), a constant on SQLite (whose read transaction sees one state)."""
        return f"(SELECT {'pg_current_snapshot()' if self.store.concurrent_writes else '1'} AS snap) s"

    @property
    def _next_mark(self) -> str:
        """The columns of the next mark, from the statement's snapshot (``_snapshot``)."""
        if self.store.concurrent_writes:  # PostgreSQL: ids from xmax on, and those running then
            return "pg_snapshot_xmax(snap)::text::bigint, ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(snap) x)"
        return f"(SELECT COALESCE(MAX(change_seq), 0) + 1 FROM {JobRow.__tablename__}), NULL"

    def job_states(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        """The stored state of each of ``job_ids`` that is stored (one read per 500, on the DB-API cursor)."""
        states = {st.value: st for st in JobState}
        out: dict[str, JobState] = {}
        with self.store._core_tx(write=False) as conn, closing(conn.connection.cursor()) as cur:
            for start in range(0, len(job_ids), 500):
                chunk = list(job_ids[start : start + 500])
                cur.execute(f"SELECT id, state FROM {JobRow.__tablename__} WHERE id IN {self._in(len(chunk))}", chunk)
                out.update((str(i), states[st]) for i, st in cur.fetchall() if st in states)
        return out

    def specs(self, job_ids: Sequence[str]) -> list[JobRecord]:
        out: list[JobRecord] = []
        with self.store._tx(write=False) as s:
            for start in range(0, len(job_ids), 500):
                chunk = list(job_ids[start : start + 500])
                out.extend(job_record(r) for r in s.scalars(select(JobRow).where(JobRow.id.in_(chunk))))
        return out

    def write_reasons(self, writes: WaitWrites, *, fence: Fence | None = None) -> None:
        """Why pending jobs wait, all in one transaction (advisory: neither versioned nor audited): the shared
        reasons (``WaitClassRow``) first, then which jobs point at them, then the jobs' own reasons; ``fence``:
        the scheduling loop's lease, checked first."""
        if not (
            writes.classes or writes.dropped or writes.prune or any(writes.joined.values()) or any(writes.own.values())
        ):
            return
        m, t, pending = self._mark, JobRow.__tablename__, JobState.PENDING.value
        # On the DB-API cursor, as the group commit. One statement per distinct reason (or class) and up to 500
        # jobs: thousands queued behind full nodes share a few reasons, and a statement each (parsed and planned
        # by PostgreSQL) cost more than the rows it changed.
        with self.store._core_tx(write=True, fence=fence) as conn, closing(conn.connection.cursor()) as cur:
            if writes.prune:
                cur.execute(f"DELETE FROM {WaitClassRow.__tablename__}")
            if writes.classes:
                cur.executemany(
                    f"INSERT INTO {WaitClassRow.__tablename__} (id, reason_code, reason) VALUES ({m}, {m}, {m})"
                    " ON CONFLICT (id) DO UPDATE SET reason_code = excluded.reason_code, reason = excluded.reason",
                    [(cid, code, text) for cid, (code, text) in writes.classes.items()],
                )
            for start in range(0, len(writes.dropped), 500):
                chunk = list(writes.dropped[start : start + 500])
                cur.execute(f"DELETE FROM {WaitClassRow.__tablename__} WHERE id IN {self._in(len(chunk))}", chunk)
            sets: list[tuple[str, list[str], Sequence[str]]]
            sets = [(f"wait_class = {m}", [cid], jobs) for cid, jobs in writes.joined.items()]
            sets += [
                (f"reason_code = {m}, reason = {m}, wait_class = NULL", [*r], jobs) for r, jobs in writes.own.items()
            ]
            for assign, values, job_ids in sets:
                for start in range(0, len(job_ids), 500):
                    chunk = list(job_ids[start : start + 500])
                    cur.execute(
                        f"UPDATE {t} SET {assign} WHERE state = {m} AND id IN {self._in(len(chunk))}",
                        [*values, pending, *chunk],
                    )

    def assignments(self, host: str | None = None, job_ids: Sequence[str] | None = None) -> list[Assignment]:
        """The ranks on hosts (on ``host`` if given; of ``job_ids`` if given): every live allocation row of a
        placed or running job, which agents should run, and every releasing one (``releasing``), which they
        should stop."""
        return [assignment_of(row) for row in self.assignment_rows(host, job_ids)]

    def assignment_rows(self, host: str | None = None, job_ids: Sequence[str] | None = None) -> list[AssignmentRow]:
        """``assignments``' rows as read (``assignment_of`` makes each one an ``Assignment``): the host cache
        keeps the ``Assignment`` of each row it read before and makes only the new rows' ones."""
        # On the DB-API cursor (as ``job_changes``): the host cache reads every host's ranks once per
        # ``host_cache_s``, and through the ORM that read cost ~0.2 s at a thousand hosts.
        a, j = AllocationRow.__tablename__, JobRow.__tablename__
        sql = (
            "SELECT a.job_id, a.assignment, a.task_index, a.host, a.gpus, a.placed_s, a.launched_s, a.started_s,"
            f" a.exited_s, a.releasing_s, j.state FROM {a} a JOIN {j} j ON j.id = a.job_id"
        )
        args: list[Any] = []
        where = []
        if host is not None:
            where.append(f"a.host = {self._mark}")
            args.append(host)
        if job_ids is not None:
            where.append(f"a.job_id IN {self._in(len(job_ids))}" if job_ids else "1 = 0")
            args.extend(job_ids)
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self.store._core_tx(write=False) as conn, closing(conn.connection.cursor()) as cur:
            cur.execute(sql + " ORDER BY a.job_id, a.task_index", args)
            return [tuple(r) for r in cur.fetchall()]

    def job_assignments(self, job_id: str) -> list[Assignment]:
        with self.store._tx(write=False) as s:
            rows = s.scalars(
                select(AllocationRow).where(AllocationRow.job_id == job_id, AllocationRow.releasing_s.is_(None))
            ).all()
            state = s.scalar(select(JobRow.state).where(JobRow.id == job_id))
        if state is None:
            return []
        return [
            Assignment(
                assignment_id(job_id, r.assignment, r.task_index),
                job_id,
                r.task_index,
                r.host,
                tuple(loads(r.gpus, f"allocation of job {job_id}")),
                JobState(state),
                r.placed_s,
                r.launched_s is not None,
                r.started_s is not None,
                r.exited_s is not None,
            )
            for r in sorted(rows, key=lambda r: r.task_index)
        ]


def fabric_version(store: Store) -> int | None:
    """The stored fabric's version (None when none was imported): one indexed read."""
    with store._tx(write=False) as s:
        version = s.scalar(select(FabricRow.version).where(FabricRow.id == 1))
    return None if version is None else int(version)


def topology_key(store: Store) -> tuple[object, ...]:
    """What the scheduling fabric depends on, read cheaply: the stored fabric's version, and the agents' set
    only when none was imported (the synthetic fabric is built from them; an imported one is not, and the
    loop asks every cycle: at a thousand agents that read was most of an idle cycle's store time)."""
    with store._tx(write=False) as s:
        version = s.scalar(select(FabricRow.version).where(FabricRow.id == 1))
        if version is not None:
            return (version,)
        agents = tuple(s.execute(select(AgentRow.host, AgentRow.registered_s).order_by(AgentRow.host)).all())
    return (version, tuple(tuple(a) for a in agents))
