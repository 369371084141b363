"""A seeded synthetic trace: diurnal inference services, Poisson training arrivals and deadline batch jobs.

Deterministic for a seed: every draw comes from a NumPy ``Generator`` built from it (one independent stream per
workload class, so changing the training rate leaves the inference services as they were). ``load_synthetic``
reads the same parameters from a JSON file, so ``--format synthetic`` works like any other trace format.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from gpupool.domain.errors import InputError, ParseError
from gpupool.sim.traces.records import DeadlineKind, Trace, TraceJob

DAY_S = 86_400.0
POWERS_OF_TWO = (1, 2, 4, 8, 16, 32, 64)
# Share of training jobs per GPU count 1..64. Philly is ~93% single-GPU; this mix keeps more multi-host jobs
# (about 13% at 8 GPUs or more) so that placement across leaves matters in the experiments.
TRAINING_GPU_WEIGHTS = (0.55, 0.10, 0.10, 0.12, 0.07, 0.04, 0.02)
BATCH_GPU_WEIGHTS = (0.4, 0.3, 0.2, 0.1)  # 1, 2, 4, 8 GPUs
MIN_DURATION_S = 60.0
MAX_DURATION_S = 14 * DAY_S


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise InputError(message, source="synthetic")


def diurnal_fraction(t_s: np.ndarray, *, peak_hour: float, trough_fraction: float) -> np.ndarray:
    """Share of the peak inference demand at times ``t_s``: a cosine day, 1 at ``peak_hour``, ``trough_fraction`` 12 h later."""
    phase = 2.0 * np.pi * (t_s - peak_hour * 3600.0) / DAY_S
    return trough_fraction + (1.0 - trough_fraction) * 0.5 * (1.0 + np.cos(phase))


def _inference_jobs(
    rng: np.random.Generator,
    horizon_s: float,
    peak_gpus: int,
    gpus_per_service: int,
    step_s: float,
    peak_hour: float,
    trough_fraction: float,
) -> list[TraceJob]:
    """Services that start and stop, every ``step_s``, so the number alive follows the diurnal curve."""
    steps = np.arange(0.0, horizon_s, step_s)
    targets = np.rint(
        diurnal_fraction(steps, peak_hour=peak_hour, trough_fraction=trough_fraction) * peak_gpus / gpus_per_service
    ).astype(int)
    starts: list[float] = []
    ends: dict[int, float] = {}
    alive: list[int] = []
    for t, target in zip(steps.tolist(), targets.tolist(), strict=True):
        change = target - len(alive)
        # Arrivals and departures spread over the step so that no two events share a timestamp by construction;
        # at t = 0 the services of the first step already run.
        offsets = np.zeros(abs(change)) if t == 0.0 else rng.uniform(0.0, step_s, abs(change))
        if change > 0:
            for off in offsets.tolist():
                alive.append(len(starts))
                starts.append(t + off)
        elif change < 0:
            leaving = rng.choice(len(alive), size=-change, replace=False)
            for idx, off in zip(sorted(leaving.tolist(), reverse=True), offsets.tolist(), strict=True):
                ends[alive.pop(idx)] = t + off
    return [
        TraceJob(
            job_id=f"inf-{i:06d}",
            submit_s=start,
            duration_s=ends.get(i, horizon_s) - start,
            gpus=gpus_per_service,
            tenant="inference",
            kind="inference",
        )
        for i, start in enumerate(starts)
    ]


def _durations(rng: np.random.Generator, n: int, median_s: float, sigma: float) -> np.ndarray:
    """Log-normal (heavy-tailed) durations, clipped to a minute .. two weeks."""
    return np.clip(rng.lognormal(math.log(median_s), sigma, n), MIN_DURATION_S, MAX_DURATION_S)


def _arrivals(rng: np.random.Generator, per_day: float, horizon_s: float) -> np.ndarray:
    """A homogeneous Poisson process: a Poisson count of uniform times, sorted."""
    return np.sort(rng.uniform(0.0, horizon_s, rng.poisson(per_day * horizon_s / DAY_S)))


def _gpu_counts(rng: np.random.Generator, n: int, weights: tuple[float, ...], max_gpus: int) -> np.ndarray:
    sizes = [g for g in POWERS_OF_TWO[: len(weights)] if g <= max_gpus]
    w = np.asarray(weights[: len(sizes)], dtype=float)
    return rng.choice(np.asarray(sizes), size=n, p=w / w.sum())


def synthetic_trace(
    seed: int,
    days: float,
    *,
    inference_peak_gpus: int,
    training_jobs_per_day: float,
    batch_jobs_per_day: float,
    inference_gpus_per_service: int = 1,
    inference_step_s: float = 600.0,
    inference_peak_hour: float = 15.0,
    inference_trough_fraction: float = 0.35,
    training_median_s: float = 1_200.0,
    training_sigma: float = 2.2,
    training_max_gpus: int = 64,
    batch_median_s: float = 1_800.0,
    batch_sigma: float = 1.0,
    batch_max_gpus: int = 8,
    batch_slack: tuple[float, float] = (1.2, 3.0),
    name: str = "synthetic",
) -> Trace:
    """A trace of ``days`` days.

    Inference: services of ``inference_gpus_per_service`` GPUs whose total follows a cosine day between
    ``inference_trough_fraction`` x and 1 x ``inference_peak_gpus``, peaking at ``inference_peak_hour`` (15:00,
    afternoon); re-targeted every ``inference_step_s``; those alive at the end leave at the horizon.
    Training: Poisson arrivals, log-normal durations (median ``training_median_s``, sigma ``training_sigma``: the
    default gives a mean/median near Philly's 11x), power-of-two GPU counts 1..``training_max_gpus``.
    Batch: Poisson arrivals, log-normal durations, 1..``batch_max_gpus`` GPUs, a STRICT deadline at
    submit + slack x duration with slack uniform in ``batch_slack``.
    """
    _check(days > 0, f"days must be positive, not {days}")
    _check(inference_peak_gpus >= 0, "inference_peak_gpus must be 0 or more")
    _check(inference_gpus_per_service >= 1, "inference_gpus_per_service must be 1 or more")
    _check(inference_step_s > 0, "inference_step_s must be positive")
    _check(0.0 <= inference_trough_fraction <= 1.0, "inference_trough_fraction must lie in 0..1")
    _check(training_jobs_per_day >= 0 and batch_jobs_per_day >= 0, "job rates must be 0 or more")
    _check(training_median_s > 0 and batch_median_s > 0, "median durations must be positive")
    _check(training_sigma >= 0 and batch_sigma >= 0, "duration sigmas must be 0 or more")
    _check(training_max_gpus >= 1 and batch_max_gpus >= 1, "max GPU counts must be 1 or more")
    lo, hi = batch_slack
    _check(1.0 <= lo <= hi, f"batch_slack must be (low, high) with 1 <= low <= high, not {batch_slack}")
    horizon = days * DAY_S
    inference_rng, training_rng, batch_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))

    jobs = _inference_jobs(
        inference_rng,
        horizon,
        inference_peak_gpus,
        inference_gpus_per_service,
        inference_step_s,
        inference_peak_hour,
        inference_trough_fraction,
    )
    t = _arrivals(training_rng, training_jobs_per_day, horizon)
    d = _durations(training_rng, len(t), training_median_s, training_sigma)
    g = _gpu_counts(training_rng, len(t), TRAINING_GPU_WEIGHTS, training_max_gpus)
    jobs += [
        TraceJob(job_id=f"train-{i:06d}", submit_s=s, duration_s=dur, gpus=n, tenant="training")
        for i, (s, dur, n) in enumerate(zip(t.tolist(), d.tolist(), g.tolist(), strict=True))
    ]
    t = _arrivals(batch_rng, batch_jobs_per_day, horizon)
    d = _durations(batch_rng, len(t), batch_median_s, batch_sigma)
    g = _gpu_counts(batch_rng, len(t), BATCH_GPU_WEIGHTS, batch_max_gpus)
    slack = batch_rng.uniform(lo, hi, len(t))
    jobs += [
        TraceJob(
            job_id=f"batch-{i:06d}",
            submit_s=s,
            duration_s=dur,
            gpus=n,
            tenant="batch",
            kind="batch",
            deadline_s=s + k * dur,
            deadline_kind=DeadlineKind.STRICT,
        )
        for i, (s, dur, n, k) in enumerate(zip(t.tolist(), d.tolist(), g.tolist(), slack.tolist(), strict=True))
    ]
    # Ties (all services at 0 s) keep the order inference, training, batch, then id: stable and seed-independent.
    jobs.sort(key=lambda j: j.submit_s)
    return Trace(name=name, format="synthetic", jobs=tuple(jobs))


_REQUIRED = ("seed", "days", "inference_peak_gpus", "training_jobs_per_day", "batch_jobs_per_day")


def load_synthetic(path: str | Path, *, skip_bad_rows: bool = False, limit: int | None = None) -> Trace:
    """Generate the trace that a JSON file of ``synthetic_trace`` parameters describes (``skip_bad_rows`` has
    nothing to skip; ``limit`` keeps the first jobs by submission)."""
    p = Path(path)
    try:
        params: Any = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ParseError(f"not JSON: {e.msg}", source=str(p), line=e.lineno) from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read synthetic trace parameters: {e}", source=str(p)) from None
    if not isinstance(params, dict):
        raise ParseError("expected a JSON object of synthetic_trace parameters", source=str(p), line=1)
    missing = [k for k in _REQUIRED if k not in params]
    if missing:
        raise ParseError(f"missing parameter(s) {', '.join(missing)}", source=str(p))
    if "batch_slack" in params and isinstance(params["batch_slack"], list):
        params["batch_slack"] = tuple(params["batch_slack"])
    params.setdefault("name", p.stem)
    seed, days = params.pop("seed"), params.pop("days")
    try:
        trace = synthetic_trace(seed, days, **params)
    except TypeError as e:
        raise ParseError(f"bad parameters: {e}", source=str(p)) from None
    except InputError as e:
        raise ParseError(e.reason, source=str(p)) from None
    if limit is not None:
        trace = Trace(name=trace.name, format=trace.format, jobs=trace.jobs[:limit])
    return trace
