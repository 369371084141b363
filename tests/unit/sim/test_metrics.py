"""Metrics from hand-made records: JCT statistics, utilisation, deadlines, SLOs, digest stability."""

from __future__ import annotations

import pytest

from gpupool.sim.engine import SimResult
from gpupool.sim.metrics import compute_metrics, metrics_digest, utilisation
from gpupool.sim.traces.records import DeadlineKind
from gpupool.sim.world import JobRecord

REQUIRED = ("jobs", "finished", "avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_queue_s", "makespan_s", "gpu_utilization",
            "deadline_jobs", "deadline_met_ratio", "preemptions", "lb_avg_jct_s", "lb_makespan_s", "wall_s")  # fmt: skip


def rec(
    i: str, submit: float, start: float | None, end: float | None, dur: float, gpus: float = 1.0, **kw: object
) -> JobRecord:
    base: dict[str, object] = dict(
        job_id=i, tenant="t", kind="training", submit_s=submit, start_s=start, end_s=end, duration_s=dur, gpus=gpus,
        hosts=1, leaves=1, preemptions=0, lost_gpu_s=0.0, slowdown_factor=1.0, deadline_s=None,
        deadline_kind=DeadlineKind.NONE,
    )  # fmt: skip
    base.update(kw)
    return JobRecord(**base)  # type: ignore[arg-type]


def result(records: tuple[JobRecord, ...], usage: tuple[tuple[float, float], ...], gpus: int = 2) -> SimResult:
    return SimResult(records, gpus, usage, (), 1, 1, 0, 0.5, False)


def test_utilisation_integrates_the_step_function() -> None:
    assert utilisation(((0.0, 2.0), (50.0, 0.0)), 2, 0.0, 100.0) == pytest.approx(0.5)
    assert utilisation(((0.0, 1.0),), 2, 0.0, 10.0) == pytest.approx(0.5)


def test_metrics_from_records() -> None:
    rs = (
        rec("a", 0.0, 0.0, 100.0, 100.0),
        rec("b", 0.0, 100.0, 200.0, 100.0, deadline_s=150.0, deadline_kind=DeadlineKind.STRICT),
        rec("c", 10.0, 20.0, 40.0, 20.0, deadline_s=50.0, deadline_kind=DeadlineKind.STRICT),
        rec("d", 0.0, 30.0, 31.0, 1.0, kind="inference"),
        rec("e", 0.0, None, None, 5.0, preemptions=2),
    )
    m = compute_metrics(result(rs, ((0.0, 1.0), (200.0, 0.0))), inference_slo_wait_s=60.0)
    assert set(REQUIRED) <= set(m)
    assert (m["jobs"], m["finished"]) == (5, 4)
    assert m["avg_jct_s"] == pytest.approx((100 + 200 + 30 + 31) / 4)
    assert m["avg_queue_s"] == pytest.approx((0 + 100 + 10 + 30) / 4)
    assert m["makespan_s"] == 200.0
    assert m["gpu_utilization"] == pytest.approx(0.5)
    assert (m["deadline_jobs"], m["deadline_met_ratio"]) == (2, 0.5)
    assert m["deadline_met_ratio_by_class"] == {"strict": 0.5}
    assert m["inference_slo_attainment"] == 1.0
    assert m["preemptions"] == 2


def test_digest_ignores_wall_time_only() -> None:
    m = {"avg_jct_s": 1.0, "wall_s": 3.0}
    assert metrics_digest(m) == metrics_digest({"avg_jct_s": 1.0, "wall_s": 9.0})
    assert metrics_digest(m) != metrics_digest({"avg_jct_s": 1.5, "wall_s": 3.0})
