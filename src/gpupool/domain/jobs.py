"""Job specifications as users submit them, and the allocations the scheduler gives them.

Value types only: frozen, slotted, validated on construction. Units are in the names (``memory_mib``,
``estimated_runtime_s``); times are seconds on whatever clock the caller uses (wall clock in the server,
simulated clock in the simulator), never read here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, StrEnum

from gpupool.domain.elastic import Elastic
from gpupool.domain.errors import JobSpecError

MILLI_PER_GPU = 1000
MAX_RETRIES = 100


class PriorityClass(IntEnum):
    """Priority classes, lowest first. ``REALTIME`` is latency-bound inference: it also gets the healthiest GPUs."""

    BEST_EFFORT = 0
    BATCH = 1
    NORMAL = 2
    HIGH = 3
    REALTIME = 4


class Scope(StrEnum):
    """Topology scopes a job can ask for, smallest first."""

    NVLINK = "nvlink"  # every GPU of the job in one NVLink island (one host, or one multi-node NVLink domain)
    LEAF = "leaf"  # every host under one leaf (in a rail-optimised SU: the same rail leaves)
    SU = "su"  # every host in one scalable unit
    ANY = "any"


class Scaling(StrEnum):
    """How a job's runtime changes when it runs with fewer tasks than it asked for (elastic jobs)."""

    NONE = "none"  # not elastic: it runs with every task it asked for or not at all
    LINEAR = "linear"  # runtime scales as tasks_asked / tasks_given


class TopologyMode(StrEnum):
    """How hard a gang over several hosts holds to its scope (the one it names, or with ``any`` the smallest
    domain that can hold it: ``scheduler.topowait``)."""

    REQUIRED = "required"  # wait rather than cross the scope
    PREFERRED = "preferred"  # wait a bounded time (``topology_wait_s``) for room in the scope, then cross it
    ANY = "any"  # never wait for the scope: the smallest domain with room now


@dataclass(frozen=True, slots=True)
class TopologyRequirement:
    scope: Scope = Scope.ANY
    mode: TopologyMode = TopologyMode.PREFERRED

    @property
    def required(self) -> bool:
        return self.mode is TopologyMode.REQUIRED and self.scope is not Scope.ANY


@dataclass(frozen=True, slots=True)
class GpuShare:
    """A fraction of one GPU: compute in milli-GPU (1..1000) and/or GPU memory in MiB (0: no memory claim)."""

    milli_gpu: int = 0
    memory_mib: int = 0


class RetryOn(StrEnum):
    """Why a run ended, as a retry policy names the causes it runs a job again for."""

    FAILURE = "failure"  # a rank exited non-zero (or could not start)
    NODE_LOST = "node_lost"  # its node stopped beating, or its agent lost a rank
    PREEMPTION = "preemption"  # the scheduler took its GPUs (priority, quota or pool reclaim, a bad GPU)


DEFAULT_RETRY_ON = frozenset({RetryOn.FAILURE, RetryOn.NODE_LOST})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Run a job again, up to ``count`` more times, when a run ends for a cause in ``on``.

    Causes not in ``on`` keep their usual outcome: a failure fails the job, a lost node or a preemption
    requeues it (the cluster's doing, not the job's) without using a retry. A cause in ``on`` uses one; when
    none is left the job fails, whatever the cause.
    """

    count: int = 0
    on: frozenset[RetryOn] = DEFAULT_RETRY_ON


class DependencyKind(StrEnum):
    """Slurm's dependency types: when a job may start, given the jobs it names."""

    AFTER = "after"  # once each has started (or was cancelled before it did)
    AFTEROK = "afterok"  # once each finished with every rank exiting 0
    AFTERNOTOK = "afternotok"  # once each ended otherwise: failed, timed out or cancelled
    AFTERANY = "afterany"  # once each ended, however


