"""Elastic deadline jobs on ElasticFlow's ITP traces: the deadline satisfactory ratio with gpupool's defaults.

    python benchmarks/sim_elastic.py                                   # cluster01, 512 GPUs, default world
    python benchmarks/sim_elastic.py --world elasticflow               # ElasticFlow's own start/restart costs
    python benchmarks/sim_elastic.py --trace .../elasticflow/cluster05.csv --limit 500  # a development run

The same run as ``gpupool sim run --trace T --format elasticflow --gpus N`` (default settings: the loader
makes every job elastic by its model's curve, the scheduler plans ElasticFlow's minimum satisfactory share).
One JSON line: the ratio met, ElasticFlow's artifact's ratio on cluster01 (84.76%, from issue 20) and two
bounds from the trace alone: the share of jobs whose deadline their trace size meets (rigid, no queueing:
what gpupool reached before elastic jobs) and the share their curve's fastest size meets from submission
plus the launch (no contention, no resize: no scheduler can beat it); the refusals, resizes and restart GPU-hours;
wall and CPU seconds and the 1-min load average.

``--world elasticflow``: a first start costs 21 s and a restart 68 s (ElasticFlow's simulator on a cluster
of >= 256 GPUs, ``utils.estimate_overhead``: 7 s, +47 s for a restart, +2 s per doubling of GPUs, its most at
64 GPUs), in place of gpupool's measured 0.4 s launch and 60 s restart.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from gpupool.scheduler.settings import SchedulerSettings
from gpupool.sim.engine import Engine
from gpupool.sim.fabrics import uniform_fabric
from gpupool.sim.metrics import compute_metrics
from gpupool.sim.runner import sim_jobs
from gpupool.sim.traces import load_trace
from gpupool.sim.traces.records import Trace
from gpupool.sim.world import WorldConfig

CLUSTER01 = Path("/work/shared/traces/microsoft-itp-elasticflow/elasticflow/cluster01.csv")
ARTIFACT_CLUSTER01 = 0.8476  # ElasticFlow's artifact on cluster01, 512 GPUs (issue 20)
WORLDS = {
    "default": WorldConfig(),
    "elasticflow": WorldConfig(launch_latency_s=21.0, restart_overhead_s=68.0),
}


def bounds(trace: Trace, start_s: float) -> tuple[float, float]:
    """(rigid, fastest): shares of deadlines met at the trace's size with no wait, and at the curve's fastest
    size from submission plus the launch latency."""
    rigid = fastest = 0
    for j in trace.jobs:
        window = (j.deadline_s or 0.0) - j.submit_s
        rigid += j.duration_s <= window
        el = j.elastic
        if el is None:
            fastest += j.duration_s <= window
            continue
        best = max(el.curve.rate(g) for g in el.sizes())
        fastest += j.duration_s * el.curve.rate(j.gpus) / best + start_s <= window
    n = max(1, len(trace.jobs))
    return rigid / n, fastest / n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=CLUSTER01)
    ap.add_argument("--gpus", type=int, default=512)
    ap.add_argument("--limit", type=int, default=None, help="only the first N jobs (development runs)")
    ap.add_argument("--world", choices=sorted(WORLDS), default="default")
    args = ap.parse_args(argv)
    trace = load_trace(args.trace, "elasticflow", limit=args.limit)
    fabric = uniform_fabric(args.gpus, 8)
    world = WORLDS[args.world]
    jobs, _ = sim_jobs(trace, fabric)
    t0, c0 = time.perf_counter(), time.process_time()
    result = Engine(fabric, jobs, SchedulerSettings(), world).run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    m = compute_metrics(result, inference_slo_wait_s=world.inference_slo_wait_s)
    rigid, fastest = bounds(trace, world.launch_latency_s)
    refused = sum(1 for r in result.records if r.start_s is None)
    row = {
        "trace": args.trace.name,
        "jobs": m["jobs"],
        "gpus": args.gpus,
        "world": args.world,
        "deadline_met_ratio": m["deadline_met_ratio"],
        "artifact_cluster01": ARTIFACT_CLUSTER01,
        "bound_rigid_no_wait": round(rigid, 4),
        "bound_fastest_alone": round(fastest, 4),
        "refused": refused,
        "resizes": m["preemptions"],
        "restart_gpu_hours": m["gpu_hours_lost_to_preemption"],
        "gpu_utilization": m["gpu_utilization"],
        "cycles": result.cycles,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "load_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
