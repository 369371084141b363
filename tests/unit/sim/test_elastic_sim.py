"""Elastic jobs in the simulated world: a job progresses by its curve at the size it was given, a resize
keeps the work done at its checkpoint and pays the restart, and the deadline metric counts what finished in
time."""

from __future__ import annotations

import pytest

from gpupool.domain.elastic import Elastic, ThroughputCurve
from gpupool.domain.jobs import JobSpec
from gpupool.scheduler.settings import SchedulerSettings
from gpupool.sim.engine import Engine
from gpupool.sim.fabrics import uniform_fabric
from gpupool.sim.metrics import compute_metrics
from gpupool.sim.traces.records import DeadlineKind
from gpupool.sim.world import EXIT_LATENCY_S, LAUNCH_LATENCY_S, SimJob, WorldConfig

CURVE = ThroughputCurve(((1, 10.0), (2, 18.0), (4, 30.0), (8, 40.0)))


def ejob(key: str, submit: float, est: float, deadline: float | None) -> SimJob:
    spec = JobSpec(key, submit, estimated_runtime_s=est, deadline_s=deadline, elastic=Elastic(1, 8, CURVE))
    return SimJob(spec, est, deadline_kind=DeadlineKind.STRICT if deadline is not None else DeadlineKind.NONE)


def test_a_lone_elastic_job_runs_at_its_curves_fastest_size() -> None:
    """400 s of 1-GPU work on 8 GPUs at 40/10 the speed: 100 s."""
    res = Engine(uniform_fabric(8, 8), [ejob("a", 0.0, 400.0, 1000.0)], SchedulerSettings()).run()
    (a,) = res.records
    assert a.end_s == pytest.approx(LAUNCH_LATENCY_S + 100.0 + EXIT_LATENCY_S)
    assert max(u for _, u in res.usage) == 8


def test_a_shrink_for_a_tight_newcomer_keeps_the_work_and_pays_the_restart() -> None:
    """ "a" runs alone on 8 GPUs; at t=20 "b" needs 4 GPUs to make t=60. "a" is resized to 4 at a
    checkpoint (nothing lost), restarts after the 60 s overhead and finishes its remaining work at 30/s.
    Both meet their deadlines; the GPUs in use never pass 8."""
    world = WorldConfig(launch_latency_s=0.0, exit_latency_s=0.0, restart_overhead_s=60.0)
    jobs = [ejob("a", 0.0, 400.0, 1000.0), ejob("b", 20.0, 100.0, 60.0)]
    res = Engine(uniform_fabric(8, 8), jobs, SchedulerSettings(), world).run()
    r = {x.job_id: x for x in res.records}
    assert r["b"].end_s == pytest.approx(20.0 + 100.0 * 10 / 30)  # 4 GPUs, a first start: no restart
    assert r["a"].preemptions >= 1
    # 20 s at 40/s = 800 of its 4,000 units; 3,200 left. It restarts on 4 GPUs at t=20 (+60 s); when "b"
    # ends (t=53) the plan may grow it again (another restart), so only bounds are certain.
    assert 20.0 + 60.0 + 3200 / 40 <= r["a"].end_s <= 20.0 + 60.0 + 3200 / 30
    assert max(u for _, u in res.usage) <= 8
    assert compute_metrics(res)["deadline_met_ratio"] == 1.0


def test_an_infeasible_deadline_is_refused_at_once_and_counted_as_missed() -> None:
    """100 s of work at best 4x faster (8 GPUs) cannot finish within 20 s: ended, never run."""
    res = Engine(uniform_fabric(8, 8), [ejob("late", 0.0, 100.0, 20.0)], SchedulerSettings()).run()
    (r,) = res.records
    assert r.start_s is None and r.end_s is None
    assert compute_metrics(res)["deadline_met_ratio"] == 0.0


def test_an_elastic_run_is_deterministic_and_never_holds_more_gpus_than_the_cluster() -> None:
    """Thirty jobs in bursts on 16 GPUs, deadlines loose and tight: the same records twice, usage within the
    cluster at every change, and every job either met its deadline, was refused unstarted, or (ended while
    running) never finished."""
    jobs = [
        ejob(f"j{i:02d}", float(50 * (i // 5)), 30.0 + 17.0 * (i % 7), 50 * (i // 5) + (25.0 + 40.0 * (i % 4)))
        for i in range(30)
    ]
    runs = [Engine(uniform_fabric(16, 8), jobs, SchedulerSettings()).run() for _ in range(2)]
    assert runs[0].records == runs[1].records
    assert all(0 <= u <= 16 for _, u in runs[0].usage)
    for r in runs[0].records:
        assert r.end_s is None or r.deadline_s is None or r.end_s <= r.deadline_s
