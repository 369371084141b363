"""The tables, as SQLAlchemy 2 typed declarative ``*Row`` classes. The migrations must match these exactly.

Times are float seconds on the store's clock (the domain's unit), not database timestamps: the scheduler and
the simulator speak seconds, and one unit avoids time-zone conversions between SQLite and PostgreSQL.
JSON documents are kept as text so that a malformed document can be read back and reported, not crash the
driver, and so the two backends store byte-identical values.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, column_property, mapped_column

# Deterministic constraint names: Alembic's batch mode on SQLite and the model/migration comparison need them.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class TenantRow(Base):
    __tablename__ = "tenants"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    created_s: Mapped[float] = mapped_column(Float)


class PoolRow(Base):
    __tablename__ = "pools"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    calendar: Mapped[str] = mapped_column(Text, default="")  # TOML text, as gpupool.domain.calendar parses it
    version: Mapped[int] = mapped_column(Integer, default=1)
    updated_s: Mapped[float] = mapped_column(Float)


class QuotaRow(Base):
    """One ``gpupool.domain.sharing.Quota``: whole GPUs, as the domain counts them."""

    __tablename__ = "quotas"
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name", ondelete="CASCADE"), primary_key=True)
    pool: Mapped[str] = mapped_column(String(128), primary_key=True)
    gpu_model: Mapped[str] = mapped_column(String(128), primary_key=True)  # "" means any model
    nominal_gpus: Mapped[int] = mapped_column(Integer)
    borrowing_limit_gpus: Mapped[int | None] = mapped_column(Integer, nullable=True)  # None: unlimited
    lending_limit_gpus: Mapped[int | None] = mapped_column(Integer, nullable=True)
    cohort: Mapped[str] = mapped_column(String(128), default="")


class WaitClassRow(Base):
    """One waiting reason shared by the pending jobs that point at it (migration 0014): the scheduling loop
    stores one per shape and expected runtime, so a reason that changes for a whole shape (the EASY reservation
    came, went or moved) is one row written, not one per job. Advisory, as a job's own reason."""

    __tablename__ = "wait_classes"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    reason_code: Mapped[str] = mapped_column(String(64), default="")
    reason: Mapped[str] = mapped_column(Text, default="")


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        # One job per (tenant, key): the database, not a read-then-write in Python, is what stops duplicates.
        UniqueConstraint("tenant", "idempotency_key"),
        Index("ix_jobs_state_submit", "state", "submit_time_s"),
        Index("ix_jobs_tenant_submit", "tenant", "submit_time_s"),
        Index("ix_jobs_submit_id", "submit_time_s", "id"),
        Index("ix_jobs_pool_submit", "pool", "submit_time_s"),  # migration 0013
        Index("ix_jobs_change_seq", "change_seq"),  # migration 0015
    )
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name"))
    pool: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(256), default="")
    priority: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    submit_time_s: Mapped[float] = mapped_column(Float)
    spec: Mapped[str] = mapped_column(Text)
    idempotency_key: Mapped[str | None] = mapped_column(String(256), nullable=True)
    version: Mapped[int] = mapped_column(Integer, default=1)
    reason_code: Mapped[str] = mapped_column(String(64), default="")
    reason: Mapped[str] = mapped_column(Text, default="")
    created_s: Mapped[float] = mapped_column(Float)
    updated_s: Mapped[float] = mapped_column(Float)
    # How many runs it was placed for (migration 0009): the current run's number once placed, 0 before.
    attempt: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The array it is an element of (migration 0010): queried and cancelled as one. NULL: no array.
    array_id: Mapped[str | None] = mapped_column(String(128), nullable=True, index=True)
    submitted_by: Mapped[str] = mapped_column(String(128), default="", server_default="")  # the token, for accounting
    # Its GPU demand in thousandths (``JobSpec.gpu_milli``, migration 0013): the jobs list sorts by it.
    gpu_milli: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The shared reason a pending job waits for (migration 0014; ``WaitClassRow``): when set, it is the job's
    # reason, not ``reason_code``/``reason``. Cleared whenever the job's own reason is set. NULL: its own.
    wait_class: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Read with every job (a primary-key lookup each), so no reader of a job's reason needs to know the class.
    class_code: Mapped[str | None] = column_property(
        select(WaitClassRow.reason_code)
        .where(WaitClassRow.id == wait_class)
        .correlate_except(WaitClassRow)
        .scalar_subquery()
    )
    class_reason: Mapped[str | None] = column_property(
        select(WaitClassRow.reason)
        .where(WaitClassRow.id == wait_class)
        .correlate_except(WaitClassRow)
        .scalar_subquery()
    )
    # When its state or version last changed (migration 0015): set by the database's triggers on every write,
    # never by this code; the scheduling loop reads the jobs changed since its last cycle by it.
    change_seq: Mapped[int] = mapped_column(BigInteger, server_default="0")


