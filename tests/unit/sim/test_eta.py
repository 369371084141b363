"""Expected starts against the simulator: with exact estimates and no later arrivals, the projection is the
simulator's own future (the same cycle, the same latencies); the error measure pairs projections with starts."""

from __future__ import annotations

import pytest

from gpupool.domain.jobs import JobSpec
from gpupool.scheduler.projection import ProjectionConfig
from gpupool.scheduler.settings import SchedulerSettings
from gpupool.sim.engine import Engine
from gpupool.sim.eta import EtaOptions, EtaSample, ProjectingEngine, errors
from gpupool.sim.fabrics import uniform_fabric
from gpupool.sim.world import SimJob, WorldConfig


def burst(n: int, at: float = 0.0) -> list[SimJob]:
    """``n`` one-host jobs of 1-8 GPUs arriving at once, each with its exact duration as its estimate."""
    out = []
    for i in range(n):
        gpus, dur = 1 + (i * 5) % 8, 30.0 + (i * 37) % 200
        out.append(
            SimJob(JobSpec(f"j{i:02d}", at, gpus_per_task=gpus, estimated_runtime_s=dur, tenant=f"t{i % 3}"), dur)
        )
    return out


@pytest.mark.parametrize("policy", ["fifo", "priority", "sjf", "fair"])
def test_with_exact_estimates_and_no_later_arrivals_the_projection_is_the_run(policy: str) -> None:
    """Every job arrives at 0: the projection made after the first cycle says when each waiting job starts, to
    the microsecond, for every policy (the same ``schedule()`` on the same state with the same ends)."""
    fab, jobs = uniform_fabric(32, 8), burst(40)
    settings = SchedulerSettings(policy=policy)
    exact = EtaOptions(learn=False, projection=ProjectionConfig(step_fraction=0.0))
    engine = ProjectingEngine(fab, jobs, settings, WorldConfig(), exact)
    result = engine.run()
    plain = Engine(fab, jobs, settings, WorldConfig()).run()
    assert [r.start_s for r in result.records] == [r.start_s for r in plain.records]  # projecting changed nothing
    start = {r.job_id: r.start_s for r in result.records}
    waiting = [s for s in engine.samples if start[s.job_id] is not None and start[s.job_id] > 1.0]
    assert len(waiting) >= 20  # most of the burst waits
    assert all(s.expected_s == pytest.approx(start[s.job_id], abs=1e-6) for s in engine.samples)
    stats = errors(engine.samples, result.records)
    assert stats["abs_err_s_p90"] == pytest.approx(0.0, abs=1e-6)
    assert stats["unknown"] == 0


def test_without_estimates_the_history_of_finished_runs_answers_once_there_is_one() -> None:
    """No job says how long it runs: the first projections are unknown, later ones use the finished runs."""
    fab = uniform_fabric(8, 8)
    jobs = [
        SimJob(JobSpec(f"j{i:02d}", float(i * 60), gpus_per_task=8, tenant="t", name="w"), 100.0) for i in range(12)
    ]
    engine = ProjectingEngine(fab, jobs, SchedulerSettings(policy="fifo"), WorldConfig(), EtaOptions())
    engine.run()
    said = [s.expected_s is not None for s in engine.samples]
    assert not said[0] and said[-1]
    no_learning = ProjectingEngine(fab, jobs, SchedulerSettings(policy="fifo"), WorldConfig(), EtaOptions(learn=False))
    no_learning.run()
    assert all(s.expected_s is None for s in no_learning.samples)


def test_the_projection_must_use_the_worlds_latencies() -> None:
    with pytest.raises(ValueError, match="latencies"):
        ProjectingEngine(
            uniform_fabric(8, 8),
            burst(2),
            None,
            WorldConfig(),
            EtaOptions(projection=ProjectionConfig(launch_latency_s=9.0)),
        )


def test_errors_are_relative_to_the_wait_from_the_projection() -> None:
    from gpupool.sim.world import JobRecord

    def rec(job_id: str, start: float | None) -> JobRecord:
        return JobRecord(job_id, "t", "training", 0.0, start, None, 1.0, 1.0, 1, 1, 0, 0.0, 1.0, None, None)  # type: ignore[arg-type]

    samples = [EtaSample("a", 0.0, 1100.0, 3), EtaSample("b", 0.0, None, 9), EtaSample("c", 0.0, 50.0, 1)]
    out = errors(samples, [rec("a", 1000.0), rec("b", 10.0), rec("c", None)])
    assert (out["compared"], out["unknown"], out["never_started"]) == (1, 1, 1)
    assert out["abs_err_s_median"] == 100.0
    assert out["rel_err_median"] == pytest.approx(0.1)
