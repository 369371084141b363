"""What the store hands back: frozen domain-side records, never ORM rows (those stay inside a transaction)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpupool.domain.calendar import Calendar
from gpupool.domain.events import HealthGrade
from gpupool.domain.jobs import Allocation, JobSpec
from gpupool.domain.states import JobState, NodeState
from gpupool.fabric.fabric import Fabric


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A stored job: its spec, where it is in the state machine, and the version a guarded update must quote."""

    spec: JobSpec
    state: JobState
    version: int
    idempotency_key: str | None
    reason_code: str  # why a waiting job waits (the scheduler's code); "" when not waiting
    reason: str
    created_s: float
    updated_s: float
    attempt: int = 0  # the current (or last) run's number; 0 before its first placement

    @property
    def job_id(self) -> str:
        return self.spec.job_id


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One run of a job: where, how much, from when to when, and how it ended (``state``: finished, failed,
    timeout, cancelled, preempted, node_lost, requeued; placed or running while it lasts)."""

    job_id: str
    attempt: int
    assignment: int
    tenant: str
    pool: str
    gpu_model: str
    milli_gpu: int
    hosts: tuple[str, ...]
    placed_s: float
    started_s: float | None
    ended_s: float | None
    state: str
    exit_code: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class AccountingRecord:
    """One run of a job as accounting sees it: the run, its job's name, submit time and submitter (the
    token's actor), and the GPU-seconds it held in the window asked for."""

    run: AttemptRecord
    name: str
    submit_s: float
    user: str
    gpu_seconds: float


@dataclass(frozen=True, slots=True)
class NodeRecord:
    name: str
    state: NodeState
    gpu_model: str
    gpu_count: int
    labels: tuple[tuple[str, str], ...]  # what the scheduler matches: the agent's, then the admins' over them
    health: tuple[HealthGrade, ...]  # one grade per GPU index; empty until the agent reports
    last_heartbeat_s: float | None
    version: int
    agent_labels: tuple[tuple[str, str], ...] = ()  # configured on the node and derived, set at registration
    admin_labels: tuple[tuple[str, str], ...] = ()  # set by admins; they survive the agent registering again


@dataclass(frozen=True, slots=True)
class TenantRecord:
    name: str
    weight: float


@dataclass(frozen=True, slots=True)
class PoolRecord:
    """A pool and its calendar: the TOML text as written (shown back to operators) and its parsed form."""

    name: str
    calendar_toml: str
    calendar: Calendar
    version: int


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a token speaks for: a tenant, or an admin (``tenant`` None)."""

    token_id: str
    tenant: str | None
    admin: bool


@dataclass(frozen=True, slots=True)
class AuditEvent:
    id: int
    at_s: float
    actor: str
    action: str
    subject: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class UsageTotal:
    tenant: str
    gpu_model: str
    pool: str
    gpu_seconds: float


@dataclass(frozen=True, slots=True)
class StoredFabric:
    fabric: Fabric
    version: int


@dataclass(frozen=True, slots=True)
class LoadedState:
    """Everything a server needs at start-up to rebuild its in-memory cluster state."""

    jobs: tuple[JobRecord, ...]  # pending, placed and running jobs, in submit order
    allocations: tuple[Allocation, ...]  # the current allocation of every placed or running job
    nodes: tuple[NodeRecord, ...]
    fabric: StoredFabric | None
    releasing: tuple[Allocation, ...] = ()  # per job, its ranks releasing GPUs (their processes not yet gone)


@dataclass(frozen=True, slots=True)
class WaitWrites:
    """One cycle's changes to the stored waiting reasons (``ServerOps.write_reasons``): shared reasons by class
    id (``WaitClassRow``) to store or delete, the jobs that now point at a class, and the jobs that now wait for
    a (reason code, message) of their own. ``prune``: delete every stored class first (a new loop's first write,
    which points every waiting job anew: the classes a former leader stored are then garbage)."""

    classes: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    joined: Mapping[str, Sequence[str]] = field(default_factory=dict)
    own: Mapping[tuple[str, str], Sequence[str]] = field(default_factory=dict)
    dropped: Sequence[str] = ()
    prune: bool = False
