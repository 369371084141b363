"""What the control-plane server needs beyond the core store: job commands, agent registrations, batch writes.

A job's command (argv and extra environment) is not part of ``JobSpec`` (the scheduler never needs it), so it
lives in its own table and is written in the same transaction as the job row: no job is ever stored without
its command. Agents' registrations (the node token's hash, the agent's URL and address, its inventory) live
here too. These tables sit on their own ``MetaData`` created with ``create_all`` so that this module stays
outside the Alembic stream of the core schema until the lead folds it into a numbered migration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Float, MetaData, String, Text, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from gpupool.domain.errors import ConflictError, InputError, NotFoundError
from gpupool.domain.jobs import JobSpec
from gpupool.domain.states import JobState
from gpupool.store import tokens
from gpupool.store.base import dumps, loads
from gpupool.store.codec import spec_to_json
from gpupool.store.jobs import MAX_KEY, job_record
from gpupool.store.records import JobRecord
from gpupool.store.rows import AllocationRow, AuditRow, FabricRow, JobRow
from gpupool.store.store import Store


class ServerBase(DeclarativeBase):
    metadata = MetaData()


class JobCommandRow(ServerBase):
    __tablename__ = "server_job_commands"
    job_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    argv: Mapped[str] = mapped_column(Text)  # JSON list of strings: never a shell string
    env: Mapped[str] = mapped_column(Text, default="{}")  # JSON object of extra variables


class AgentRow(ServerBase):
    __tablename__ = "server_agents"
    host: Mapped[str] = mapped_column(String(256), primary_key=True)
    token_id: Mapped[str] = mapped_column(String(32))
    token_hash: Mapped[str] = mapped_column(String(256))
    agent_url: Mapped[str] = mapped_column(Text, default="")
    address: Mapped[str] = mapped_column(String(256), default="")
    inventory: Mapped[str] = mapped_column(Text, default="{}")  # the RegisterRequest as JSON
    registered_s: Mapped[float] = mapped_column(Float)


@dataclass(frozen=True, slots=True)
class JobCommand:
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class AgentRecord:
    host: str
    agent_url: str
    address: str
    inventory: dict[str, Any]
    registered_s: float


@dataclass(frozen=True, slots=True)
class LiveJob:
    """A live job as the scheduling loop syncs it: cheap columns only, the spec is read when first seen."""

    job_id: str
    state: JobState
    version: int


@dataclass(frozen=True, slots=True)
class Assignment:
    """One rank of a placed or running job on one host: what an agent should be running."""

    assignment_id: str
    job_id: str
    rank: int
    host: str
    gpus: tuple[int, ...]
    state: JobState


def assignment_id(job_id: str, assignment: int, rank: int) -> str:
    return f"{job_id}.{assignment}.{rank}"


class ServerOps:
    """The server's store use cases, on the same engine (and SQLite writer lock) as ``store``."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def migrate(self) -> None:
        # Two replicas starting at once may both try to create a table; the loser sees it exists and goes on.
        try:
            ServerBase.metadata.create_all(self.store._engine, checkfirst=True)
        except (IntegrityError, ProgrammingError, OperationalError):
            ServerBase.metadata.create_all(self.store._engine, checkfirst=True)

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
        if not argv:
            raise InputError("a job needs a command (argv)", source=f"job {spec.job_id}")
        if idempotency_key is not None and not 0 < len(idempotency_key) <= MAX_KEY:
            raise InputError(f"an idempotency key has 1..{MAX_KEY} characters", source=f"job {spec.job_id}")
        st = self.store
        try:
            with st._tx(write=True) as s:
                if idempotency_key is not None:
                    row = s.scalar(
                        select(JobRow).where(JobRow.tenant == spec.tenant, JobRow.idempotency_key == idempotency_key)
                    )
                    if row is not None:
                        return job_record(row), False
                st._require_tenant(s, spec.tenant)
                now = st._clock()
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
                    )
                )
                s.execute(
                    insert(JobCommandRow).values(job_id=spec.job_id, argv=dumps(list(argv)), env=dumps(dict(env)))
                )
                data = {"key": idempotency_key, "argv": list(argv)}
                s.execute(
                    insert(AuditRow).values(
                        at_s=now, actor=actor, action="job.submitted", subject=f"job/{spec.job_id}", data=dumps(data)
                    )
                )
            return JobRecord(spec, JobState.PENDING, 1, idempotency_key, "", "", now, now), True
        except IntegrityError:
            if idempotency_key is not None:
                with st._tx(write=False) as s:
                    row = s.scalar(
                        select(JobRow).where(JobRow.tenant == spec.tenant, JobRow.idempotency_key == idempotency_key)
                    )
                    if row is not None:
                        return job_record(row), False
            raise ConflictError(f"job {spec.job_id}: a job with this id already exists") from None

    def command(self, job_id: str) -> JobCommand:
        with self.store._tx(write=False) as s:
            row = s.get(JobCommandRow, job_id)
            if row is None:
                raise NotFoundError(f"job {job_id!r} has no stored command")
            argv = loads(row.argv, f"command of job {job_id}")
            env = loads(row.env, f"command of job {job_id}")
        return JobCommand(tuple(str(a) for a in argv), tuple(sorted((str(k), str(v)) for k, v in env.items())))

    def live_jobs(self) -> list[LiveJob]:
        """Every pending, placed or running job's id, state and version: the loop's per-cycle sync."""
        q = select(JobRow.id, JobRow.state, JobRow.version).where(
            JobRow.state.in_([JobState.PENDING.value, JobState.PLACED.value, JobState.RUNNING.value])
        )
        with self.store._tx(write=False) as s:
            return [LiveJob(i, JobState(st), v) for i, st, v in s.execute(q.order_by(JobRow.submit_time_s, JobRow.id))]

    def specs(self, job_ids: Sequence[str]) -> list[JobRecord]:
        out: list[JobRecord] = []
        with self.store._tx(write=False) as s:
            for start in range(0, len(job_ids), 500):
                chunk = list(job_ids[start : start + 500])
                out.extend(job_record(r) for r in s.scalars(select(JobRow).where(JobRow.id.in_(chunk))))
        return out

    def set_reasons(self, reasons: Mapping[str, tuple[str, str]]) -> None:
        """Why each pending job waits, all in one transaction (advisory: neither versioned nor audited)."""
        if not reasons:
            return
        params = [{"jid": j, "code": c, "text": t} for j, (c, t) in reasons.items()]
        stmt = (
            update(JobRow.__table__)  # type: ignore[arg-type]
            .where(JobRow.__table__.c.id == bindparam("jid"), JobRow.__table__.c.state == JobState.PENDING.value)
            .values(reason_code=bindparam("code"), reason=bindparam("text"))
        )
        with self.store._tx(write=True) as s:
            s.connection().execute(stmt, params)

    def assignments(self, host: str | None = None) -> list[Assignment]:
        """The ranks agents should run: every allocation of a placed or running job (on ``host`` if given)."""
        q = select(AllocationRow, JobRow.state).join(JobRow, JobRow.id == AllocationRow.job_id)
        if host is not None:
            q = q.where(AllocationRow.host == host)
        out = []
        with self.store._tx(write=False) as s:
            for a, state in s.execute(q.order_by(AllocationRow.job_id, AllocationRow.task_index)):
                gpus = loads(a.gpus, f"allocation of job {a.job_id}")
                out.append(
                    Assignment(
                        assignment_id(a.job_id, a.assignment, a.task_index),
                        a.job_id,
                        a.task_index,
                        a.host,
                        tuple(int(g) for g in gpus),
                        JobState(state),
                    )
                )
        return out

    def job_assignments(self, job_id: str) -> list[Assignment]:
        with self.store._tx(write=False) as s:
            rows = s.scalars(select(AllocationRow).where(AllocationRow.job_id == job_id)).all()
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
            )
            for r in sorted(rows, key=lambda r: r.task_index)
        ]

    # -- agents ------------------------------------------------------------------------------------------------
    def register_agent(
        self, host: str, *, agent_url: str, address: str, inventory: Mapping[str, Any], actor: str
    ) -> str:
        """Record an agent's registration and give it a new node token (clear text, shown once)."""
        made = tokens.new_token("gpn")
        st = self.store
        with st._tx(write=True) as s:
            now = st._clock()
            row = s.get(AgentRow, host)
            if row is None:
                row = AgentRow(host=host, registered_s=now)
                s.add(row)
            row.token_id, row.token_hash = made.id, made.hashed
            row.agent_url, row.address, row.inventory, row.registered_s = (
                agent_url,
                address,
                dumps(dict(inventory)),
                now,
            )
            data = {"agent_url": agent_url, "address": address, "token_id": made.id}
            st._audit(s, actor, "agent.registered", f"node/{host}", data, now)
        return made.clear

    def check_node_token(self, host: str, clear: str) -> bool:
        parts = tokens.split_token(clear, "gpn")
        if parts is None:
            return False
        with self.store._tx(write=False) as s:
            row = s.get(AgentRow, host)
            found = None if row is None else (row.token_id, row.token_hash)
        if found is None or found[0] != parts[0]:
            tokens.verify_secret(parts[1], tokens.DUMMY_HASH)
            return False
        return tokens.verify_secret(parts[1], found[1])

    def agents(self) -> list[AgentRecord]:
        with self.store._tx(write=False) as s:
            rows = s.scalars(select(AgentRow).order_by(AgentRow.host)).all()
            return [
                AgentRecord(r.host, r.agent_url, r.address, loads(r.inventory, f"agent {r.host}"), r.registered_s)
                for r in rows
            ]

    def agent(self, host: str) -> AgentRecord:
        with self.store._tx(write=False) as s:
            r = s.get(AgentRow, host)
            if r is None:
                raise NotFoundError(f"no agent registered for node {host!r}")
            return AgentRecord(r.host, r.agent_url, r.address, loads(r.inventory, f"agent {r.host}"), r.registered_s)


def topology_key(store: Store) -> tuple[object, ...]:
    """What the scheduling fabric depends on, read cheaply: the stored fabric's version and the agents' set."""
    with store._tx(write=False) as s:
        version = s.scalar(select(FabricRow.version).where(FabricRow.id == 1))
        agents = tuple(s.execute(select(AgentRow.host, AgentRow.registered_s).order_by(AgentRow.host)).all())
    return (version, tuple(tuple(a) for a in agents))
