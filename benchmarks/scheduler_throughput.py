"""Scheduler throughput: placements per second and cycle latency on a SuperPOD-style fabric.

    python benchmarks/scheduler_throughput.py --hosts 10000 --pending 20000 --placement topology

Builds a rail-optimised SuperPOD of about ``--hosts`` DGX H100 hosts (32 node slots per SU), fills it to
``--fill`` of its GPUs with running work (whole-GPU jobs of 1 to 8 GPUs per host and some shared GPUs),
submits ``--pending`` mixed jobs (1 to 64 GPUs, some fractional), then runs scheduling cycles, applying
each cycle's placements to the cluster state, until the queue is empty or a cycle places nothing. Prints
one JSON line. ``placements_per_s`` counts only time inside ``schedule()``; ``apply_s`` is the time spent
folding placements into the state and taking snapshots (the server's and simulator's side of the loop).
The ``*_cpu*`` fields count this process's CPU time instead of wall time: on a shared, busy machine they
move much less from run to run, so compare versions on them (and on alternating runs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import sys
import time
from dataclasses import replace

import numpy as np

from gpupool.cluster import ClusterState
from gpupool.domain.calendar import parse_calendar
from gpupool.domain.events import JobPlaced, JobSubmitted
from gpupool.domain.jobs import Allocation, GpuShare, JobSpec, PriorityClass, TaskAllocation
from gpupool.domain.sharing import Quota
from gpupool.fabric.generators import superpod
from gpupool.scheduler import NO_SHARING, PreemptionConfig, SchedulerConfig, ScheduleRequest, SharingPolicy, schedule


def fill(state: ClusterState, rng: np.random.Generator, target: float) -> int:
    """Occupy about ``target`` of the GPUs, host by host, with one running job per host."""
    fab = state.index.fabric
    jobs = 0
    for h, host in enumerate(fab.hosts):
        g = len(host.gpus)
        used = int(min(g, rng.binomial(g, target) if rng.random() > 0.35 else (g if rng.random() < target else 0)))
        tasks: list[TaskAllocation] = []
        if used:
            gpus = tuple(sorted(int(x) for x in rng.choice(g, size=used, replace=False)))
            tasks.append(TaskAllocation(host.name, gpus, 1000, 0, 1000 * used, 16384 * used))
        spec = JobSpec(f"run-{h}", 0.0, gpus_per_task=max(used, 1))
        if tasks:
            state.apply(JobSubmitted(spec, 0.0))
            state.apply(JobPlaced(Allocation(spec.job_id, tuple(tasks)), 0.0))
            jobs += 1
        free = [i for i in range(g) if not tasks or i not in tasks[0].gpus]
        if free and rng.random() < 0.1:  # a shared GPU: some inference already runs on part of it
            sid = f"share-{h}"
            state.apply(JobSubmitted(JobSpec(sid, 0.0, share=GpuShare(500, 20000)), 0.0))
            state.apply(JobPlaced(Allocation(sid, (TaskAllocation(host.name, (free[0],), 500, 20000),)), 0.0))
            jobs += 1
    return jobs


def pending_jobs(n: int, rng: np.random.Generator) -> list[JobSpec]:
    out = []
    kinds = rng.random(n)
    prios = rng.choice([1, 2, 2, 2, 3, 4], size=n)
    for i in range(n):
        k = kinds[i]
        common = {
            "submit_time_s": float(i),
            "priority": PriorityClass(int(prios[i])),
            "cpu_millicores": 4000,
            "memory_mib": 65536,
        }
        if k < 0.15:
            job = JobSpec(
                f"p{i:06d}",
                share=GpuShare(int(rng.choice([100, 250, 500])), int(rng.choice([5000, 10000, 20000]))),
                **common,
            )  # type: ignore[arg-type]
        elif k < 0.75:
            job = JobSpec(f"p{i:06d}", gpus_per_task=int(rng.choice([1, 1, 2, 4, 8])), **common)  # type: ignore[arg-type]
        else:
            tasks = int(rng.choice([2, 4, 8]))
            job = JobSpec(
                f"p{i:06d}", tasks=tasks, gpus_per_task=int(rng.choice([2, 4, 8])) if tasks <= 4 else 8, **common
            )  # type: ignore[arg-type]
        out.append(job)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--pending", type=int, default=5000)
    ap.add_argument("--placement", default="topology")
    ap.add_argument("--policy", default="priority")
    ap.add_argument("--fill", type=float, default=0.7)
    ap.add_argument("--per-cycle", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--sharing", action="store_true", help="quotas for 4 tenants in a cohort and a day/night pool calendar"
    )
    ap.add_argument("--profile", default="", help="write a cProfile of the cycles to this path")
    ap.add_argument(
        "--digest",
        action="store_true",
        help="add a SHA-256 of every cycle's result (placements, every waiting job's reason and sentence, the rest): "
        "two versions that place alike print the same (read outside the timed calls)",
    )
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    sus = max(1, -(-(args.hosts + 1) // 32))
    t0 = time.perf_counter()
    fab = superpod(sus)
    state = ClusterState(fab)
    fill(state, rng, args.fill)
    pend = pending_jobs(args.pending, rng)
    for j in pend:
        state.apply(JobSubmitted(j, j.submit_time_s))
    filled = 1.0 - state.snapshot().free_gpus() / fab.gpu_count
    setup_s = time.perf_counter() - t0
    cfg = SchedulerConfig(policy=args.policy, placer=args.placement, max_placements_per_cycle=args.per_cycle)
    sharing: SharingPolicy | None = None
    if args.sharing:
        cal = parse_calendar(
            'timezone = "UTC"\ndefault_pool = "default"\n[[pool]]\nname = "inference"\nsus = [1, 2, 3, 4]\n'
            'share = 0.7\nshare_outside = 0.2\nwindows = [{ days = "mon-sun", start = "08:00", end = "22:00" }]\n',
            "bench",
        )
        quarter = fab.gpu_count // 4
        sharing = SharingPolicy(
            quotas=tuple(Quota(t, "default", quarter, cohort="c") for t in "abcd"),
            calendar=cal,
            preemption=PreemptionConfig(enabled=False),
        )
        pend = [replace(j, tenant="abcd"[i % 4]) for i, j in enumerate(state.snapshot().pending)]
    cycle_s: list[float] = []
    cycle_cpu_s: list[float] = []
    apply_s = 0.0
    placements = 0
    prof = None
    digest = hashlib.sha256() if args.digest else None
    if args.profile:
        import cProfile

        prof = cProfile.Profile()
    while True:
        snap = state.snapshot()
        if not snap.pending:
            break
        req = ScheduleRequest(
            snap, tuple(pend) if sharing else snap.pending, float(len(cycle_s)), cfg, sharing or NO_SHARING
        )
        if prof:
            prof.enable()
        t, c = time.perf_counter(), time.process_time()
        result = schedule(req)
        cycle_s.append(time.perf_counter() - t)
        cycle_cpu_s.append(time.process_time() - c)
        if prof:
            prof.disable()
        if digest is not None:
            parts = (result.placements, tuple(result.waiting), result.preemptions, result.signals, result.endings)
            digest.update(repr(parts).encode())
        t = time.perf_counter()
        for alloc in result.placements:
            state.apply(JobPlaced(alloc, 0.0))
        if sharing:
            done = result.placed_ids()
            pend = [j for j in pend if j.job_id not in done]
        apply_s += time.perf_counter() - t
        placements += len(result.placements)
        if not result.placements:
            break
    if prof:
        prof.dump_stats(args.profile)
    total = sum(cycle_s)
    cpu_total = sum(cycle_cpu_s)
    ms = np.array(cycle_s) * 1000.0
    cpu_ms = np.array(cycle_cpu_s) * 1000.0
    waiting_reasons: dict[str, int] = {}
    if cycle_s:
        for w in result.waiting:
            waiting_reasons[w.reason.value] = waiting_reasons.get(w.reason.value, 0) + 1
    out = {
        "hosts": len(fab.hosts),
        "gpus": fab.gpu_count,
        "pending": args.pending,
        "placement": args.placement,
        "sharing": args.sharing,
        "fill": round(filled, 3),
        "placements": placements,
        "cycles": len(cycle_s),
        "placements_per_s": round(placements / total, 1) if total else 0.0,
        "cycle_ms_p50": round(float(np.percentile(ms, 50)), 1) if cycle_s else 0.0,
        "cycle_ms_p99": round(float(np.percentile(ms, 99)), 1) if cycle_s else 0.0,
        "us_per_placement": round(total / placements * 1e6, 1) if placements else None,
        "schedule_s": round(total, 3),
        "placements_per_cpu_s": round(placements / cpu_total, 1) if cpu_total else 0.0,
        "cycle_cpu_ms_p99": round(float(np.percentile(cpu_ms, 99)), 1) if cycle_s else 0.0,
        "schedule_cpu_s": round(cpu_total, 3),
        "apply_s": round(apply_s, 3),
        "setup_s": round(setup_s, 1),
        "left_waiting": waiting_reasons,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "python": sys.version.split()[0],
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    if digest is not None:
        out["digest"] = digest.hexdigest()[:16]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
