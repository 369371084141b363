"""Events: past-tense facts that change the cluster. ``ClusterState.apply`` is their one reducer.

The server builds them from agents' reports and the scheduler's decisions; the simulator builds them from a
trace and its own clock. ``at_s`` is the time of the fact on the caller's clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum

from gpupool.domain.jobs import Allocation, JobSpec
from gpupool.domain.states import JobState


class HealthGrade(IntEnum):
    """A GPU's health, worst last. BAD GPUs are never placed on; DEGRADED ones are avoided when there is choice."""

    OK = 0
    DEGRADED = 1
    BAD = 2


class LinkState(StrEnum):
    UP = "up"
    DEGRADED = "degraded"  # up at a lower width or speed, or erroring: avoided when there is choice
    DOWN = "down"


@dataclass(frozen=True, slots=True)
class JobSubmitted:
    job: JobSpec
    at_s: float


@dataclass(frozen=True, slots=True)
class JobPlaced:
    allocation: Allocation
    at_s: float


@dataclass(frozen=True, slots=True)
class JobStarted:
    job_id: str
    at_s: float


@dataclass(frozen=True, slots=True)
class JobFinished:
    job_id: str
    at_s: float
    succeeded: bool = True


@dataclass(frozen=True, slots=True)
class JobCancelled:
    job_id: str
    at_s: float


@dataclass(frozen=True, slots=True)
class JobEnded:
    """A job ended as ``state`` (finished, failed, cancelled, timeout), as the record of its end says: a
    decision this state's owner made (a time limit passed, a dependency that can never be met), an end
    another writer stored (an agent's report, a user's cancel, another replica), or the end of a job this
    state never held, read back for the jobs that depend on it. Unlike ``JobFinished`` it takes the job
    from wherever it is: the store already checked the way there."""

    job_id: str
    state: JobState
    at_s: float


@dataclass(frozen=True, slots=True)
class JobPreempted:
    job_id: str
    at_s: float
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RanksReleasing:
    """A stopped job's ranks whose processes may still run: their GPUs stay held (``allocation``'s tasks are
    all of the job's releasing ranks; it replaces what was held for the job before)."""

    allocation: Allocation
    at_s: float


@dataclass(frozen=True, slots=True)
class RanksReleased:
    """Every releasing rank of a job is confirmed gone: its GPUs are free."""

    job_id: str
    at_s: float


@dataclass(frozen=True, slots=True)
class JobCheckpointed:
    """The job saved its progress: work before ``at_s`` survives a preemption."""

    job_id: str
    at_s: float


@dataclass(frozen=True, slots=True)
class NodeLost:
    host: str
    at_s: float


@dataclass(frozen=True, slots=True)
class NodeDrained:
    host: str
    at_s: float
    reason: str = ""


@dataclass(frozen=True, slots=True)
class NodeRestored:
    host: str
    at_s: float


@dataclass(frozen=True, slots=True)
class NodeLabelled:
    host: str
    labels: tuple[tuple[str, str], ...]
    at_s: float


@dataclass(frozen=True, slots=True)
class GpuHealthChanged:
    host: str
    gpu: int
    grade: HealthGrade
    at_s: float
    reason: str = ""  # why, as the agent said it ("XID 79 (GPU has fallen off the bus)"); not used by the reducer


@dataclass(frozen=True, slots=True)
class LinkHealthChanged:
    """The health of a switch's uplinks (by switch name): congestion is measured, this is the state."""

    switch: str
    state: LinkState
    at_s: float


@dataclass(frozen=True, slots=True)
class TelemetryReported:
    """A host's GPU readings: one temperature per GPU in index order (NaN: no reading), and as many
    utilisations (percent; empty when not measured). The scheduler weighs temperatures; utilisation is
    carried for the record (the server's journal, a replay) and weighs nothing yet."""

    host: str
    gpu_temperature_c: tuple[float, ...]
    at_s: float
    gpu_utilization_pct: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class PortCountersReported:
    """A switch's summed uplink counters as ``perfquery`` reads them (cumulative, they only grow until reset)."""

    switch: str
    port_xmit_wait: int
    symbol_errors: int
    at_s: float


Event = (
    JobSubmitted
    | JobPlaced
    | JobStarted
    | JobFinished
    | JobCancelled
    | JobEnded
    | JobPreempted
    | JobCheckpointed
    | RanksReleasing
    | RanksReleased
    | NodeLost
    | NodeDrained
    | NodeRestored
    | NodeLabelled
    | GpuHealthChanged
    | LinkHealthChanged
    | TelemetryReported
    | PortCountersReported
)
