"""Queue policies: who goes next. One interface, one registry; ties always end in (priority, submit, id).

Every key ends with ``(-priority, submit_time_s, job_id)``, so the order is total and does not depend on
the order jobs arrive in the request.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from gpupool.cluster.snapshot import ClusterSnapshot
from gpupool.domain.errors import UnknownNameError
from gpupool.domain.jobs import JobSpec
from gpupool.scheduler.types import SchedulerConfig

SortKey = tuple[float | int | str, ...]


def _tie(job: JobSpec) -> tuple[int, float, str]:
    return (-int(job.priority), job.submit_time_s, job.job_id)


class QueuePolicy(Protocol):
    @property
    def name(self) -> str: ...

    def key(self, job: JobSpec, now_s: float, snapshot: ClusterSnapshot, config: SchedulerConfig) -> SortKey: ...


@dataclass(frozen=True, slots=True)
class Fifo:
    name: str = "fifo"

    def key(self, job: JobSpec, now_s: float, snapshot: ClusterSnapshot, config: SchedulerConfig) -> SortKey:
        return (job.submit_time_s, job.job_id)


@dataclass(frozen=True, slots=True)
class Priority:
    """Priority classes, highest first, then first come first served."""

    name: str = "priority"

    def key(self, job: JobSpec, now_s: float, snapshot: ClusterSnapshot, config: SchedulerConfig) -> SortKey:
        return _tie(job)


@dataclass(frozen=True, slots=True)
class ShortestJobFirst:
    """Shortest estimated GPU-time first (runtime x GPUs); jobs without an estimate go last."""

    name: str = "sjf"

    def key(self, job: JobSpec, now_s: float, snapshot: ClusterSnapshot, config: SchedulerConfig) -> SortKey:
        est = job.estimated_runtime_s
        return (math.inf if est is None else est * job.gpu_milli, *_tie(job))


@dataclass(frozen=True, slots=True)
class LeastAttainedService:
    """Tiresias' discretised LAS: the queue is the number of GPU-second thresholds the job's attained
    service has passed; lower queues first, FIFO inside a queue. Needs no runtime estimates."""

    name: str = "las"

    def key(self, job: JobSpec, now_s: float, snapshot: ClusterSnapshot, config: SchedulerConfig) -> SortKey:
        attained = snapshot.attained_gpu_s.get(job.job_id, 0.0)
        queue = sum(1 for t in config.las_thresholds_gpu_s if attained >= t)
        return (queue, job.submit_time_s, -int(job.priority), job.job_id)


@dataclass(frozen=True, slots=True)
class EarliestDeadlineFirst:
    """Least slack first: deadline - now - estimated runtime (the runtime counts as 0 when unknown).
    Jobs without a deadline follow, by priority."""

    name: str = "edf"

    def key(self, job: JobSpec, now_s: float, snapshot: ClusterSnapshot, config: SchedulerConfig) -> SortKey:
        if job.deadline_s is None:
            return (1, math.inf, *_tie(job))
        slack = job.deadline_s - now_s - (job.estimated_runtime_s or 0.0)
        return (0, slack, *_tie(job))


POLICIES: Mapping[str, QueuePolicy] = MappingProxyType(
    {p.name: p for p in (Fifo(), Priority(), ShortestJobFirst(), LeastAttainedService(), EarliestDeadlineFirst())}
)


def get_policy(name: str) -> QueuePolicy:
    """The one place a policy is chosen by its name."""
    try:
        return POLICIES[name]
    except KeyError:
        raise UnknownNameError(f"unknown queue policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None


def order(
    policy: QueuePolicy, pending: Sequence[JobSpec], now_s: float, snapshot: ClusterSnapshot, config: SchedulerConfig
) -> list[JobSpec]:
    return sorted(pending, key=lambda j: policy.key(j, now_s, snapshot, config))
