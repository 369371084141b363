"""Does ``gpupool sim`` with its default options predict the real server? One trace, both worlds, two policies.

A seeded trace of ``--jobs`` jobs (1, 2, 4, 8 GPUs and 2x8 gangs; durations 20-120 s; arrivals packed into
the first ``--arrive-s`` seconds, so the queue holds work for a few minutes) runs

- live: a real ``gpupool server`` (default settings but its policy) and 8 ``gpupool agent --emulate``
  processes (8 hosts x 8 GPUs, two leaves; ``live_cluster.py``); each job sleeps its duration; submitted at
  its arrival time, with its duration as the estimate (``estimated_runtime_s``: sjf needs one);
- simulated: ``gpupool.sim.runner.simulate`` on the same fabric and trace, default world and settings but
  the policy (``know_durations``: the same estimates).

Per job: queueing delay = its workload's first instruction (live: the earliest rank's printed start; sim:
``start_s``) - its submission; JCT = stored finished (sim: ``end_s``) - submission. Prints one JSON line:
per policy, average JCT both ways and its relative error (target within 3%), Kendall's tau-b of the start
order (target >= 0.98), average queueing delay both ways, and the live run's wall time.
Usage: PYTHONPATH=src python benchmarks/sim_fidelity.py [--jobs 60] [--arrive-s 120] [--seed 13] [--policies fifo,sjf]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gpupool.fabric.fabric import Fabric
from gpupool.fabric.generators import leaf_spine
from gpupool.scheduler.settings import SchedulerSettings
from gpupool.sim.runner import simulate
from gpupool.sim.traces.records import Trace, TraceJob
from gpupool.sim.traces.specs import task_split
from gpupool.sim.world import EXIT_LATENCY_S, LAUNCH_LATENCY_S
from live_cluster import LiveCluster

SIZES = (1, 2, 4, 8, 16)
WEIGHTS = (0.25, 0.25, 0.2, 0.2, 0.1)


def make_trace(n: int, arrive_s: float, seed: int, durations: tuple[float, float] = (20.0, 120.0)) -> Trace:
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.uniform(0.0, arrive_s, n))
    jobs = tuple(
        TraceJob(f"t{i:03d}", round(float(a), 3), round(float(rng.uniform(*durations)), 1),
                 int(rng.choice(SIZES, p=WEIGHTS)))
        for i, a in enumerate(arrivals)
    )  # fmt: skip
    return Trace("fidelity", "synthetic", jobs)


def kendall_tau_b(x: list[float], y: list[float]) -> float:
    """Kendall's tau-b (ties in either order count as neither concordant nor discordant)."""
    conc = disc = tie_x = tie_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
            tie_x += dx == 0
            tie_y += dy == 0
            conc += dx * dy > 0
            disc += dx * dy < 0
    pairs = len(x) * (len(x) - 1) // 2
    return float((conc - disc) / math.sqrt((pairs - tie_x) * (pairs - tie_y)))


def live_run(trace: Trace, fabric: Fabric, policy: str) -> tuple[dict[str, tuple[float, float, float]], float]:
    """Job id -> (submitted, started, finished) wall times on a live cluster, and the run's wall seconds."""
    tmp = tempfile.mkdtemp(prefix="sim-fidelity-")
    cluster = LiveCluster(Path(tmp), fabric, {"GPUPOOL_SCHEDULER__POLICY": policy})
    try:
        cluster.start_agents()
        ids: dict[str, str] = {}
        t0 = time.time() + 1.0
        for tj in trace.jobs:
            time.sleep(max(0.0, t0 + tj.submit_s - time.time()))
            tasks, per = task_split(tj.gpus, 8)
            ids[tj.job_id] = cluster.submit(
                tj.duration_s, tasks, per, name=tj.job_id, estimated_runtime_s=tj.duration_s
            )
        cluster.wait_finished(list(ids.values()), 1800)
        wall = time.time() - t0
        out = {}
        for name, j in ids.items():
            started = min(cluster.started_files(j).values())
            out[name] = (cluster.event_time(j, "job.submitted"), started, cluster.event_time(j, "job.finished"))
        return out, wall
    finally:
        cluster.close()
        shutil.rmtree(tmp, ignore_errors=True)


def compare(trace: Trace, fabric: Fabric, policy: str) -> dict[str, object]:
    live, wall = live_run(trace, fabric, policy)
    sim = simulate(trace, fabric, SchedulerSettings(policy=policy), know_durations=True)
    recs = {r.job_id: r for r in sim.result.records}
    names = [tj.job_id for tj in trace.jobs]
    real_jct = [live[n][2] - live[n][0] for n in names]
    real_queue = [live[n][1] - live[n][0] for n in names]
    sim_jct = [recs[n].end_s - recs[n].submit_s for n in names]  # type: ignore[operator]
    sim_queue = [recs[n].start_s - recs[n].submit_s for n in names]  # type: ignore[operator]
    real_avg, sim_avg = float(np.mean(real_jct)), float(np.mean(sim_jct))
    return {
        "real_avg_jct_s": round(real_avg, 2),
        "sim_avg_jct_s": round(sim_avg, 2),
        "jct_rel_err": round((sim_avg - real_avg) / real_avg, 4),
        "kendall_tau_start": round(kendall_tau_b([live[n][1] for n in names], [recs[n].start_s for n in names]), 4),  # type: ignore[misc]
        "real_avg_queue_s": round(float(np.mean(real_queue)), 2),
        "sim_avg_queue_s": round(float(np.mean(sim_queue)), 2),
        "per_job_jct_mae_s": round(float(np.mean(np.abs(np.array(sim_jct) - np.array(real_jct)))), 2),
        "sim_slowed_jobs": sum(1 for r in recs.values() if r.slowdown_factor != 1.0),
        "real_wall_s": round(wall, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=60)
    ap.add_argument("--arrive-s", type=float, default=120.0, help="arrivals spread over this many seconds")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--policies", default="fifo,sjf")
    ap.add_argument("--durations", default="20,120", help="job durations drawn uniformly from LO,HI seconds")
    args = ap.parse_args()
    lo, hi = (float(x) for x in args.durations.split(","))
    trace = make_trace(args.jobs, args.arrive_s, args.seed, (lo, hi))
    fabric = leaf_spine(2, 1, 4)  # 8 hosts x 8 GPUs under two leaves
    load0 = os.getloadavg()[0]
    out: dict[str, object] = {"benchmark": "sim_fidelity", "jobs": args.jobs, "hosts": len(fabric.hosts),
                              "gpus": fabric.gpu_count, "seed": args.seed,
                              "sim_launch_latency_s": LAUNCH_LATENCY_S, "sim_exit_latency_s": EXIT_LATENCY_S}  # fmt: skip
    for policy in args.policies.split(","):
        out[policy] = compare(trace, fabric, policy)
        print(f"{policy}: {json.dumps(out[policy])}", file=sys.stderr, flush=True)
    out["loadavg_1m"] = round((load0 + os.getloadavg()[0]) / 2, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
