"""Lower bounds: hand-checked SRPT and makespan cases, and never above what a simulated schedule achieves."""

from __future__ import annotations

import numpy as np
import pytest

from gpupool.scheduler.settings import SchedulerSettings
from gpupool.sim.bounds import lower_bounds, makespan_bound, srpt_mean_jct
from gpupool.sim.fabrics import uniform_fabric
from gpupool.sim.runner import simulate
from gpupool.sim.traces.records import Trace, TraceJob
from gpupool.sim.world import WorldConfig


def test_srpt_serves_the_shortest_first_and_preempts_for_a_shorter_arrival() -> None:
    assert srpt_mean_jct([0.0, 0.0], [1.0, 2.0], 1.0) == pytest.approx((1 + 3) / 2)
    # job 0 (work 10) starts; job 1 (work 1) arrives at 2 and preempts: ends at 3; job 0 ends at 11
    assert srpt_mean_jct([0.0, 2.0], [10.0, 1.0], 1.0) == pytest.approx((11 + 1) / 2)
    # an idle gap: the second job starts at its release
    assert srpt_mean_jct([0.0, 100.0], [4.0, 4.0], 2.0) == pytest.approx(2.0)


def test_makespan_bound_counts_late_work_and_long_jobs() -> None:
    # 10 GPU-s released at 5 on 1 GPU: cannot end before 15; a 30 s job released at 0 cannot end before 30
    assert makespan_bound([0.0, 5.0], [1.0, 10.0], [1.0, 10.0], 1.0) == pytest.approx(15.0)
    assert makespan_bound([0.0, 5.0], [30.0, 1.0], [30.0, 1.0], 4.0) == pytest.approx(30.0)


def test_lower_bound_takes_the_larger_of_isolated_and_srpt() -> None:
    b = lower_bounds([0.0, 0.0], [100.0, 100.0], [8.0, 8.0], 64)
    assert b.mean_isolated_s == 100.0
    assert b.srpt_avg_jct_s < 100.0
    assert b.avg_jct_s == 100.0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bounds_never_exceed_a_simulated_schedule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    jobs = tuple(
        TraceJob(
            f"j{i}", float(rng.integers(0, 20_000)), float(rng.integers(60, 8000)), int(rng.choice([1, 2, 4, 8, 16]))
        )
        for i in range(80)
    )
    out = simulate(Trace("t", "test", jobs), uniform_fabric(32, 8), SchedulerSettings(policy="fifo", placer="topology"),
                   world=WorldConfig(launch_latency_s=0.0, exit_latency_s=0.0))  # fmt: skip
    m = out.metrics
    assert m["finished"] == 80
    assert m["lb_avg_jct_s"] <= m["avg_jct_s"] + 1e-6
    assert m["lb_makespan_s"] <= m["makespan_s"] + 1e-6
