"""The simulated world's settings and its job bookkeeping: what the engine needs beyond the cluster state.

Defaults (every one is listed in report.md and metrics.json: ``world_settings``): the launch latency (placed
-> process started) and the exit latency (the workload's exit -> its GPUs free) are what the real server
does (``LAUNCH_LATENCY_S``, ``EXIT_LATENCY_S``); preemption costs a restart overhead of 60 s (process start,
NCCL init, checkpoint load) plus the work done since the last checkpoint, taken every 1,800 s of running;
failures are off unless a rate is given (rates per unit-hour); a failed part is repaired after 4 h;
telemetry is off unless an interval is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass

from gpupool.domain.jobs import MILLI_PER_GPU, JobSpec
from gpupool.scheduler.deadlines import RESTART_S

# What the real server and agents take, measured (the numbers and how: ``scheduler.projection``, whose expected
# starts charge them too); re-exported for the simulator's options and benchmarks.
from gpupool.scheduler.projection import EXIT_LATENCY_S as EXIT_LATENCY_S
from gpupool.scheduler.projection import LAUNCH_LATENCY_S as LAUNCH_LATENCY_S
from gpupool.sim.runtime import RuntimeModel
from gpupool.sim.traces.records import DeadlineKind, TraceJob


@dataclass(frozen=True, slots=True)
class FailureRates:
    gpu_xid_per_gpu_hour: float = 0.0
    link_down_per_leaf_hour: float = 0.0
    host_loss_per_host_hour: float = 0.0
    repair_s: float = 4 * 3600.0

    @property
    def any(self) -> bool:
        return self.gpu_xid_per_gpu_hour > 0 or self.link_down_per_leaf_hour > 0 or self.host_loss_per_host_hour > 0


@dataclass(frozen=True, slots=True)
class WorldConfig:
    launch_latency_s: float = LAUNCH_LATENCY_S
    exit_latency_s: float = EXIT_LATENCY_S  # a finished job holds its GPUs this long after its work is done
    restart_overhead_s: float = RESTART_S  # what the scheduler's deadline tests assume a restart costs
    checkpoint_interval_s: float = 1800.0  # <= 0: every moment is checkpointed (no work lost)
    failures: FailureRates = FailureRates()
    telemetry_interval_s: float = 0.0  # > 0: GPU temperatures and leaf congestion counters at this period
    min_cycle_interval_s: float = 0.0  # > 0: at most one scheduling cycle per this many simulated seconds
    runtime: RuntimeModel = field(default_factory=RuntimeModel)
    inference_slo_wait_s: float = 60.0  # an inference service meets its SLO if it starts within this of arrival


def world_settings(world: WorldConfig) -> dict[str, object]:
    """Every setting of the simulated world, flat (``failures.repair_s``, ``runtime.comm_share.training``)."""
    out: dict[str, object] = {}
    for f in fields(world):
        value = getattr(world, f.name)
        if not is_dataclass(value):
            out[f.name] = value
            continue
        for g in fields(value):
            inner = getattr(value, g.name)
            if isinstance(inner, Mapping):
                out.update((f"{f.name}.{g.name}.{k}", v) for k, v in sorted(inner.items()))
            else:
                out[f"{f.name}.{g.name}"] = inner
    return out


def elastic_slowdown(spec: JobSpec, gpus: int) -> float:
    """How many times longer than at its asked size an elastic job's work takes on ``gpus`` GPUs, by its
    throughput curve (1 for a job that is not elastic)."""
    el = spec.elastic
    if el is None or not el.curve.has(gpus):
        return 1.0
    return el.curve.rate(spec.total_gpus) / el.curve.rate(gpus)


@dataclass(frozen=True, slots=True)
class SimJob:
    """A job to simulate: what the scheduler sees (``spec``) and what only the world knows (its runtime)."""

    spec: JobSpec
    duration_s: float
    kind: str = "training"
    deadline_kind: DeadlineKind = DeadlineKind.NONE

    @staticmethod
    def of(spec: JobSpec, trace_job: TraceJob) -> SimJob:
        return SimJob(spec, trace_job.duration_s, trace_job.kind, trace_job.deadline_kind)

    @property
    def gpus(self) -> float:
        """GPUs held, fractions counted as their share."""
        return self.spec.gpu_milli / MILLI_PER_GPU


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job's outcome (one row of jobs.csv). ``start_s``/``end_s`` are None when it never started/ended."""

    job_id: str
    tenant: str
    kind: str
    submit_s: float
    start_s: float | None
    end_s: float | None
    duration_s: float
    gpus: float
    hosts: int
    leaves: int
    preemptions: int
    lost_gpu_s: float
    slowdown_factor: float
    deadline_s: float | None
    deadline_kind: DeadlineKind

    @property
    def jct_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.submit_s

    @property
    def queue_s(self) -> float | None:
        return None if self.start_s is None else self.start_s - self.submit_s


class Tracker:
    """Mutable per-job bookkeeping while a run lasts (engine-private; frozen into ``JobRecord`` at the end)."""

    __slots__ = (
        "end",
        "epoch",
        "factor",
        "first_start",
        "held",
        "hosts",
        "job",
        "leaves",
        "lost_gpu_s",
        "preemptions",
        "remaining_s",
        "run_start",
        "saved_at",
        "served_s",
        "signalled_for",
    )

    def __init__(self, job: SimJob) -> None:
        self.job = job
        self.remaining_s = job.duration_s
        self.epoch = 0
        self.factor = 1.0
        self.held = job.gpus  # GPUs the current run holds (an elastic job's size changes between runs)
        self.first_start: float | None = None
        self.run_start: float | None = None  # when the current run's tasks started (after launch)
        self.saved_at: float | None = None  # a checkpoint a signal asked for during the current run
        self.signalled_for: float | None = None  # the preemption time of the last signal it checkpointed for
        self.end: float | None = None
        self.hosts: list[int] = []
        self.leaves = 0
        self.preemptions = 0
        self.lost_gpu_s = 0.0
        self.served_s = 0.0  # seconds run over all runs, lost work included (how the state counts service)

    def record(self) -> JobRecord:
        j = self.job
        return JobRecord(
            job_id=j.spec.job_id,
            tenant=j.spec.tenant,
            kind=j.kind,
            submit_s=j.spec.submit_time_s,
            start_s=self.first_start,
            end_s=self.end,
            duration_s=j.duration_s,
            gpus=j.gpus,
            hosts=len(set(self.hosts)),
            leaves=self.leaves,
            preemptions=self.preemptions,
            lost_gpu_s=self.lost_gpu_s,
            slowdown_factor=self.factor,
            deadline_s=j.spec.deadline_s,
            deadline_kind=j.deadline_kind,
        )
