"""Metrics of a run: JCT, queueing, slowdown, makespan, utilisation, deadlines, SLOs, preemptions, tenants,
next to the lower bounds of the same trace. ``metrics.json`` is ``compute_metrics``'s dict."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from typing import Any

import numpy as np

from gpupool.sim.bounds import lower_bounds
from gpupool.sim.engine import SimResult
from gpupool.sim.traces.records import DeadlineKind
from gpupool.sim.world import JobRecord

WALL_KEYS = frozenset({"wall_s", "cycles_per_s"})  # vary between machines: kept out of the digest


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def utilisation(usage: tuple[tuple[float, float], ...], total_gpus: int, start: float, end: float) -> float:
    """Time-averaged share of GPUs held between ``start`` and ``end`` (usage is a step function)."""
    if end <= start or total_gpus == 0:
        return 0.0
    t = np.array([u[0] for u in usage] + [end], dtype=np.float64)
    v = np.array([u[1] for u in usage], dtype=np.float64)
    t = np.clip(t, start, end)
    return float(np.sum(v * np.diff(t)) / (total_gpus * (end - start)))


def deadline_met(r: JobRecord) -> bool:
    return r.end_s is not None and r.deadline_s is not None and r.end_s <= r.deadline_s


def compute_metrics(result: SimResult, *, inference_slo_wait_s: float = 60.0) -> dict[str, Any]:
    recs = result.records
    done = [r for r in recs if r.end_s is not None]
    jct = np.array([r.end_s - r.submit_s for r in done if r.end_s is not None], dtype=np.float64)
    started = [r for r in recs if r.start_s is not None]
    queue = np.array([r.start_s - r.submit_s for r in started if r.start_s is not None], dtype=np.float64)
    slow = np.array([(r.end_s - r.submit_s) / r.duration_s for r in done if r.end_s is not None and r.duration_s > 0])
    first = min((r.submit_s for r in recs), default=0.0)
    last = max((r.end_s for r in done if r.end_s is not None), default=first)
    with_deadline = [r for r in recs if r.deadline_s is not None and r.deadline_kind is not DeadlineKind.BEST_EFFORT]
    by_class: dict[str, list[bool]] = defaultdict(list)
    for r in with_deadline:
        by_class[r.deadline_kind.value].append(deadline_met(r))
    inference = [r for r in recs if r.kind == "inference"]
    slo_ok = [
        r.start_s is not None and r.start_s - r.submit_s <= inference_slo_wait_s and r.preemptions == 0
        for r in inference
    ]
    tenants: dict[str, float] = defaultdict(float)
    for r in done:
        tenants[r.tenant] += r.gpus * r.duration_s / 3600.0
    multi = [r for r in recs if r.hosts > 1]
    b = lower_bounds(
        [r.submit_s for r in recs], [r.duration_s for r in recs], [r.gpus for r in recs], result.total_gpus
    )

    def pct(a: np.ndarray, q: float) -> float | None:
        return float(np.percentile(a, q)) if a.size else None

    return {
        "jobs": len(recs),
        "finished": len(done),
        "avg_jct_s": _r(float(jct.mean()) if jct.size else None),
        "p50_jct_s": _r(pct(jct, 50)),
        "p99_jct_s": _r(pct(jct, 99)),
        "avg_queue_s": _r(float(queue.mean()) if queue.size else None),
        "p99_queue_s": _r(pct(queue, 99)),
        "avg_slowdown": _r(float(slow.mean()) if slow.size else None, 4),
        "makespan_s": _r(last - first),
        "gpu_utilization": _r(utilisation(result.usage, result.total_gpus, first, last), 4),
        "deadline_jobs": len(with_deadline),
        "deadline_met_ratio": _r(
            sum(map(deadline_met, with_deadline)) / len(with_deadline) if with_deadline else None, 4
        ),
        "deadline_met_ratio_by_class": {k: _r(sum(v) / len(v), 4) for k, v in sorted(by_class.items())},
        "inference_jobs": len(inference),
        "inference_slo_attainment": _r(sum(slo_ok) / len(slo_ok) if slo_ok else None, 5),
        "preemptions": sum(r.preemptions for r in recs),
        "preempted_jobs": sum(1 for r in recs if r.preemptions),
        "gpu_hours_lost_to_preemption": _r(sum(r.lost_gpu_s for r in recs) / 3600.0),
        "multi_host_jobs": len(multi),
        "multi_host_jobs_in_one_leaf": sum(1 for r in multi if r.leaves == 1),
        "avg_runtime_factor": _r(float(np.mean([r.slowdown_factor for r in started])) if started else None, 4),
        "tenant_gpu_hours": {k: _r(v) for k, v in sorted(tenants.items())},
        "total_gpus": result.total_gpus,
        "lb_avg_jct_s": _r(b.avg_jct_s),
        "lb_mean_isolated_s": _r(b.mean_isolated_s),
        "lb_srpt_avg_jct_s": _r(b.srpt_avg_jct_s),
        "lb_makespan_s": _r(b.makespan_s),
        "avg_jct_over_lb": _r(float(jct.mean()) / b.avg_jct_s if jct.size and b.avg_jct_s > 0 else None, 4),
        "unfinished_stuck": result.stopped_early,
        "cycles": result.cycles,
        "events": result.events,
        "failures": result.failures,
        "wall_s": _r(result.wall_s),
    }


def metrics_digest(metrics: dict[str, Any]) -> str:
    """SHA-256 of the metrics without the wall-clock ones: equal for equal runs on any machine."""
    kept = {k: v for k, v in metrics.items() if k not in WALL_KEYS}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()
