"""Simulator speed: N jobs on a G-GPU cluster, one core; prints one JSON line with wall_s and the metrics.

    python benchmarks/sim_speed.py --jobs 100000 --gpus 1000 --load 0.8

Jobs arrive as a Poisson stream (seeded); 1, 2, 4 or 8 GPUs (60/15/15/10%); lognormal durations with a
median of 30 minutes; the arrival rate is set so that offered load is ``--load`` of the cluster.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import time

import numpy as np

from gpupool.scheduler.settings import SchedulerSettings
from gpupool.sim.fabrics import uniform_fabric
from gpupool.sim.runner import simulate
from gpupool.sim.traces.records import Trace, TraceJob


def make_trace(n: int, gpus: int, load: float, seed: int) -> Trace:
    rng = np.random.default_rng(seed)
    sizes = rng.choice([1, 2, 4, 8], size=n, p=[0.6, 0.15, 0.15, 0.1])
    dur = np.clip(rng.lognormal(np.log(1800.0), 1.0, size=n), 60.0, 7 * 86400.0)
    mean_work = float(np.mean(sizes * dur))
    gap = mean_work / (load * gpus)
    submit = np.cumsum(rng.exponential(gap, size=n))
    submit -= submit[0]
    jobs = tuple(TraceJob(f"j{i:06d}", float(submit[i]), float(dur[i]), int(sizes[i])) for i in range(n))
    return Trace("speed", "synthetic", jobs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--placement", default="topology")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args(argv)
    trace = make_trace(args.jobs, args.gpus, args.load, args.seed)
    fabric = uniform_fabric(args.gpus, 8)
    prof = cProfile.Profile() if args.profile else None
    if prof:
        prof.enable()
    cpu0 = time.process_time()
    out = simulate(
        trace, fabric, SchedulerSettings(policy=args.policy, placer=args.placement, seed=args.seed), seed=args.seed
    )
    cpu_s = round(time.process_time() - cpu0, 3)  # what one core spent: wall_s also counts waiting for a core
    if prof:
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    keys = ("jobs", "finished", "avg_jct_s", "lb_avg_jct_s", "gpu_utilization", "cycles", "events", "wall_s")
    print(
        json.dumps({"gpus": fabric.gpu_count, "load": args.load, **{k: out.metrics[k] for k in keys}, "cpu_s": cpu_s})
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
