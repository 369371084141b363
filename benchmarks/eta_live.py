"""Expected-start error through the real server: each job's ``expected_start_s`` read right after it is
queued, against when its workload's first instruction ran.

    python benchmarks/eta_live.py [--jobs 60] [--arrive-s 120] [--seed 13] [--policies fifo,priority]

The trace of ``sim_fidelity.py`` (1-16 GPU jobs of 20-120 s, each with its duration as its estimate, arriving
over ``--arrive-s``) is submitted to a real ``gpupool server`` with 8 emulated agents (8 x 8 GPUs, two leaves;
``live_cluster.py``), with ``eta_refresh_s`` 0.25 s. After each submit the job is read (``GET /v1/jobs/ID``)
until it says an expected start or leaves the queue (placed at once: not counted); its actual start is the
earliest rank's printed start. What the projection cannot know and this measures: later arrivals, the
server's real launch and exit latencies and cycle timing, against the modelled ones. Per policy: median and
p90 of |expected - actual| (seconds, and relative to the actual wait from the read, a wait under 10 s counting
as 10 s), how many reads said unknown, the reads' latency. One JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from gpupool.fabric.generators import leaf_spine
from gpupool.sim.eta import error_stats
from gpupool.sim.traces.records import Trace
from gpupool.sim.traces.specs import task_split
from live_cluster import LiveCluster
from sim_fidelity import make_trace

MIN_WAIT_S = 10.0


def read_expected(cluster: LiveCluster, job_id: str, timeout_s: float) -> tuple[float, float | None, bool]:
    """(when read, expected start, still pending): polled until it says a time or leaves the queue."""
    deadline = time.monotonic() + timeout_s
    while True:
        job = cluster.job(job_id)
        at = time.time()
        if job["state"] != "pending" or job["expected_start_s"] is not None or time.monotonic() > deadline:
            return at, job["expected_start_s"], job["state"] == "pending"
        time.sleep(0.05)


def live(trace: Trace, policy: str) -> dict[str, Any]:
    tmp = tempfile.mkdtemp(prefix="eta-live-")
    env = {"GPUPOOL_SCHEDULER__POLICY": policy, "GPUPOOL_ETA_REFRESH_S": "0.25"}
    cluster = LiveCluster(Path(tmp), leaf_spine(2, 1, 4), env)
    try:
        cluster.start_agents()
        reads: dict[str, tuple[float, float | None, bool]] = {}
        read_s: list[float] = []
        t0 = time.time() + 1.0
        for tj in trace.jobs:
            time.sleep(max(0.0, t0 + tj.submit_s - time.time()))
            tasks, per = task_split(tj.gpus, 8)
            job_id = cluster.submit(tj.duration_s, tasks, per, name=tj.job_id, estimated_runtime_s=tj.duration_s)
            before = time.time()
            reads[job_id] = read_expected(cluster, job_id, 10.0)
            read_s.append(reads[job_id][0] - before)
        cluster.wait_finished(list(reads), 1800)
        waited = {j: r for j, r in reads.items() if r[2]}
        starts = {j: min(cluster.started_files(j).values()) for j in waited}
        out = error_stats([(at, exp, starts[j]) for j, (at, exp, _) in waited.items()], MIN_WAIT_S)
        out.update(
            placed_at_once=len(reads) - len(waited),
            read_s_median=round(float(np.median(read_s)), 3),
            read_s_max=round(max(read_s), 3),
            **cluster.cpu(),
            wall_s=round(time.time() - t0, 1),
        )
        return out
    finally:
        cluster.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=60)
    ap.add_argument("--arrive-s", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--policies", default="fifo,priority")
    args = ap.parse_args()
    trace = make_trace(args.jobs, args.arrive_s, args.seed)
    load0, c0 = os.getloadavg()[0], time.process_time()
    out: dict[str, Any] = {"benchmark": "eta_live", "jobs": args.jobs, "gpus": 64, "seed": args.seed}
    for policy in args.policies.split(","):
        out[policy] = live(trace, policy)
    out["bench_cpu_s"] = round(time.process_time() - c0, 2)
    out["loadavg_1m"] = round((load0 + os.getloadavg()[0]) / 2, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
