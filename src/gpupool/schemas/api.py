"""The REST API v1 wire formats: what tenants and operators send and get back. Strict: unknown fields refused.

Conversion to domain values happens in the server; these models only validate shapes and ranges, so a bad
request is a 422 naming the field before any use case runs.

Every string a request carries is ``Text`` (``schemas.base``): text the database can store. What a node can run (argv and env sizes, variable names, labels) is checked on top of ``Text`` by the
domain's rules, through ``_check`` below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import (
    AliasChoices,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from gpupool.domain.containers import MAX_MOUNTS, Container, Mount, check_container, check_container_env
from gpupool.domain.errors import InputError
from gpupool.domain.labels import check_labels
from gpupool.domain.units import parse_duration, parse_memory_mib
from gpupool.domain.workload import check_command, command_size, env_size
from gpupool.schemas import jobs as _jobs
from gpupool.schemas.base import In, Out, Text

# The job wire models live in ``schemas.jobs``; named here too, so ``api.JobOut`` and friends keep working.
ArrayOut = _jobs.ArrayOut
AttemptList = _jobs.AttemptList
AttemptOut = _jobs.AttemptOut
EventList = _jobs.EventList
EventOut = _jobs.EventOut
JobDetail = _jobs.JobDetail
JobList = _jobs.JobList
JobOut = _jobs.JobOut
LogsOut = _jobs.LogsOut
QueueOut = _jobs.QueueOut
RankOut = _jobs.RankOut
StateName = _jobs.StateName
SubmitOut = _jobs.SubmitOut
WhyOut = _jobs.WhyOut

DEFAULT_RETRY_ON: tuple[Literal["failure", "node_lost", "preemption"], ...] = ("failure", "node_lost")
PriorityName = Literal["best_effort", "batch", "normal", "high", "realtime"]
Name = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


# The job spec's version: what a job file or request that gives none means. Another is refused, never guessed.
SPEC_VERSION = 1


def _human(parse: Callable[[str], float | int]) -> Callable[[object], object]:
    """A validator that reads a unit-bearing string (``4h``, ``64Gi``) with ``parse``; numbers pass as they are."""

    def read(value: object) -> object:
        if isinstance(value, str):
            try:
                return parse(value)
            except InputError as e:
                raise ValueError(e.reason) from None
        return value

    return read


# Human units in the job spec (``memory: 64Gi``, ``time_limit: 1h30m``), a number still meaning MiB or seconds;
# the older names with the unit in them (``memory_mib``, ``time_limit_s``) are still read.
# The JSON Schema says what a job file may hold; the server's parsers decide (and name what is wrong).
_MEMORY_TEXT = r"^\s*\d+(\.\d+)?\s*([KMGTkmgt][Ii]?[Bb]?|[Bb])?\s*$"
_DURATION_TEXT = r"^\s*(\d+(\.\d+)?\s*[smhdwSMHDW]\s*)+$|^\s*\d+(\.\d+)?\s*$"
MiB = Annotated[
    int,
    BeforeValidator(_human(parse_memory_mib)),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": _MEMORY_TEXT}]}),
]
Seconds = Annotated[
    float,
    BeforeValidator(_human(parse_duration)),
    WithJsonSchema({"anyOf": [{"type": "number", "minimum": 0}, {"type": "string", "pattern": _DURATION_TEXT}]}),
]


def _named(name: str, old: str) -> AliasChoices:
    return AliasChoices(name, old)


class ShareIn(In):
    milli_gpu: int = Field(default=0, ge=0, le=1000, description="thousandths of one GPU")
    memory_mib: MiB = Field(
        default=0, ge=0, le=10_000_000, validation_alias=_named("memory", "memory_mib"), description="GPU memory: 20Gi"
    )


class TopologyIn(In):
    scope: Literal["nvlink", "leaf", "su", "any"] = "any"
    mode: Literal["required", "preferred", "any"] = "preferred"


class ElasticGpusIn(In):
    min: int = Field(ge=1, le=4096, description="the fewest GPUs it may run at")
    max: int = Field(ge=1, le=4096, description="the most GPUs it may run at")
    step: int = Field(default=1, ge=1, le=4096, description="sizes are min, min+step, ... (those on its curve)")


class ElasticIn(In):
    """The GPU counts the job may run at and how fast it runs at each: the scheduler resizes it (a checkpoint
    signal, a stop, a relaunch at the new size) to give it the fewest GPUs that meet its deadline."""

    gpus: ElasticGpusIn
    curve: Text | list[tuple[int, float]] = Field(
        description="throughput per GPU count: [[1, 6.8], [2, 11.8], ...] (any unit), or a named curve: resnet50@256"
    )

    @field_validator("curve")
    @classmethod
    def _bounded(cls, curve: str | list[tuple[int, float]]) -> str | list[tuple[int, float]]:
        if isinstance(curve, list) and not 1 <= len(curve) <= 256:
            raise ValueError("a throughput curve has 1..256 points")
        return curve


RetryCause = Literal["failure", "node_lost", "preemption"]


class RetryIn(In):
    """Run the job again up to ``count`` more times when a run ends for a cause in ``on``."""

    count: int = Field(ge=0, le=100)
    on: list[RetryCause] = Field(default_factory=lambda: list(DEFAULT_RETRY_ON), min_length=1, max_length=3)


DependencyKindName = Literal["after", "afterok", "afternotok", "afterany"]


class DependencyIn(In):
    """Start only once the named jobs (job ids, array ids for all their elements, or ``ARRAY_INDEX``) did as
    ``kind`` says: Slurm's after, afterok, afternotok, afterany."""

    kind: DependencyKindName
    jobs: list[Text] = Field(min_length=1, max_length=1024)


