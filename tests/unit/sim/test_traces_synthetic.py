"""The seeded synthetic trace: determinism, the diurnal inference curve, training and batch mixes."""

import json
from pathlib import Path

import numpy as np
import pytest

from gpupool.domain.errors import InputError, ParseError
from gpupool.sim.traces import DeadlineKind, Trace, TraceJob, load_trace, synthetic_trace
from gpupool.sim.traces.synthetic import DAY_S

PARAMS = {"inference_peak_gpus": 200, "training_jobs_per_day": 300.0, "batch_jobs_per_day": 100.0}


def make(seed: int = 7, days: float = 4.0, batch_slack: tuple[float, float] = (1.2, 3.0)) -> Trace:
    return synthetic_trace(
        seed,
        days,
        inference_peak_gpus=200,
        training_jobs_per_day=300.0,
        batch_jobs_per_day=100.0,
        batch_slack=batch_slack,
    )


def by_kind(trace: Trace, kind: str) -> list[TraceJob]:
    return [j for j in trace.jobs if j.kind == kind]


def test_same_seed_same_trace_other_seed_other_trace() -> None:
    assert make(7) == make(7)
    assert make(7) != make(8)


def test_inference_follows_the_day_and_peaks_in_the_afternoon() -> None:
    inference = by_kind(make(), "inference")

    def alive_gpus(t: float) -> int:
        return sum(j.gpus for j in inference if j.submit_s <= t < j.submit_s + j.duration_s)

    day = 2 * DAY_S
    afternoon, night = alive_gpus(day + 15 * 3600), alive_gpus(day + 3 * 3600)
    assert afternoon == pytest.approx(200, abs=3)
    assert night == pytest.approx(0.35 * 200, abs=3)
    assert all(j.tenant == "inference" and j.gpus == 1 for j in inference)


def test_training_is_poisson_heavy_tailed_and_power_of_two() -> None:
    training = by_kind(make(days=10), "training")
    assert len(training) == pytest.approx(3000, rel=0.1)
    gpus = {j.gpus for j in training}
    assert gpus <= {1, 2, 4, 8, 16, 32, 64} and {1, 64} <= gpus
    durations = np.array([j.duration_s for j in training])
    assert durations.mean() > 4 * np.median(durations)  # heavy tail: mean far above median
    assert all(j.deadline_kind is DeadlineKind.NONE for j in training)


def test_batch_deadlines_are_submit_plus_slack_times_duration() -> None:
    batch = by_kind(make(), "batch")
    assert batch and all(j.deadline_kind is DeadlineKind.STRICT for j in batch)
    slack = [((j.deadline_s or 0.0) - j.submit_s) / j.duration_s for j in batch]
    assert min(slack) >= 1.2 and max(slack) <= 3.0
    assert {j.gpus for j in batch} <= {1, 2, 4, 8}


def test_jobs_are_sorted_and_inside_the_horizon() -> None:
    trace = make()
    submits = [j.submit_s for j in trace.jobs]
    assert submits == sorted(submits) and submits[0] == 0.0 and submits[-1] < 4 * DAY_S
    assert len({j.job_id for j in trace.jobs}) == len(trace.jobs)


def test_changing_training_rate_leaves_inference_unchanged() -> None:
    other = synthetic_trace(7, 4.0, inference_peak_gpus=200, training_jobs_per_day=10.0, batch_jobs_per_day=100.0)
    assert by_kind(other, "inference") == by_kind(make(), "inference")


def test_bad_parameters_are_input_errors() -> None:
    with pytest.raises(InputError, match="days"):
        make(days=0.0)
    with pytest.raises(InputError, match="batch_slack"):
        make(batch_slack=(0.5, 2.0))


def test_synthetic_format_reads_parameters_from_json(tmp_path: Path) -> None:
    path = tmp_path / "month.json"
    path.write_text(json.dumps({"seed": 7, "days": 4.0, **PARAMS}), encoding="utf-8")
    trace = load_trace(path, "synthetic")
    assert trace.jobs == make().jobs and trace.name == "month"
    assert len(load_trace(path, "synthetic", limit=5).jobs) == 5
    path.write_text('{"seed": 7,\n "days": }', encoding="utf-8")
    with pytest.raises(ParseError) as err:
        load_trace(path, "synthetic")
    assert err.value.line == 2
    path.write_text(json.dumps({"seed": 7, "days": 1, "colour": "red", **PARAMS}), encoding="utf-8")
    with pytest.raises(ParseError, match="colour"):
        load_trace(path, "synthetic")
