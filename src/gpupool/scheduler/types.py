"""The scheduler's contract: request, result, configuration and reason codes. All frozen values."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from math import inf, nan
from types import MappingProxyType
from typing import NamedTuple, overload

import numpy as np
import numpy.typing as npt

from gpupool.cluster.snapshot import ClusterSnapshot
from gpupool.domain.calendar import Calendar
from gpupool.domain.jobs import Allocation, JobSpec
from gpupool.domain.sharing import PoolDemand, Quota
from gpupool.scheduler.gittins import GittinsConfig, ServiceHistory


class ReasonCode(StrEnum):
    """Why a job waits (or was preempted). Stable strings: clients and tests match on them."""

    NO_CAPACITY = "no_capacity"  # not enough free GPUs (or GPU shares) at all
    FRAGMENTED = "fragmented"  # enough free GPUs, but not enough hosts with room for a whole task
    TOPOLOGY = "topology"  # it fits the cluster, but not inside the domain it requires
    RAIL_ALIGNMENT = "rail_alignment"  # it fits, but no set of hosts has the same GPU indices free
    CPU_MEMORY = "cpu_memory"  # GPUs are free, but the hosts with them lack CPU or memory for the tasks
    NO_MATCHING_HOSTS = "no_matching_hosts"  # no host has an allowed GPU model and the selected labels
    UNSATISFIABLE = "unsatisfiable"  # can never run on this fabric as it is built, even when empty
    # Cannot run on the hosts in service (up, GPUs not bad), even were they empty: it needs hosts that are
    # lost, drained or without an agent (or GPUs marked bad). Never "waiting for capacity".
    UNSCHEDULABLE = "unschedulable"
    BLOCKED = "blocked"  # strict ordering: waits behind an earlier job that does not fit
    CYCLE_LIMIT = "cycle_limit"  # not considered: the cycle reached its placement bound first
    PREEMPTED = "preempted"  # used by preemption decisions (issue 4)
    QUOTA_EXCEEDED = "quota_exceeded"  # over its tenant's quota in its pool and the cohort lends too little
    PREEMPTING = "preempting"  # victims were preempted for it this cycle; it is placed once they are gone
    WAITING_FOR_RESERVATION = "waiting_for_reservation"  # backfill: holds a reservation from a later time
    RESERVED = "reserved"  # backfill: fits now, but would delay a job's reservation
    DEADLINE_INFEASIBLE = "deadline_infeasible"  # cannot finish by its deadline even if started now
    DEPENDENCY = "dependency"  # waits for the jobs it depends on (afterok, afterany, ...)
    ARRAY_LIMIT = "array_limit"  # its array already runs as many elements as its cap (``%N``) allows
    # Endings (``ScheduleResult.endings``):
    DEPENDENCY_NEVER_SATISFIED = "dependency_never_satisfied"  # a job it depends on ended the wrong way: cancelled
    TIME_LIMIT = "time_limit"  # ran past its time limit: stopped (timeout); also its checkpoint signal's reason
    # Preemption and checkpoint-signal reasons:
    POOL_WINDOW_CLOSED = "pool_window_closed"  # its pool's borrowed capacity went back to the owner's window
    POOL_RECLAIM = "pool_reclaim"  # the owning pool needs its lent capacity back (a job or its demand target)
    QUOTA_RECLAIM = "quota_reclaim"  # a cohort member reclaims nominal quota it had lent
    PRIORITY = "priority"  # a higher-priority job needs the GPUs of this preemptible one
    ATTAINED_SERVICE = "attained_service"  # LAS (Tiresias): a job with less attained service needs its GPUs
    RESIZE = "resize"  # an elastic job stopped at a checkpoint to restart at another size (scheduler/elastic.py)
    # A deadline job about to miss its deadline needs the GPUs of this one (no deadline, or one it still meets
    # after a restart: ``scheduler.taking``).
    DEADLINE = "deadline"


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

    policy: str = "srt"
    placer: str = "topology"
    max_placements_per_cycle: int = 1000
    strict: bool = False
    seed: int = 0  # the only source of randomness a policy or placer may use
    telemetry: TelemetryWeights = TelemetryWeights()
    las_thresholds_gpu_s: tuple[float, ...] = (3600.0, 36000.0, 360000.0)  # Tiresias-style queue limits
    gittins: GittinsConfig = field(default_factory=GittinsConfig)  # the ``gittins`` policy's prior and window
    max_domains_tried: int = 8  # per level, before moving up a level (bounds work on fragmented fabrics)
    time_limit_lead_s: float = 60.0  # a job with a time limit gets its checkpoint signal this long before it
    # A ``preferred`` gang waits for its smallest domain when one is expected to have room this soon
    # (``scheduler.topowait``); 0: it never waits (crosses domains when its own has no room now).
    topology_wait_s: float = 3600.0


class BackfillMode(StrEnum):
    NONE = "none"
    EASY = "easy"  # one reservation, for the first job that does not fit
    CONSERVATIVE = "conservative"  # a reservation for every job that does not fit (up to a bound)


@dataclass(frozen=True, slots=True)
class PreemptionConfig:
    """Who may be preempted, and how gently. Reclaims (pool windows, pool demand, quota) signal CHECKPOINT
    first and preempt ``grace_s`` after the reclaim began; priority and service preemption are immediate.
    Pool reclaims never preempt a job that is not ``preemptible`` (an inference service's SLO).

    ``by_service`` (Tiresias): a ``preemptible`` running job whose service rank (counting its current run)
    is worse than a pending job's may be preempted for it once it ran ``min_runtime_s``, and (``max_lost_s``
    set) only while its work since the last checkpoint is at most that many seconds: preempting a job that
    would lose hours of work costs more than it gives. The rank is the policy's (``policies.service_rank``):
    the Gittins index of attained service for ``gittins``, else the LAS queue (``las_thresholds_gpu_s``).
    """

    enabled: bool = True
    by_priority: bool = True  # a job may preempt ``preemptible`` jobs of lower priority
    by_service: bool = False  # a job may preempt ``preemptible`` jobs in a higher LAS queue
    max_lost_s: float | None = None  # by_service: at most this much work since the victim's last checkpoint
    min_runtime_s: float = 300.0  # a job runs at least this long before a preemptor may take its GPUs
    grace_s: float = 300.0
    max_preemptors_per_cycle: int = 16
    max_victims_per_job: int = 64


@dataclass(frozen=True, slots=True)
class SharingPolicy:
    """Configuration of the sharing rules: tenants, quotas, pools and their calendar, preemption, backfill and
    deadlines. It changes when an operator changes it; what changes every cycle travels in ``CycleInputs``.

    ``require_quota``: a tenant without a quota in a pool may not run there (else it is unrestricted).
    ``deadline_admission``: a deadline job that cannot finish by its deadline even if started now waits
    (DEADLINE_INFEASIBLE), and an elastic one (``min_tasks``) may start on fewer tasks while that size still
    meets it; off, deadlines only order the queue (``edf``, ``slack``).
    """

    quotas: tuple[Quota, ...] = ()
    require_quota: bool = False
    weights: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))  # tenant -> weight (1)
    usage_half_life_s: float = 7 * 86400.0
    calendar: Calendar | None = None
    lend_pools: bool = True  # jobs may borrow other pools' idle hosts (reclaimed when the owner needs them)
    preemption: PreemptionConfig = PreemptionConfig()
    backfill: BackfillMode = BackfillMode.NONE
    max_reservations: int = 16  # conservative backfill: reservations per cycle
    default_runtime_s: float = 3600.0  # for jobs without an estimate (backfill, deadlines, slack)
    deadline_at_risk: float = 0.1  # at risk when the predicted slack is under this fraction of the runtime
    deadline_admission: bool = True
    # Seconds from placement to a job's processes running (the launch path): a deadline job is admitted only
    # if now + this + its runtime meets its deadline, else it would start with less slack than its launch.
    launch_latency_s: float = 0.4
    slack_boost_at: tuple[float, ...] = (2.0, 0.5)  # slack / runtime ratios at which priority rises by one

    @property
    def plain(self) -> bool:
        """No quotas, pools, preemption, backfill or deadline admission: the cycle only orders and places."""
        return (
            not self.quotas
            and not self.require_quota
            and self.calendar is None
            and not self.preemption.enabled
            and self.backfill is BackfillMode.NONE
            and not self.deadline_admission
        )


# What a request without sharing rules means: quotas, pools, preemption, backfill and deadline admission off.
NO_SHARING = SharingPolicy(preemption=PreemptionConfig(enabled=False), deadline_admission=False)


@dataclass(frozen=True, slots=True)
class CycleInputs:
    """What the caller measures and hands in every cycle (the server's loop and the simulator's engine alike,
    through ``scheduler.driver``): decayed GPU-seconds per tenant (``fair``), pools' demand targets (a
    calendar's reclaims), and finished jobs' GPU-service for a policy that ``uses_service_history``."""

    usage_gpu_s: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))  # decayed, per tenant
    pool_demand: tuple[PoolDemand, ...] = ()
    service_history: ServiceHistory | None = None  # None: the policy's prior alone


@dataclass(frozen=True, slots=True)
class RequestType:
    """One kind of request in the target workload and its popularity (FGD's "typical pod").

    ``milli_gpu`` is per GPU: 1000 for whole GPUs, the share's compute for a share (``gpus`` is then 1).
    ``scheduler.fragmentation.request_mix(jobs)`` builds these from a workload's jobs."""

    gpus: int
    milli_gpu: int
    weight: float  # relative popularity (task count); need not sum to 1
    gpu_memory_mib: int = 0  # a share's GPU memory claim
    cpu_millicores: int = 0  # per task
    memory_mib: int = 0  # per task
    gpu_models: tuple[str, ...] = ()  # empty: any model


SortKey = tuple[float | int | str, ...]  # a queue policy's sort key: total, ending in the job id


@dataclass(frozen=True, slots=True, eq=False)
class JobNumbers:
    """What a cycle reads of each job of a group without visiting it (deadline admission, reservations,
    preemption): one row per job in the group's order, one table (the jobs entering or leaving in one cycle are one
    ``np.insert`` or ``np.delete``). Never changed in place."""

    table: npt.NDArray[np.float64]  # columns: deadline (inf: none), estimate (nan: none), priority, elastic

    @staticmethod
    def row(j: JobSpec) -> tuple[float, float, float, float]:
        dl, est = j.deadline_s, j.estimated_runtime_s
        return (
            inf if dl is None else dl,
            nan if est is None else est,
            float(j.priority),
            float(j.fewest_tasks < j.tasks),
        )

    @staticmethod
    def of(jobs: Sequence[JobSpec]) -> JobNumbers:
        return JobNumbers(np.array([JobNumbers.row(j) for j in jobs], dtype=np.float64).reshape(len(jobs), 4))

    @property
    def deadline_s(self) -> npt.NDArray[np.float64]:
        return self.table[:, 0]

    @property
    def estimate_s(self) -> npt.NDArray[np.float64]:
        return self.table[:, 1]

    @property
    def priority(self) -> npt.NDArray[np.float64]:
        return self.table[:, 2]

    @property
    def elastic(self) -> npt.NDArray[np.bool_]:
        """Whether it may start on fewer tasks (``JobSpec.fewest_tasks``)."""
        out: npt.NDArray[np.bool_] = self.table[:, 3] > 0
        return out


@dataclass(frozen=True, slots=True)
class QueueGroup:
    """Pending jobs of one shape in a policy's order (``keys[i]`` is ``jobs[i]``'s key)."""

    shape: tuple[object, ...]
    keys: tuple[SortKey, ...]
    jobs: tuple[JobSpec, ...]
    ids: tuple[str, ...]  # the jobs' ids
    numbers: JobNumbers | None = field(default=None, compare=False, repr=False)  # None: made from ``jobs``


@dataclass(frozen=True, slots=True)
class QueueView:
    """The pending queue as the caller keeps it between cycles (``scheduler.queue.QueueIndex``): every
    pending job, grouped by shape, in the order of the policy named ``policy``."""

    policy: str
    groups: tuple[QueueGroup, ...]
    order: tuple[str, ...]  # every pending job's id in the policy's order (the groups merged)
    held: int = 0  # jobs with dependencies or an array cap: the admit stage decides those one by one
    deadlines: int | None = None  # jobs with a deadline (None: not counted)

    @property
    def count(self) -> int:
        return len(self.order)


@dataclass(frozen=True, slots=True)
class ScheduleRequest:
    snapshot: ClusterSnapshot
    pending: tuple[JobSpec, ...]
    now_s: float
    config: SchedulerConfig = SchedulerConfig()
    sharing: SharingPolicy = NO_SHARING
    inputs: CycleInputs = CycleInputs()
    # The target workload the ``frag`` placer measures fragmentation against; empty: this cycle's queue.
    workload_mix: tuple[RequestType, ...] = ()
    # ``pending`` as the caller keeps it ordered and grouped (None: the cycle sorts it). Used when it is for
    # ``config.policy`` and holds ``len(pending)`` jobs; the caller vouches that they are the same jobs.
    queue: QueueView | None = None


class Waiting(NamedTuple):
    """A pending job left waiting, and why. A NamedTuple, not a dataclass: a cycle over a long queue makes one
    per waiting job, and a tuple is made in a third of the time (with less for the garbage collector)."""

    job_id: str
    reason: ReasonCode
    message: str


@dataclass(frozen=True, slots=True)
class Preemption:
    job_id: str
    reason: ReasonCode
    message: str


class SignalKind(StrEnum):
    CHECKPOINT = "checkpoint"  # save progress now: the job will be preempted at ``preempt_at_s``


@dataclass(frozen=True, slots=True)
class Signal:
    job_id: str
    kind: SignalKind
    reason: ReasonCode
    message: str
    preempt_at_s: float


@dataclass(frozen=True, slots=True)
class Ending:
    """A job the cycle ends: a running one past its time limit (``TIME_LIMIT``: stopped, state timeout) or a
    pending one whose dependency can never be met (``DEPENDENCY_NEVER_SATISFIED``: cancelled)."""

    job_id: str
    reason: ReasonCode
    message: str


@dataclass(frozen=True, slots=True)
class Reservation:
    """Backfill: ``job_id`` is expected to start at ``start_s`` on ``hosts``; nothing placed now may hold
    those hosts past that time."""

    job_id: str
    start_s: float
    hosts: tuple[str, ...]


@dataclass(frozen=True, slots=True, eq=False)
class GroupWaits:
    """One shape group's waiting reasons after a cycle over the kept queue: ``labels[i]`` indexes ``table``
    for ``ids[i]`` (-1: placed, not waiting). ``ids`` is the view's tuple, the same object from cycle to cycle
    while nobody entered or left the group, so a caller that stored the last cycle's reasons compares two
    label arrays instead of 50,000 reasons (``server.reasons``). ``table`` holds each (reason, message) once.
    ``runtime[i]``: the runtime the cycle expected of ``ids[i]`` (None: not computed): jobs of one shape and
    runtime wait for the same reason unless one of their own (a deadline, a visit), so a store can keep that
    reason once for all of them."""

    key: tuple[object, ...]  # the group's shape
    ids: tuple[str, ...]
    labels: npt.NDArray[np.int32]
    table: tuple[tuple[ReasonCode, str], ...]
    runtime: npt.NDArray[np.float64] | None = None


class Waits(Sequence[Waiting]):
    """The jobs a cycle left waiting, each with its reason, in the policy's order. A cycle that visited
    shapes rather than jobs makes them only when they are read: the server stores them, the simulator never
    reads them. ``len`` never makes them. ``by_group()``: the same reasons per shape group (``GroupWaits``),
    or None when the cycle went job by job."""

    __slots__ = ("_count", "_groups", "_items", "_make")

    def __init__(
        self,
        items: Sequence[Waiting] = (),
        *,
        count: int = 0,
        make: Callable[[], tuple[Waiting, ...]] | None = None,
        groups: Callable[[], tuple[GroupWaits, ...]] | None = None,
    ) -> None:
        self._items: tuple[Waiting, ...] | None = tuple(items) if make is None else None
        self._count = len(items) if make is None else count
        self._make = make
        self._groups = groups

    def by_group(self) -> tuple[GroupWaits, ...] | None:
        """Every waiting job's reason, group by group (placed jobs labelled -1); None: no groups."""
        return None if self._groups is None else self._groups()

    def _all(self) -> tuple[Waiting, ...]:
        if self._items is None:
            assert self._make is not None
            self._items = self._make()
            self._make = None
        return self._items

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, i: int) -> Waiting: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[Waiting, ...]: ...

    def __getitem__(self, i: int | slice) -> Waiting | tuple[Waiting, ...]:
        return self._all()[i]

    def __iter__(self) -> Iterator[Waiting]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Waits):
            return self._count == other._count and self._all() == other._all()
        if isinstance(other, tuple | list):
            return self._all() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return f"Waits({list(self._all())!r})"


@dataclass(frozen=True, slots=True)
class ScheduleResult:
    """Placements in decision order, preemptions (whole jobs: the caller applies ``JobPreempted`` for each),
    a reason for every pending job not placed and not ended, checkpoint signals, backfill reservations, and
    the jobs the cycle ends (time limits, dependencies that can never be met)."""

    placements: tuple[Allocation, ...]
    preemptions: tuple[Preemption, ...]
    waiting: Waits
    snapshot_version: int
    signals: tuple[Signal, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    endings: tuple[Ending, ...] = ()

    def placed_ids(self) -> frozenset[str]:
        return frozenset(a.job_id for a in self.placements)