class MountIn(In):
    """A node's path bound into the job's container (``image``)."""

    source: Text = Field(min_length=1, max_length=4096)
    target: Text = Field(min_length=1, max_length=4096)
    read_only: bool = False


class JobSubmit(In):
    """A job as a tenant submits it (the job file's fields). ``command`` is an argv list, run without a shell."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, title="gpupool job")

    version: int = Field(
        default=SPEC_VERSION, description="the job spec's version; only 1 exists", json_schema_extra={"enum": [1]}
    )
    command: list[Text] = Field(min_length=1, max_length=1024, description="the argv each task runs (no shell)")
    env: dict[Text, Text] = Field(default_factory=dict, max_length=256, validate_default=True)
    name: Text = Field(default="", max_length=256)
    tenant: Text | None = Field(default=None, min_length=1, max_length=128, description="admins only: on whose behalf")
    pool: Text = Field(default="default", min_length=1, max_length=128)
    tasks: int = Field(default=1, ge=1, le=4096, description="ranks of the gang, placed all at once")
    gpus_per_task: int = Field(default=1, ge=1, le=64)
    priority: PriorityName = "normal"
    cpu_millicores: int = Field(default=0, ge=0, le=10_000_000)
    memory_mib: MiB = Field(
        default=0,
        ge=0,
        le=1_000_000_000,
        validation_alias=_named("memory", "memory_mib"),
        description="host memory per task: 64Gi, 512Mi, 16GB; a number is MiB",
    )
    share: ShareIn | None = Field(default=None, description="a fraction of one GPU instead of whole GPUs")
    gpu_models: list[Text] = Field(default_factory=list, max_length=64)
    node_selector: dict[Text, Text] = Field(default_factory=dict, max_length=64)
    topology: TopologyIn = TopologyIn()
    rail_aligned: bool = False
    preemptible: bool = False
    estimated_runtime_s: Seconds | None = Field(
        default=None, gt=0, le=1e9, validation_alias=_named("estimated_runtime", "estimated_runtime_s")
    )
    deadline_s: float | None = Field(default=None, ge=0, le=1e12, description="finish by, epoch seconds")
    min_tasks: int | None = Field(default=None, ge=1, le=4096)
    scaling: Literal["none", "linear"] = "none"
    elastic: ElasticIn | None = Field(default=None, description="resizable: its sizes and throughput curve")
    idempotency_key: Text | None = Field(default=None, min_length=1, max_length=256)
    time_limit_s: Seconds | None = Field(
        default=None,
        gt=0,
        le=1e9,
        validation_alias=_named("time_limit", "time_limit_s"),
        description="stopped this long after it starts (state timeout): 4h, 1h30m, 90s; a number is seconds",
    )
    signal_lead_s: Seconds | None = Field(
        default=None,
        ge=0,
        le=1e9,
        validation_alias=_named("signal_lead", "signal_lead_s"),
        description="its checkpoint signal comes this long before the time limit: 5m",
    )
    retry: RetryIn | None = None
    array: Text | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="one job per index (Slurm's --array: 0-199%16, 0-198:2, 1,3,5-7), each with GPUPOOL_ARRAY_INDEX",
    )
    after: list[DependencyIn] = Field(default_factory=list, max_length=64, description="every one must be met")
    image: Text | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description="run each rank's command in this container image with the node's runtime (docs/containers.md)",
    )
    mounts: list[MountIn] = Field(
        default_factory=list, max_length=MAX_MOUNTS, description="node paths bound into the container (image)"
    )
    workdir: Text | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="the container's working directory (default: the rank's own, bound in at its path)",
    )
    slurm_env: bool = Field(
        default=False, description="its ranks also get Slurm's SLURM_* variables (what gpupool sbatch submits)"
    )

    @field_validator("version")
    @classmethod
    def _known_version(cls, version: int) -> int:
        if version != SPEC_VERSION:
            raise ValueError(f"job spec version {version} is not supported (this gpupool reads version {SPEC_VERSION})")
        return version

    # What a node will run is checked here, at the door, with the rules the agent applies again before it
    # starts anything: a NUL, an '=' in a variable name or an over-long argument is a 422 naming the field
    # (the total size of both under ``env``, checked even when no env is given), never a command an agent
    # cannot execute.
    @field_validator("command")
    @classmethod
    def _runnable_argv(cls, argv: list[str]) -> list[str]:
        _check(lambda: command_size(argv))
        return argv

    @field_validator("env")
    @classmethod
    def _runnable_env(cls, env: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        argv = info.data.get("command")  # validated first (declared first); absent when it was refused
        _check(lambda: env_size(env) if argv is None else check_command(argv, env))
        return env

    # A container's parts each against the rules every runtime can take (named by the field, the flag in
    # the CLI); what needs two fields (mounts without an image, an env value a container cannot hold) after.
    @field_validator("image")
    @classmethod
    def _runnable_image(cls, image: str | None) -> str | None:
        if image is not None:
            _check(lambda: check_container(Container(image)))
        return image

    @field_validator("mounts")
    @classmethod
    def _runnable_mounts(cls, mounts: list[MountIn]) -> list[MountIn]:
        _check(lambda: check_container(Container("image", tuple(Mount(m.source, m.target) for m in mounts))))
        return mounts

    @field_validator("workdir")
    @classmethod
    def _runnable_workdir(cls, workdir: str | None) -> str | None:
        if workdir is not None:
            _check(lambda: check_container(Container("image", (), workdir)))
        return workdir

    @model_validator(mode="after")
    def _runnable_container(self) -> JobSubmit:
        if self.image is None:
            if self.mounts or self.workdir is not None:
                raise ValueError(f"{'mounts' if self.mounts else 'workdir'}: only for a container: give 'image'")
            return self
        _check(lambda: check_container_env(self.env))
        return self

    def container(self) -> Container | None:
        if self.image is None:
            return None
        mounts = tuple(Mount(m.source, m.target, m.read_only) for m in self.mounts)
        return Container(self.image, mounts, self.workdir or "")

    @field_validator("node_selector")
    @classmethod
    def _label_pairs(cls, selector: dict[str, str]) -> dict[str, str]:
        _check(lambda: check_labels(selector, "node_selector"))
        return selector


def _check(rule: Callable[[], object]) -> None:
    """A domain rule's InputError as the ValueError pydantic turns into a validation error, field named."""
    try:
        rule()
    except InputError as e:
        raise ValueError(str(e)) from None


