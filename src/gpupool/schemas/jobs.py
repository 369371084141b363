"""The REST API v1 wire formats of jobs as the server answers: a job, its ranks, its runs, lists and the queue.

What a tenant sends (``JobSubmit``) is in ``schemas.api``, which names these too. Times are seconds since the
epoch (UTC); durations seconds; a field that does not apply yet (a run not started) is null.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpupool.schemas.base import Out

StateName = Literal["pending", "placed", "running", "finished", "failed", "cancelled", "timeout"]
JobSortName = Literal["default", "submitted", "name", "state", "tenant", "gpus", "runtime"]
RankState = Literal["placed", "launched", "started", "exited", "lost", "releasing", "ended"]


class JobOut(Out):
    id: str
    state: StateName
    version: int
    tenant: str
    pool: str
    name: str
    priority: str
    tasks: int
    gpus_per_task: int
    milli_gpu: int | None
    preemptible: bool
    submit_time_s: float
    deadline_s: float | None
    reason_code: str
    reason: str
    created_s: float
    updated_s: float
    idempotency_key: str | None
    attempt: int = 0  # its current (or last) run; 0 before its first placement
    time_limit_s: float | None = None
    array_id: str | None = None  # the array it is an element of
    array_index: int | None = None
    gpus: float = Field(default=0.0, description="GPUs it holds when placed: tasks x GPUs per task (or x its share)")
    started_s: float | None = Field(default=None, description="its current (or last) run started (every rank)")
    ended_s: float | None = Field(default=None, description="its current (or last) run ended")
    runtime_s: float | None = Field(default=None, description="that run's time: start to end, or to now if running")
    exit_code: int | None = Field(
        default=None, description="how its last run ended: 0, the failing rank's code, negative for a signal"
    )
    queue_position: int | None = Field(
        default=None,
        description="pending jobs: 1 = the next the configured policy takes, as of the leader's last cycle; "
        "null when not pending, not yet seen by a cycle, or asked of a standby replica",
    )
    expected_start_s: float | None = Field(
        default=None,
        description="pending jobs: when the scheduler expects to start it if nothing new arrived (epoch seconds, "
        "projected from the live state with the running jobs' expected ends); null when unknown or not pending",
    )


class RankOut(Out):
    """One rank of a job's current (or last) placement: where it runs and how far it got."""

    rank: int
    host: str
    gpus: list[int]
    state: RankState  # ``ended``: the job is over and its ranks' rows are gone (host and GPUs from its placement)
    exit_code: int | None = None
    placed_s: float | None = None
    launched_s: float | None = None
    started_s: float | None = None
    exited_s: float | None = None
    releasing_s: float | None = None  # its job left it while its process may still run: GPUs held until gone


class JobDetail(JobOut):
    """``GET /v1/jobs/{id}``: a job with its ranks."""

    ranks: list[RankOut] = []  # noqa: RUF012 pydantic copies a mutable default per instance


class AttemptOut(Out):
    """One run of a job: where, from when to when, and how it ended."""

    attempt: int
    state: str  # finished, failed, timeout, cancelled, preempted, node_lost, requeued; placed, running
    hosts: list[str]
    gpu_model: str
    gpus: float
    placed_s: float
    started_s: float | None
    ended_s: float | None
    exit_code: int | None
    reason: str


class AttemptList(Out):
    job_id: str
    attempts: list[AttemptOut]


class SubmitOut(Out):
    job: JobOut  # an array's first element
    created: bool
    array_id: str | None = None
    jobs: int = 1  # an array's elements


class ArrayOut(Out):
    """An array as one: its size, its cap, how many elements are in each state."""

    array_id: str
    tenant: str
    size: int
    cap: int
    states: dict[str, int]


class JobList(Out):
    """One page of ``GET /v1/jobs``: the jobs, how many match in all, and where this page starts."""

    jobs: list[JobOut]
    total: int
    offset: int


class QueueOut(Out):
    """``GET /v1/queue``: pending jobs in the order the configured policy takes them."""

    policy: str  # the configured queue policy (fifo, priority, fair, ...)
    as_of_s: float | None  # when the leader's cycle that ordered it ran; null: no order known here
    jobs: list[JobOut]  # ``queue_position`` ascending; jobs the last cycle did not see follow, oldest first
    total: int
    offset: int


class WhyOut(Out):
    id: str
    state: StateName
    reason_code: str
    reason: str
    deadline: str | None = None  # deadline jobs: the admission answer (feasible, at_risk, infeasible)
    deadline_detail: str | None = None  # the admission's sentence: earliest finish, deadline, slack
    earliest_finish_s: float | None = None


class EventOut(Out):
    id: int
    at_s: float
    actor: str
    action: str
    data: dict[str, object]


class EventList(Out):
    events: list[EventOut]


class LogsOut(Out):
    job_id: str
    rank: int
    stream: Literal["stdout", "stderr"]
    text: str
    # Where the log goes on: ask again with ``offset`` set to it for what was written since (None: an older
    # agent, which cannot say).
    next_offset: int | None = None