class JobAttemptRow(Base):
    """One run of a job (migration 0009): from its placement until it left placed/running, with how it ended.

    ``state`` is the run's end: finished, failed, timeout, cancelled, preempted, node_lost, requeued (never
    launched), or the job's live state (placed, running) while it lasts. A retried job keeps every run."""

    __tablename__ = "job_attempts"
    __table_args__ = (Index("ix_job_attempts_window", "placed_s", "ended_s"),)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)  # 1 for the first run
    assignment: Mapped[int] = mapped_column(Integer)  # the allocation number it ran as (assignment ids)
    tenant: Mapped[str] = mapped_column(String(128))
    pool: Mapped[str] = mapped_column(String(128))
    gpu_model: Mapped[str] = mapped_column(String(256), default="")  # several models: comma-separated
    milli_gpu: Mapped[int] = mapped_column(Integer, default=0)  # held in all, over every rank
    hosts: Mapped[str] = mapped_column(Text, default="[]")  # JSON list, in rank order
    placed_s: Mapped[float] = mapped_column(Float)
    started_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    state: Mapped[str] = mapped_column(String(16))
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")


class AllocationRow(Base):
    """One task's share of one placement; ``assignment`` numbers the job's placements (1 for the first)."""

    __tablename__ = "allocations"
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    assignment: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(ForeignKey("nodes.name"), index=True)
    gpus: Mapped[str] = mapped_column(Text)  # JSON list of GPU indices on the host
    milli_gpu: Mapped[int] = mapped_column(Integer)
    gpu_memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    cpu_millicores: Mapped[int] = mapped_column(Integer, default=0)
    memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    # The rank's lifecycle as its agent reported it (migration 0004), written by whichever replica got the
    # report: the gang's transitions are decided from these, never from one process's memory. NULL: not yet.
    placed_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    launched_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    started_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    exited_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)  # negative: killed by that signal
    lost: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())  # its agent lost it
    # Set when the job left placed/running while this rank's process may still run (migration 0005): the row
    # keeps its GPUs held until the agent confirms the process gone. NULL: the job's live allocation.
    releasing_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The leadership lease token the placement was written under (migration 0006): every placement after a
    # takeover carries the new leader's token, which the fencing check let through. NULL: not by the loop.
    leader_token: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class NodeRow(Base):
    __tablename__ = "nodes"
    name: Mapped[str] = mapped_column(String(256), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))
    gpu_model: Mapped[str] = mapped_column(String(128), default="")
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    labels: Mapped[str] = mapped_column(Text, default="{}")  # JSON object: the agent's, replaced at registration
    admin_labels: Mapped[str] = mapped_column(Text, default="{}", server_default="{}")  # JSON object: admins'
    health: Mapped[str] = mapped_column(Text, default="[]")  # JSON list: one HealthGrade value per GPU
    last_heartbeat_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    version: Mapped[int] = mapped_column(Integer, default=1)


class FabricRow(Base):
    """The one current fabric document (id 1); a new import replaces it under a guarded version."""

    __tablename__ = "fabric"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    document: Mapped[str] = mapped_column(Text)
    version: Mapped[int] = mapped_column(Integer)
    updated_s: Mapped[float] = mapped_column(Float)


class ApiTokenRow(Base):
    """A tenant's or an admin's API token: only a hash is kept (``store.tokens``); ``id`` is the lookup prefix."""

    __tablename__ = "api_tokens"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str | None] = mapped_column(ForeignKey("tenants.name", ondelete="CASCADE"), nullable=True)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    secret_hash: Mapped[str] = mapped_column(String(256))
    created_s: Mapped[float] = mapped_column(Float)
    revoked_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Migration 0011: refused from this time on (NULL: never), and what the admin said it is for.
    expires_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    note: Mapped[str] = mapped_column(String(256), default="", server_default="")


class JoinTokenRow(Base):
    """An agent join token: hashed like API tokens; an agent presents it to register a new node."""

    __tablename__ = "agent_join_tokens"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    secret_hash: Mapped[str] = mapped_column(String(256))
    created_s: Mapped[float] = mapped_column(Float)
    expires_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    revoked_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Migration 0011: how many new node names it may register (NULL: any number, as every token before), how
    # many it has, and what the admin said it is for.
    max_nodes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    used_nodes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    note: Mapped[str] = mapped_column(String(256), default="", server_default="")


