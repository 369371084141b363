"""Elastic job specs (``domain/elastic.py``): the sizes a job may run at, and one clear error per bad range."""

from __future__ import annotations

import pytest

from gpupool.domain.elastic import Elastic, ThroughputCurve
from gpupool.domain.errors import JobSpecError
from gpupool.domain.jobs import GpuShare, JobSpec
from gpupool.domain.model_curves import MODEL_CURVES, elasticflow_max_gpus

CURVE = ThroughputCurve(((1, 10.0), (2, 18.0), (4, 30.0), (8, 40.0), (16, 38.0)))


def job(**kw: object) -> JobSpec:
    args: dict[str, object] = {"tasks": 2, "elastic": Elastic(1, 16, CURVE), "estimated_runtime_s": 100.0}
    args.update(kw)
    return JobSpec("j", **args)  # type: ignore[arg-type]


def test_sizes_are_the_curve_points_in_range_on_the_step_and_whole_ranks() -> None:
    assert Elastic(1, 16, CURVE).sizes() == (1, 2, 4, 8, 16)
    assert Elastic(2, 8, CURVE).sizes() == (2, 4, 8)
    assert Elastic(1, 16, CURVE, step=3).sizes() == (1, 4, 16)  # 1, 4, 7, 10, 13, 16 that the curve has
    assert Elastic(1, 16, CURVE).sizes(gpus_per_task=4) == (4, 8, 16)


def test_a_valid_elastic_job_is_accepted_with_its_asked_size_on_the_curve() -> None:
    spec = job(deadline_s=500.0)
    assert spec.elastic is not None and spec.total_gpus == 2


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"elastic": Elastic(4, 2, CURVE)}, "1 <= min <= max, got 4..2"),
        ({"elastic": Elastic(0, 2, CURVE)}, "1 <= min <= max, got 0..2"),
        ({"elastic": Elastic(1, 16, CURVE, step=0)}, "step must be >= 1"),
        ({"elastic": Elastic(3, 3, CURVE)}, "no size in 3..3"),
        ({"tasks": 3}, "the asked size (3 GPUs"),
        ({"deadline_s": 50.0, "estimated_runtime_s": None}, "needs estimated_runtime_s"),
        ({"tasks": 1, "share": GpuShare(500)}, "whole-GPU tasks"),
    ],
)
def test_a_bad_elastic_section_is_refused_with_one_clear_error(kw: dict[str, object], message: str) -> None:
    with pytest.raises(JobSpecError) as err:
        job(**kw)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("points", "message"),
    [((), "at least one point"), (((2, 1.0), (1, 2.0)), "must rise"), (((1, 0.0),), "must be a number > 0")],
)
def test_a_bad_curve_is_refused(points: tuple[tuple[int, float], ...], message: str) -> None:
    with pytest.raises(JobSpecError) as err:
        ThroughputCurve(points)
    assert message in str(err.value)


def test_the_named_curves_reproduce_the_elasticflow_traces_durations() -> None:
    """The trace's first cluster01 job: resnet50, batch 256, 64 GPUs, 45,775 iterations, 2,429 s."""
    assert 45775 / MODEL_CURVES["resnet50@256"].rate(64) == pytest.approx(2429, abs=1)
    assert len(MODEL_CURVES) == 14
    assert elasticflow_max_gpus("bert", 64) == 8 and elasticflow_max_gpus("resnet50", 256) == 64
    assert elasticflow_max_gpus("deepspeech2", 32) == 32