@dataclass(frozen=True, slots=True)
class Dependency:
    kind: DependencyKind
    job_ids: tuple[str, ...]  # an array's elements each, as the server expands an array id


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job: a gang of ``tasks`` tasks of ``gpus_per_task`` GPUs each (or of one ``share`` of a GPU each).

    All tasks start together or none does; tasks may share a host when it has room for several. CPU and
    memory are per task and are checked against the host's. ``gpu_models`` empty means any model;
    ``node_selector`` pairs must all match the host's labels.
    """

    job_id: str
    submit_time_s: float = 0.0
    tasks: int = 1
    gpus_per_task: int = 1
    name: str = ""
    tenant: str = "default"
    pool: str = "default"
    priority: PriorityClass = PriorityClass.NORMAL
    cpu_millicores: int = 0
    memory_mib: int = 0
    share: GpuShare | None = None
    gpu_models: tuple[str, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    topology: TopologyRequirement = field(default_factory=TopologyRequirement)
    rail_aligned: bool = False
    preemptible: bool = False
    estimated_runtime_s: float | None = None
    deadline_s: float | None = None
    min_tasks: int | None = None  # elastic: the fewest tasks it may start with (needs ``scaling`` other than none)
    scaling: Scaling = Scaling.NONE
    time_limit_s: float | None = None  # stopped (state timeout) this long after it started
    signal_lead_s: float | None = None  # its checkpoint signal this long before the limit (None: the default)
    retry: RetryPolicy | None = None
    array_id: str = ""  # an element of this array ("": not an element)
    array_index: int | None = None
    array_cap: int = 0  # at most this many of its array's elements placed or running at once (0: no cap)
    after: tuple[Dependency, ...] = ()  # every one must be met before it may start
    elastic: Elastic | None = None  # resizable between its sizes, by its throughput curve (domain/elastic.py)

    def __post_init__(self) -> None:
        where = self.job_id or "<job>"
        if not self.job_id:
            raise JobSpecError("job_id must not be empty", source=where)
        if self.tasks < 1:
            raise JobSpecError(f"tasks must be >= 1, got {self.tasks}", source=where)
        if self.cpu_millicores < 0 or self.memory_mib < 0:
            raise JobSpecError("cpu_millicores and memory_mib must be >= 0", source=where)
        if self.share is None:
            if self.gpus_per_task < 1:
                raise JobSpecError(f"gpus_per_task must be >= 1, got {self.gpus_per_task}", source=where)
        else:
            if self.gpus_per_task != 1:
                raise JobSpecError(
                    "a fractional task uses a share of exactly one GPU: gpus_per_task must be 1", source=where
                )
            if not 0 <= self.share.milli_gpu <= MILLI_PER_GPU or self.share.memory_mib < 0:
                raise JobSpecError(f"milli_gpu must be in 0..1000 and memory_mib >= 0, got {self.share}", source=where)
            if self.share.milli_gpu == 0 and self.share.memory_mib == 0:
                raise JobSpecError("a GPU share must claim milli-GPU, GPU memory or both", source=where)
            if self.rail_aligned:
                raise JobSpecError("rail alignment applies to whole-GPU tasks, not to shares of a GPU", source=where)
        if self.estimated_runtime_s is not None and self.estimated_runtime_s <= 0:
            raise JobSpecError("estimated_runtime_s must be > 0", source=where)
        if self.min_tasks is not None:
            if not 1 <= self.min_tasks <= self.tasks:
                raise JobSpecError(f"min_tasks must be in 1..{self.tasks}, got {self.min_tasks}", source=where)
            if self.scaling is Scaling.NONE:
                raise JobSpecError("min_tasks needs a scaling model (scaling=linear)", source=where)
        self._check_lifecycle(where)
        if self.elastic is not None:
            self._check_elastic(self.elastic, where)

    def _check_elastic(self, elastic: Elastic, where: str) -> None:
        if self.share is not None or self.min_tasks is not None:
            raise JobSpecError("elastic gpus apply to whole-GPU tasks without min_tasks", source=where)
        elastic.check(self.gpus_per_task, self.total_gpus, where)
        if self.deadline_s is not None and self.estimated_runtime_s is None:
            raise JobSpecError(
                "an elastic job with a deadline needs estimated_runtime_s (its work at its asked size)", source=where
            )

    def _check_lifecycle(self, where: str) -> None:
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise JobSpecError(f"time_limit_s must be > 0, got {self.time_limit_s}", source=where)
        if self.signal_lead_s is not None and not self.signal_lead_s >= 0:
            raise JobSpecError(f"signal_lead_s must be >= 0, got {self.signal_lead_s}", source=where)
        if self.retry is not None and not 0 <= self.retry.count <= MAX_RETRIES:
            raise JobSpecError(f"retry count must be in 0..{MAX_RETRIES}, got {self.retry.count}", source=where)
        if self.array_cap < 0 or (self.array_index is not None and self.array_index < 0):
            raise JobSpecError("array_cap and array_index must be >= 0", source=where)
        if (self.array_cap or self.array_index is not None) and not self.array_id:
            raise JobSpecError("array_cap and array_index belong to an array element (array_id)", source=where)
        for dep in self.after:
            if not dep.job_ids:
                raise JobSpecError(f"a dependency ({dep.kind.value}) names no job", source=where)

    @property
    def fractional(self) -> bool:
        return self.share is not None

    @property
    def total_gpus(self) -> int:
        """Whole GPUs the job holds (0 for a fractional job)."""
        return 0 if self.share is not None else self.tasks * self.gpus_per_task

    @property
    def fewest_tasks(self) -> int:
        """The fewest tasks the job may start with: ``min_tasks`` for an elastic job, else every task."""
        return self.tasks if self.min_tasks is None or self.scaling is Scaling.NONE else self.min_tasks

    def runtime_with(self, tasks_given: int, default_runtime_s: float) -> float:
        """Predicted runtime on ``tasks_given`` tasks (the estimate, or ``default_runtime_s`` without one)."""
        base = self.estimated_runtime_s if self.estimated_runtime_s is not None else default_runtime_s
        if tasks_given >= self.tasks or self.scaling is Scaling.NONE:
            return base
        return base * self.tasks / tasks_given

    @property
    def gpu_milli(self) -> int:
        """The job's GPU demand in milli-GPU, whole or fractional: the unit fairness and service are counted in."""
        per_task = self.share.milli_gpu if self.share is not None else self.gpus_per_task * MILLI_PER_GPU
        return self.tasks * per_task


@dataclass(frozen=True, slots=True)
class TaskAllocation:
    """Where one task runs: a host, the GPU indices it holds and how much of each (1000 milli = whole)."""

    host: str
    gpus: tuple[int, ...]
    milli_gpu: int = MILLI_PER_GPU
    gpu_memory_mib: int = 0  # for a share: the GPU memory claimed; 0 for whole GPUs (they hold all of it)
    cpu_millicores: int = 0
    memory_mib: int = 0


@dataclass(frozen=True, slots=True)
class Allocation:
    job_id: str
    tasks: tuple[TaskAllocation, ...]

    @property
    def hosts(self) -> tuple[str, ...]:
        """Distinct hosts in first-use order."""
        return tuple(dict.fromkeys(t.host for t in self.tasks))