class AuditRow(Base):
    __tablename__ = "audit_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at_s: Mapped[float] = mapped_column(Float, index=True)
    actor: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(64))
    subject: Mapped[str] = mapped_column(String(256), index=True)
    data: Mapped[str] = mapped_column(Text, default="{}")  # JSON object


class UsageIntervalRow(Base):
    """GPU time held by one job on one GPU model: open (``end_s`` NULL) while the allocation lasts."""

    __tablename__ = "usage_intervals"
    __table_args__ = (Index("ix_usage_intervals_window", "start_s", "end_s"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(128), index=True)
    tenant: Mapped[str] = mapped_column(String(128))
    pool: Mapped[str] = mapped_column(String(128))
    gpu_model: Mapped[str] = mapped_column(String(128))
    milli_gpu: Mapped[int] = mapped_column(Integer)
    start_s: Mapped[float] = mapped_column(Float)
    end_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    attempt: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the run it belongs to (migration 0009)


class JobCommandRow(Base):
    """A job's command: not part of ``JobSpec`` (the scheduler never needs it), written with the job row."""

    __tablename__ = "server_job_commands"
    job_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    argv: Mapped[str] = mapped_column(Text)  # JSON list of strings: never a shell string
    env: Mapped[str] = mapped_column(Text, default="{}")  # JSON object of extra variables
    # How its ranks are launched beyond argv and env (migration 0009), a JSON object: a container image and
    # its mounts, a working directory, Slurm's variables (``server.launch``).
    launch: Mapped[str] = mapped_column(Text, default="{}", server_default="{}")


class AgentRow(Base):
    """An agent's registration: the node token's hash, its log server's URL (the registration's peer address with
    the port the agent announced), its address for peers (MASTER_ADDR), its inventory."""

    __tablename__ = "server_agents"
    host: Mapped[str] = mapped_column(String(256), primary_key=True)
    token_id: Mapped[str] = mapped_column(String(32))
    token_hash: Mapped[str] = mapped_column(String(256))
    agent_url: Mapped[str] = mapped_column(Text, default="")
    address: Mapped[str] = mapped_column(String(256), default="")
    inventory: Mapped[str] = mapped_column(Text, default="{}")  # the RegisterRequest as JSON
    registered_s: Mapped[float] = mapped_column(Float)


class LeadershipRow(Base):
    """The scheduling loop's lease, one row per cluster name (migration 0006), judged on the database's clock.

    ``token`` grows by one on every takeover; every write of the loop checks (holder, token, not expired) first
    in its own transaction, so a leader that was paused or cut off past ``expires_s`` is refused by the
    database (``store.lease``)."""

    __tablename__ = "leadership"
    cluster: Mapped[str] = mapped_column(String(128), primary_key=True)
    holder: Mapped[str] = mapped_column(String(256))
    token: Mapped[int] = mapped_column(BigInteger)
    expires_s: Mapped[float] = mapped_column(Float)  # seconds since the epoch on the database's clock
    acquired_s: Mapped[float] = mapped_column(Float)  # when ``holder`` took it (the database's clock)


class AgentCommandRow(Base):
    """A command for a node's agent that its stored assignments cannot say (migration 0007): a checkpoint signal.

    Written by the scheduling loop (fenced, with its lease token), sent by whichever replica the agent talks to
    on every heartbeat reply and commands poll until the agent reports it carried it out, then kept as done
    (migration 0012: so the rank is never signalled twice). It belongs to one rank: when the rank's row goes
    (its process confirmed gone), the command goes with it."""

    __tablename__ = "agent_commands"
    __table_args__ = (
        ForeignKeyConstraint(
            ["job_id", "assignment", "task_index"],
            ["allocations.job_id", "allocations.assignment", "allocations.task_index"],
            ondelete="CASCADE",
        ),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    host: Mapped[str] = mapped_column(String(256), index=True)
    job_id: Mapped[str] = mapped_column(String(128))
    assignment: Mapped[int] = mapped_column(Integer)
    task_index: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))  # "signal"
    payload: Mapped[str] = mapped_column(Text, default="{}")  # JSON object: {"signal": "checkpoint"}
    created_s: Mapped[float] = mapped_column(Float)
    leader_token: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    done_s: Mapped[float | None] = mapped_column(Float, nullable=True)  # carried out by its agent; None: not yet