class GpuOut(Out):
    index: int
    model: str
    memory_mib: int
    health: str


class HcaOut(Out):
    name: str
    guid: str
    rate_gbps: float


class NodeOut(Out):
    name: str
    state: Literal["up", "drained", "lost"]
    gpu_model: str
    gpu_count: int
    labels: dict[str, str]  # what node selectors match: the agent's labels, admins' values over them
    gpus: list[GpuOut]
    hcas: list[HcaOut]
    last_heartbeat_s: float | None
    heartbeat_age_s: float | None
    agent_url: str
    # Pydantic copies a mutable default per instance (RUF012 cannot see that ``Out`` is a pydantic model).
    agent_labels: dict[str, str] = {}  # noqa: RUF012 configured on the node (--label, a labels file) and derived
    admin_labels: dict[str, str] = {}  # noqa: RUF012 set with gpupool label / PATCH /v1/nodes/{name}/labels
    gpus_allocated: float = (
        0.0  # held by ranks (releasing ones too, until their process is gone); shares count a fraction
    )
    gpus_free: float = 0.0  # what a new job could get now: 0 unless up; GPUs graded bad do not count
    state_reason: str = ""  # why it is drained or lost (the reason of its last state change)


class LabelsIn(In):
    """Admin labels to set (``key: value``) and to remove (keys), in one audited change."""

    set: dict[Text, Text] = Field(default_factory=dict, max_length=256)
    remove: list[Text] = Field(default_factory=list, max_length=256)

    @field_validator("set")
    @classmethod
    def _label_pairs(cls, labels: dict[str, str]) -> dict[str, str]:
        _check(lambda: check_labels(labels, "set"))
        return labels

    @field_validator("remove")
    @classmethod
    def _label_keys(cls, keys: list[str]) -> list[str]:
        _check(lambda: check_labels(dict.fromkeys(keys, ""), "remove"))
        return keys


