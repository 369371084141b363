"""The server's cycle under a long backlog: per-cycle wall and CPU time with 50,000 jobs pending.

    python benchmarks/backlog_cycle.py --hosts 512 --pending 50000 --cycles 200

A rail-optimised SuperPOD of about ``--hosts`` DGX H100 hosts, every GPU busy with running jobs that have
estimates (so EASY backfill reserves), and ``--pending`` mixed jobs (whole GPUs, gangs of 2-8 hosts, shares;
a share of them with deadlines, some too late to make them, and estimates), under the default settings
(``SchedulerSettings()``: srt, EASY backfill, deadline admission and preemption, topology). Each cycle goes
through ``CycleDriver.run_cycle``, the code path of the server's loop and the simulator: between cycles the
clock moves ``--step`` seconds, ``--ends`` running jobs end and ``--arrivals`` jobs are submitted; what the
cycle places starts at once. ``cycle_ms_*`` time ``run_cycle`` (the schedule and applying its decisions to the
state) after one snapshot per cycle (``snapshot_ms_*``); ``waiting_ms_*`` time making the full list of reasons
the server's actuator stores (``Waits`` makes it only when read: 50,000 new tuples, whose cost is mostly the
garbage collector's passes over the backlog's objects; ``--gc-freeze`` shows it without). The first cycle (which sorts the backlog
into the kept queue) is reported apart. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from collections import Counter
from collections.abc import Sequence

import numpy as np

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobFinished, JobPlaced, JobPreempted, JobStarted, JobSubmitted
from gpupool.domain.jobs import Allocation, GpuShare, JobSpec, PriorityClass, TaskAllocation
from gpupool.fabric.generators import superpod
from gpupool.scheduler.driver import CycleDriver
from gpupool.scheduler.settings import SchedulerSettings, scheduler_config, sharing_policy
from gpupool.scheduler.types import Ending, Preemption, Signal, Waiting


def fill(state: ClusterState, rng: np.random.Generator) -> None:
    """Every GPU busy: one to eight jobs per host, each with an estimate, ending over the next hours."""
    for h, host in enumerate(state.index.fabric.hosts):
        g, start = len(host.gpus), 0
        while start < g:
            n = int(min(g - start, rng.choice([1, 2, 4, 8])))
            spec = JobSpec(f"run-{h}-{start}", 0.0, gpus_per_task=n, estimated_runtime_s=float(rng.uniform(600, 20000)))
            task = TaskAllocation(host.name, tuple(range(start, start + n)), 1000, 0, 1000 * n, 16384 * n)
            state.apply(JobSubmitted(spec, 0.0))
            state.apply(JobPlaced(Allocation(spec.job_id, (task,)), 0.0))
            state.apply(JobStarted(spec.job_id, 0.0))
            start += n


def backlog_job(i: int, now: float, rng: np.random.Generator) -> JobSpec:
    """Mixed shapes; 40% with a deadline (a tenth of those too late already), 70% with an estimate."""
    k = rng.random()
    est = float(rng.choice([300.0, 1800.0, 7200.0])) if rng.random() < 0.7 else None
    dl = None
    if rng.random() < 0.4:
        runtime = est if est is not None else 3600.0
        dl = now + runtime * (0.5 if rng.random() < 0.1 else float(rng.uniform(1.5, 20.0)))
    common = {
        "submit_time_s": now,
        "priority": PriorityClass(int(rng.choice([1, 2, 2, 2, 3]))),
        "cpu_millicores": 4000,
        "memory_mib": 65536,
        "estimated_runtime_s": est,
        "deadline_s": dl,
    }
    jid = f"b{i:06d}"
    if k < 0.1:
        share = GpuShare(int(rng.choice([250, 500])), int(rng.choice([10000, 20000])))
        return JobSpec(jid, share=share, **common)  # type: ignore[arg-type]
    if k < 0.75:
        return JobSpec(jid, gpus_per_task=int(rng.choice([1, 1, 2, 4, 8])), **common)  # type: ignore[arg-type]
    return JobSpec(jid, tasks=int(rng.choice([2, 4, 8])), gpus_per_task=8, **common)  # type: ignore[arg-type]


class World:
    """The actuator: decisions take effect in the state at once (placed jobs start)."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.placed = 0

    def end(self, ending: Ending, now_s: float) -> bool:
        self.state.apply(JobFinished(ending.job_id, now_s, succeeded=False))
        return True

    def preempt(self, preemption: Preemption, now_s: float) -> bool:
        self.state.apply(JobPreempted(preemption.job_id, now_s, preemption.reason.value))
        return True

    def place(self, allocation: Allocation, now_s: float) -> bool:
        self.state.apply(JobPlaced(allocation, now_s))
        self.state.apply(JobStarted(allocation.job_id, now_s))
        self.placed += 1
        return True

    def signal(self, signal: Signal, now_s: float) -> bool:
        return True

    def waiting(self, waiting: Sequence[Waiting]) -> None:
        pass  # timed apart: ``waiting_ms``


