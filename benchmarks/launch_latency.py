"""Placed -> process started, on a live cluster: a real ``gpupool server`` (default settings) and 16 real
``gpupool agent --emulate`` processes (16 hosts x 8 GPUs, two leaves) on loopback.

Jobs arrive as a Poisson stream (1, 2, 4 or 8 GPUs, and two-host 2x8 gangs; each sleeps 1-4 s), light
enough that each is placed at once. For every rank: placed = the ``job.placed`` event's time (the server
writes it in the transaction that stores the placement); started = the wall time the workload itself wrote
as its first act (a Python child: interpreter start-up included). Prints one JSON line: quantiles of
started - placed over all ranks, of placed -> the agent holding the command (delivered_*), of the last
rank's exit -> the job stored finished (exit_*: its GPUs are free from then on), wall time, and CPU seconds
of the server and the agents. The simulator's world charges the two medians (``sim/world.py``).

``--no-push`` runs the server with ``GPUPOOL_COMMAND_WAIT_S=0`` (commands ride heartbeat replies only), the
behaviour before the commands long-poll, for comparison on the same machine and minute.
Usage: python benchmarks/launch_latency.py [--jobs 200] [--rate 4] [--seed 1] [--no-push] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gpupool.fabric.generators import leaf_spine
from live_cluster import LiveCluster

SHAPES = ((1, 1), (1, 2), (1, 4), (1, 8), (2, 8))  # (tasks, GPUs per task)
WEIGHTS = (0.3, 0.2, 0.2, 0.2, 0.1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=16, help="hosts (8 per leaf), one agent process each")
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--rate", type=float, default=4.0, help="job arrivals per second")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, workloads)")
    ap.add_argument("--no-push", action="store_true", help="commands in heartbeat replies only")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    fabric = leaf_spine(max(1, args.agents // 8), 1, min(8, args.agents))
    env = {"GPUPOOL_COMMAND_WAIT_S": "0"} if args.no_push else {}
    tmp = tempfile.mkdtemp(prefix="launch-latency-")
    cluster = LiveCluster(Path(tmp), fabric, env)
    try:
        cluster.start_agents()
        cpu0, wall0, load0 = cluster.cpu(), time.perf_counter(), os.getloadavg()[0]
        ids = []
        next_at = time.monotonic()
        for _ in range(args.jobs):
            next_at += float(rng.exponential(1.0 / args.rate))
            time.sleep(max(0.0, next_at - time.monotonic()))
            tasks, gpus = SHAPES[int(rng.choice(len(SHAPES), p=WEIGHTS))]
            ids.append(cluster.submit(float(rng.uniform(1.0, 4.0)), tasks, gpus))
        cluster.wait_finished(ids, 300)
        wall, cpu1 = time.perf_counter() - wall0, cluster.cpu()
        latencies, delivered, exits = [], [], []
        for j in ids:
            placed = cluster.event_time(j, "job.placed")
            latencies += [t - placed for t in cluster.started_files(j).values()]
            delivered += [t - placed for t in cluster.received_files(j).values()]
            exits.append(cluster.event_time(j, "job.finished") - max(cluster.ended_files(j).values()))
    finally:
        cluster.close()
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    lat = np.array(latencies)
    print(
        json.dumps(
            {
                "benchmark": "launch_latency",
                "push": not args.no_push,
                "agents": args.agents,
                "jobs": args.jobs,
                "ranks": int(lat.size),
                "p50_s": round(float(np.quantile(lat, 0.5)), 3),
                "p90_s": round(float(np.quantile(lat, 0.9)), 3),
                "p99_s": round(float(np.quantile(lat, 0.99)), 3),
                "max_s": round(float(lat.max()), 3),
                "mean_s": round(float(lat.mean()), 3),
                # placed -> the agent holds the launch command (the rest is process and interpreter start-up)
                "delivered_p50_s": round(float(np.quantile(delivered, 0.5)), 3),
                "delivered_p99_s": round(float(np.quantile(delivered, 0.99)), 3),
                # the last rank's exit -> the job stored finished (the agent's tick, its report, the store)
                "exit_p50_s": round(float(np.quantile(exits, 0.5)), 3),
                "exit_p99_s": round(float(np.quantile(exits, 0.99)), 3),
                "wall_s": round(wall, 1),
                "server_cpu_s": round(cpu1["server_cpu_s"] - cpu0["server_cpu_s"], 2),
                "agents_cpu_s": round(cpu1["agents_cpu_s"] - cpu0["agents_cpu_s"], 2),
                "loadavg_1m": round((load0 + os.getloadavg()[0]) / 2, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