class LabelsOut(Out):
    node: str
    labels: dict[str, str]
    agent_labels: dict[str, str]
    admin_labels: dict[str, str]


class NodeList(Out):
    nodes: list[NodeOut]


class DrainIn(In):
    reason: Text = Field(default="drained by an operator", max_length=512)


class PoolIn(In):
    calendar_toml: Text = Field(default="", max_length=1_000_000)  # the pool calendar, TOML
    expected_version: int | None = Field(default=None, ge=0)


class PoolOut(Out):
    name: str
    calendar_toml: str
    version: int  # 0: not stored (a pool a calendar names, or its jobs use)
    # As of the leader's last cycle (``as_of_s``; all null/0 on a standby): GPUs on the hosts it owns now (null
    # without a calendar), held by its jobs, lent (its hosts, others' jobs) and borrowed (its jobs, others'
    # hosts); its calendar rule's share now, since when, and when any share next changes.
    gpus: int | None = None
    gpus_used: float = 0.0
    gpus_lent: float = 0.0
    gpus_borrowed: float = 0.0
    share: float | None = None
    share_since_s: float | None = None
    next_change_s: float | None = None
    as_of_s: float | None = None


class PoolList(Out):
    pools: list[PoolOut]


class TenantIn(In):
    name: Text = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    weight: float = Field(default=1.0, gt=0, le=1e6)


class TenantOut(Out):
    name: str
    weight: float


class TenantList(Out):
    tenants: list[TenantOut]


class QuotaIn(In):
    """A tenant's quota in a pool, in whole GPUs (fractional jobs count their share)."""

    pool: Text = Field(min_length=1, max_length=128)
    gpu_model: Text = Field(default="", max_length=128)
    nominal_gpus: int = Field(ge=0, le=10_000_000)
    borrowing_limit_gpus: int | None = Field(default=None, ge=0, le=10_000_000)
    lending_limit_gpus: int | None = Field(default=None, ge=0, le=10_000_000)
    cohort: Text = Field(default="", max_length=128)


class QuotaOut(Out):
    tenant: str
    pool: str
    gpu_model: str
    nominal_gpus: int
    borrowing_limit_gpus: int | None
    lending_limit_gpus: int | None
    cohort: str


class QuotaList(Out):
    quotas: list[QuotaOut]


class FabricOut(Out):
    version: int
    document: dict[str, object]


class ErrorOut(Out):
    code: str
    message: str
    reason: str | None = None  # STORE_UNAVAILABLE: unreachable, busy, read_only, disk_full, io_error, corrupt, replaced


class HealthOut(Out):
    ok: bool
    leader: bool
    store_writable: bool = True
    store_reason: str = ""  # why not: unreachable, busy, read_only, disk_full, io_error, corrupt, replaced