def pct(xs: list[float], q: float) -> float:
    return round(float(np.percentile(xs, q)) * 1000, 2) if xs else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=512)
    ap.add_argument("--pending", type=int, default=50000)
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--step", type=float, default=5.0, help="seconds between cycles")
    ap.add_argument("--ends", type=int, default=3, help="running jobs that end between cycles")
    ap.add_argument("--arrivals", type=int, default=3, help="jobs submitted between cycles")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--gc-freeze",
        action="store_true",
        help="gc.freeze() after the setup: the collector then skips the backlog's objects (a long-lived server's choice)",
    )
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    state = ClusterState(superpod(max(1, -(-(args.hosts + 1) // 32))))
    fill(state, rng)
    for i in range(args.pending):
        state.apply(JobSubmitted(backlog_job(i, 0.0, rng), 0.0))
    s = SchedulerSettings()
    driver, sharing, world = CycleDriver(scheduler_config(s), s.usage_half_life_s), sharing_policy(s), World(state)
    setup_s = time.perf_counter() - t0
    if args.gc_freeze:
        gc.freeze()
    now, made = 0.0, args.pending
    wall, cpu, snaps, waits, waits_cpu, pending = [], [], [], [], [], []
    first: tuple[float, float] | None = None
    reasons: Counter[str] = Counter()
    for c in range(args.cycles + 1):
        t = time.perf_counter()
        snap = state.snapshot()
        snap_s = time.perf_counter() - t
        t, p = time.perf_counter(), time.process_time()
        run = driver.run_cycle(snap, snap.pending, sharing, world, now)
        w, u = time.perf_counter() - t, time.process_time() - p
        t, p = time.perf_counter(), time.process_time()
        listed = tuple(run.result.waiting)
        wait_s, wait_cpu = time.perf_counter() - t, time.process_time() - p
        if c == 0:
            first = (w, u)
        else:
            wall.append(w)
            cpu.append(u)
            snaps.append(snap_s)
            waits.append(wait_s)
            waits_cpu.append(wait_cpu)
            pending.append(len(snap.pending))
        if c == args.cycles:
            reasons = Counter(x.reason.value for x in listed)
        now += args.step
        running = sorted(state.snapshot().running)
        for j in rng.choice(len(running), size=min(args.ends, len(running)), replace=False):
            state.apply(JobFinished(running[int(j)], now))
        for _ in range(args.arrivals):
            state.apply(JobSubmitted(backlog_job(made, now, rng), now))
            made += 1
    assert first is not None
    print(json.dumps({
        "hosts": state.index.n_hosts, "gpus": state.index.fabric.gpu_count, "pending": args.pending,
        "cycles": args.cycles, "placed": world.placed, "pending_mean": round(float(np.mean(pending)), 1),
        "cycle_ms_p50": pct(wall, 50), "cycle_ms_p99": pct(wall, 99), "cycle_ms_max": pct(wall, 100),
        "cycle_cpu_ms_p50": pct(cpu, 50), "cycle_cpu_ms_p99": pct(cpu, 99),
        "snapshot_ms_p50": pct(snaps, 50), "snapshot_ms_p99": pct(snaps, 99),
        "waiting_ms_p50": pct(waits, 50), "waiting_ms_p99": pct(waits, 99),
        "waiting_cpu_ms_p50": pct(waits_cpu, 50), "waiting_cpu_ms_p99": pct(waits_cpu, 99),
        "first_cycle_ms": round(first[0] * 1000, 1), "first_cycle_cpu_ms": round(first[1] * 1000, 1),
        "kept_queue": driver.queue is not None, "gc_freeze": args.gc_freeze, "last_reasons": dict(reasons.most_common()),
        "setup_s": round(setup_s, 1), "cpu_s": round(time.process_time(), 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
