"""Small builders for scheduler tests: fabrics, jobs, states and one-call scheduling."""

from __future__ import annotations

from collections.abc import Iterable

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobPlaced, JobSubmitted
from gpupool.domain.jobs import GpuShare, JobSpec, Scope, TopologyMode, TopologyRequirement
from gpupool.fabric.fabric import Fabric
from gpupool.fabric.generators import leaf_spine
from gpupool.scheduler import SchedulerConfig, ScheduleRequest, ScheduleResult, schedule


def make_fabric(leaves: int = 2, hosts_per_leaf: int = 4, gpus: int = 8) -> Fabric:
    return leaf_spine(leaves, 2, hosts_per_leaf, gpus_per_host=gpus)


def make_job(
    job_id: str,
    tasks: int = 1,
    gpus: int = 1,
    *,
    t: float = 0.0,
    share: tuple[int, int] | None = None,
    scope: Scope = Scope.ANY,
    required: bool = False,
    **kw: object,
) -> JobSpec:
    return JobSpec(
        job_id,
        t,
        tasks=tasks,
        gpus_per_task=gpus,
        share=GpuShare(*share) if share else None,
        topology=TopologyRequirement(scope, TopologyMode.REQUIRED if required else TopologyMode.PREFERRED),
        **kw,  # type: ignore[arg-type]
    )


def run(state: ClusterState, jobs: Iterable[JobSpec], now: float = 0.0, **cfg: object) -> ScheduleResult:
    snap = state.snapshot()
    return schedule(ScheduleRequest(snap, tuple(jobs), now, SchedulerConfig(**cfg)))  # type: ignore[arg-type]


def submit_and_place(state: ClusterState, result: ScheduleResult, jobs: Iterable[JobSpec], now: float = 0.0) -> None:
    by_id = {j.job_id: j for j in jobs}
    for a in result.placements:
        if state.job_state(a.job_id) is None:
            state.apply(JobSubmitted(by_id[a.job_id], now))
        state.apply(JobPlaced(a, now))
