"""Neutral, typed records that every trace loader produces: jobs, nodes, the trace, and rows it skipped.

Every loader maps its format's columns onto these, so the simulator never sees a format's quirks. Times are
seconds on the trace's own clock, shifted so that the first submission is at 0 s (``Trace.origin_s`` keeps
where that zero lies on the original clock).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from gpupool.domain.elastic import Elastic
from gpupool.domain.errors import JobSpecError

MILLI_PER_GPU = 1000
# More GPUs (or tasks) than any cluster the simulator can build (fabric.generators: 32,768 hosts of at most 64
# GPUs): a row that asks for more is a broken row (1e20 parsed as a count), not a job that waits forever.
MAX_JOB_GPUS = 32_768 * 64
JOB_KINDS = frozenset({"training", "inference", "batch"})


class DeadlineKind(StrEnum):
    NONE = "none"
    STRICT = "strict"  # worthless after the deadline (ElasticFlow, Chronus "strict")
    SOFT = "soft"  # worth less after the deadline (Chronus "soft": step utility)
    BEST_EFFORT = "best_effort"  # declared as having no deadline worth meeting (Chronus "best")


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job (or pod, or inference instance) as a trace records it.

    ``duration_s`` is the runtime at the best placement, i.e. what the trace measured. ``gpus`` counts whole
    GPUs over all tasks; a fractional task (openb ``gpu_milli`` < 1000) counts as one GPU with ``gpu_milli``
    its share. ``gpus_per_task`` left at -1 is derived as ``gpus // tasks``. ``deadline_s`` is absolute, on
    the same clock as ``submit_s``.
    """

    job_id: str
    submit_s: float
    duration_s: float
    gpus: int
    tasks: int = 1
    gpus_per_task: int = -1
    gpu_milli: int = MILLI_PER_GPU
    gpu_memory_mib: int | None = None
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_model: str | None = None  # openb may list alternatives separated by '|', as the trace does
    tenant: str = "default"
    kind: str = "training"
    deadline_s: float | None = None
    deadline_kind: DeadlineKind = DeadlineKind.NONE
    status: str | None = None
    model_name: str | None = None  # the DL model the trace names (ElasticFlow, Chronus, Tiresias), for runtime models
    elastic: Elastic | None = None  # resizable by its model's throughput curve (ElasticFlow's traces)

    def __post_init__(self) -> None:
        if self.gpus_per_task == -1 and self.tasks >= 1:
            # Frozen dataclass: deriving a default from other fields needs the object's own setattr.
            object.__setattr__(self, "gpus_per_task", self.gpus // self.tasks)
        problem = self._problem()
        if problem:
            raise JobSpecError(f"job {self.job_id!r}: {problem}")

    def shifted(self, by_s: float) -> TraceJob:
        """The same job with its times moved ``by_s`` earlier (spelt out: ``dataclasses.replace`` is 3x slower)."""
        return TraceJob(
            self.job_id,
            self.submit_s - by_s,
            self.duration_s,
            self.gpus,
            self.tasks,
            self.gpus_per_task,
            self.gpu_milli,
            self.gpu_memory_mib,
            self.cpu_milli,
            self.memory_mib,
            self.gpu_model,
            self.tenant,
            self.kind,
            None if self.deadline_s is None else self.deadline_s - by_s,
            self.deadline_kind,
            self.status,
            self.model_name,
            self.elastic,
        )

    def _problem(self) -> str:
        if not self.job_id:
            return "empty job id"
        if not math.isfinite(self.submit_s):
            return f"submit time {self.submit_s} is not finite"
        if not (math.isfinite(self.duration_s) and self.duration_s >= 0):
            return f"duration {self.duration_s} s is negative or not finite"
        if self.gpus < 0:
            return f"negative GPU count {self.gpus}"
        if self.gpus > MAX_JOB_GPUS or self.tasks > MAX_JOB_GPUS:
            return (
                f"{self.gpus:g} GPUs in {self.tasks:g} tasks is more than any cluster holds (at most {MAX_JOB_GPUS:,})"
            )
        if self.tasks < 1:
            return f"{self.tasks} tasks (needs at least 1)"
        if self.gpus != self.gpus_per_task * self.tasks:
            return f"{self.gpus} GPUs is not {self.tasks} tasks x {self.gpus_per_task} GPUs"
        if not 0 <= self.gpu_milli <= MILLI_PER_GPU:
            return f"GPU share {self.gpu_milli} milli is outside 0..1000"
        if 0 < self.gpu_milli < MILLI_PER_GPU and self.gpus_per_task != 1:
            return f"a fractional GPU share ({self.gpu_milli} milli) needs exactly 1 GPU per task, not {self.gpus_per_task}"
        if self.cpu_milli < 0 or self.memory_mib < 0 or (self.gpu_memory_mib or 0) < 0:
            return "negative CPU or memory request"
        if self.kind not in JOB_KINDS:
            return f"kind {self.kind!r} is not one of {sorted(JOB_KINDS)}"
        if self.deadline_s is not None and not (math.isfinite(self.deadline_s) and self.deadline_s >= self.submit_s):
            return f"deadline {self.deadline_s} is before submission {self.submit_s} or not finite"
        if self.deadline_kind in (DeadlineKind.STRICT, DeadlineKind.SOFT) and self.deadline_s is None:
            return f"a {self.deadline_kind} deadline needs a deadline time"
        return ""


@dataclass(frozen=True, slots=True)
class TraceNode:
    """One machine of a trace that describes its cluster (openb node lists)."""

    name: str
    gpus: int
    gpu_model: str | None
    cpu_milli: int
    memory_mib: int

    def __post_init__(self) -> None:
        if not self.name:
            raise JobSpecError("node with an empty name")
        if self.gpus < 0 or self.cpu_milli < 0 or self.memory_mib < 0:
            raise JobSpecError(f"node {self.name!r}: negative GPU, CPU or memory capacity")


@dataclass(frozen=True, slots=True)
class BadRow:
    """A row skipped under ``skip_bad_rows``: where it was and why, so a report can count and show them."""

    source: str
    line: int
    reason: str


@dataclass(frozen=True, slots=True)
class Trace:
    """A loaded trace: jobs sorted by submission (file order among ties), first submission at 0 s."""

    name: str
    format: str
    jobs: tuple[TraceJob, ...]
    nodes: tuple[TraceNode, ...] = ()
    bad_rows: tuple[BadRow, ...] = ()
    origin_s: float = 0.0  # the original clock's reading at the new 0 s (Unix seconds for absolute traces)
