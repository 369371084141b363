"""The scheduler's contract: request, result, configuration and reason codes. All frozen values."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpupool.cluster.snapshot import ClusterSnapshot
from gpupool.domain.jobs import Allocation, JobSpec


class ReasonCode(StrEnum):
    """Why a job waits (or was preempted). Stable strings: clients and tests match on them."""

    NO_CAPACITY = "no_capacity"  # not enough free GPUs (or GPU shares) at all
    FRAGMENTED = "fragmented"  # enough free GPUs, but not enough hosts with room for a whole task
    TOPOLOGY = "topology"  # it fits the cluster, but not inside the domain it requires
    RAIL_ALIGNMENT = "rail_alignment"  # it fits, but no set of hosts has the same GPU indices free
    CPU_MEMORY = "cpu_memory"  # GPUs are free, but the hosts with them lack CPU or memory for the tasks
    NO_MATCHING_HOSTS = "no_matching_hosts"  # no host has an allowed GPU model and the selected labels
    UNSATISFIABLE = "unsatisfiable"  # can never run on this fabric as it is built, even when empty
    BLOCKED = "blocked"  # strict ordering: waits behind an earlier job that does not fit
    CYCLE_LIMIT = "cycle_limit"  # not considered: the cycle reached its placement bound first
    PREEMPTED = "preempted"  # used by preemption decisions (issue 4)


@dataclass(frozen=True, slots=True)
class TelemetryWeights:
    """How much telemetry pushes placements away from a GPU, host or leaf (all penalties add up).

    A penalty at or above ``avoid_threshold`` moves a host or domain behind every healthy one; below it,
    penalties only break ties, so normal noise in temperatures does not undo packing.
    """

    degraded_gpu: float = 1.0
    temperature_from_c: float = 70.0  # no penalty below
    temperature_to_c: float = 85.0  # full ``hot_gpu`` penalty at and above
    hot_gpu: float = 1.0
    congested_leaf: float = 1.0  # times the leaf's congestion score in [0, 1]
    erroring_leaf: float = 1.0
    degraded_leaf: float = 1.0
    down_leaf: float = 2.0
    avoid_threshold: float = 0.5


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Typed configuration. One cycle considers jobs in policy order and stops after
    ``max_placements_per_cycle`` placements (the rest wait with ``CYCLE_LIMIT``); with ``strict`` it also
    stops at the first job that does not fit, so nothing overtakes it (the rest wait with ``BLOCKED``)."""

    policy: str = "priority"
    placer: str = "topology"
    max_placements_per_cycle: int = 1000
    strict: bool = False
    seed: int = 0  # the only source of randomness a policy or placer may use
    telemetry: TelemetryWeights = TelemetryWeights()
    las_thresholds_gpu_s: tuple[float, ...] = (3600.0, 36000.0, 360000.0)  # Tiresias-style queue limits
    max_domains_tried: int = 8  # per level, before moving up a level (bounds work on fragmented fabrics)


@dataclass(frozen=True, slots=True)
class ScheduleRequest:
    snapshot: ClusterSnapshot
    pending: tuple[JobSpec, ...]
    now_s: float
    config: SchedulerConfig = SchedulerConfig()


@dataclass(frozen=True, slots=True)
class Waiting:
    job_id: str
    reason: ReasonCode
    message: str


@dataclass(frozen=True, slots=True)
class Preemption:
    job_id: str
    reason: ReasonCode
    message: str


@dataclass(frozen=True, slots=True)
class ScheduleResult:
    """Placements in decision order, preemptions, and a reason for every pending job not placed."""

    placements: tuple[Allocation, ...]
    preemptions: tuple[Preemption, ...]
    waiting: tuple[Waiting, ...]
    snapshot_version: int

    def placed_ids(self) -> frozenset[str]:
        return frozenset(a.job_id for a in self.placements)
