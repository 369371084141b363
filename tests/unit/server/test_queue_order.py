"""The queue as the server shows it (``server.queueorder``): the configured policy's own order of the jobs the
last cycle left waiting, not "priority then submit"; none on a standby."""

from __future__ import annotations

from gpupool.cluster import ClusterState
from gpupool.domain.jobs import JobSpec, PriorityClass
from gpupool.fabric.generators import leaf_spine
from gpupool.scheduler import SchedulerConfig, ScheduleRequest, schedule
from gpupool.scheduler.driver import CycleRun
from gpupool.server.queueorder import QueueOrder, policy_order

FABRIC = leaf_spine(1, 1, 1, gpus_per_host=8)  # one host of 8 GPUs


def job(job_id: str, gpus: int, runtime_s: float, *, t: float = 0.0, high: bool = False) -> JobSpec:
    prio = PriorityClass.HIGH if high else PriorityClass.NORMAL
    return JobSpec(job_id, gpus_per_task=gpus, estimated_runtime_s=runtime_s, submit_time_s=t, priority=prio)


def cycle(policy: str, jobs: list[JobSpec]) -> CycleRun:
    state = ClusterState(FABRIC)
    request = ScheduleRequest(state.snapshot(), tuple(jobs), 10.0, SchedulerConfig(policy=policy))
    result = schedule(request)
    return CycleRun(request, result, len(result.placements), 0)


JOBS = [
    job("holds", 8, 1.0, t=0.0),  # placed: the host is full after it
    job("long-high", 8, 1_000.0, t=1.0, high=True),
    job("short", 8, 10.0, t=2.0),
    job("medium", 8, 100.0, t=3.0),
]


def test_sjf_shows_the_shortest_first_whatever_the_priorities() -> None:
    run = cycle("sjf", JOBS)
    assert [a.job_id for a in run.result.placements] == ["holds"]
    assert [j.job_id for j in policy_order(run)] == ["short", "medium", "long-high"]


def test_priority_and_fifo_show_their_own_orders() -> None:
    by_priority = cycle("priority", JOBS)
    assert [a.job_id for a in by_priority.result.placements] == ["long-high"]
    assert [j.job_id for j in policy_order(by_priority)] == ["holds", "short", "medium"]
    assert [j.job_id for j in policy_order(cycle("fifo", JOBS))] == ["long-high", "short", "medium"]


def test_positions_are_computed_once_per_cycle_and_none_without_one() -> None:
    runs: list[CycleRun | None] = [None]
    order = QueueOrder(lambda: runs[-1], "sjf")
    assert order.current().as_of_s is None and dict(order.current().positions) == {}
    runs.append(cycle("sjf", JOBS))
    first = order.current()
    assert dict(first.positions) == {"short": 1, "medium": 2, "long-high": 3} and first.as_of_s == 10.0
    assert order.current() is first  # the same cycle: not computed again
    runs.append(cycle("sjf", JOBS[2:]))
    assert dict(order.current().positions) == {"medium": 1}
