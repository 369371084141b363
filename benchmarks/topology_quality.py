"""Topology quality: how often gangs land in the smallest domain that could hold them, and rail-aligned.

    python benchmarks/topology_quality.py --sus 4 --jobs 600 --placement topology first-fit best-fit

A stream of mixed jobs (1 to 256 GPUs; single-host jobs and gangs of 1-, 2-, 4- and 8-GPU tasks) runs
through the scheduler in strict FIFO order on a generated SuperPOD. Each job is scheduled on its own, so
"the smallest feasible domain" is measured on exactly the state the placer saw: host, then leaf/SU, then
the whole fabric. When the head does not fit, the earliest running job finishes (random durations from a
seeded generator) and the head is tried again. Prints one JSON line per placer.
"""

from __future__ import annotations

import argparse
import heapq
import json
import time

import numpy as np

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobFinished, JobPlaced, JobStarted, JobSubmitted
from gpupool.domain.jobs import JobSpec
from gpupool.fabric.generators import superpod
from gpupool.fabric.model import Domain
from gpupool.scheduler import SchedulerConfig, ScheduleRequest, schedule

# (tasks, GPUs per task, weight): mostly small jobs, with gangs up to 256 GPUs
MIX = [
    (1, 1, 12), (1, 2, 8), (1, 4, 8), (1, 8, 10),
    (2, 2, 3), (4, 1, 3), (4, 2, 3), (3, 4, 3), (8, 2, 3),
    (2, 8, 8), (4, 8, 8), (8, 8, 6), (16, 8, 4), (32, 8, 2),
]  # fmt: skip


def stream(n: int, rng: np.random.Generator) -> list[JobSpec]:
    w = np.array([m[2] for m in MIX], dtype=np.float64)
    picks = rng.choice(len(MIX), size=n, p=w / w.sum())
    return [JobSpec(f"q{i:05d}", float(i), tasks=MIX[k][0], gpus_per_task=MIX[k][1]) for i, k in enumerate(picks)]


def smallest_feasible(free: np.ndarray, su_ids: np.ndarray, tasks: int, gpus: int) -> int:  # type: ignore[type-arg]
    """0: one host, 1: one leaf/SU, 2: the fabric, 3: nowhere (by free whole GPUs per host)."""
    slots = free // gpus
    if tasks * gpus <= free.max(initial=0) and (free >= tasks * gpus).any():
        return 0
    if np.bincount(su_ids, weights=slots).max(initial=0) >= tasks:
        return 1
    return 2 if slots.sum() >= tasks else 3


def run(placer: str, sus: int = 4, jobs: int = 600, seed: int = 7) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    fab = superpod(sus)
    state = ClusterState(fab)
    su_ids = np.unique(fab.domain_ids(Domain.SU), return_inverse=True)[1].reshape(-1)
    leaf = fab.domain_ids(Domain.LEAF)
    cfg = SchedulerConfig(placer=placer, policy="fifo", strict=True, max_placements_per_cycle=1)
    durations = rng.exponential(100.0, size=jobs)
    queue = stream(jobs, rng)
    for j in queue:
        state.apply(JobSubmitted(j, 0.0))
    running: list[tuple[float, str]] = []
    now = 0.0
    gangs = smallest = aligned = multi = 0
    by_level = {0: [0, 0], 1: [0, 0], 2: [0, 0]}
    t0 = time.perf_counter()
    for i, job in enumerate(queue):
        while True:
            snap = state.snapshot()
            free = ((snap.gpu_used_milli == 0) & snap.index.gpu_exists).sum(axis=1)
            feasible = smallest_feasible(free, su_ids, job.tasks, job.gpus_per_task)
            res = schedule(ScheduleRequest(snap, (job,), now, cfg))
            if res.placements:
                break
            if not running:
                raise RuntimeError(f"{job.job_id} cannot fit an empty fabric")
            now, done = heapq.heappop(running)
            state.apply(JobFinished(done, now))
        alloc = res.placements[0]
        state.apply(JobPlaced(alloc, now))
        state.apply(JobStarted(job.job_id, now))
        heapq.heappush(running, (now + float(durations[i]), job.job_id))
        if job.tasks < 2:
            continue
        hosts = [fab.host_index(t.host) for t in alloc.tasks]
        distinct = sorted(set(hosts))
        placed = 0 if len(distinct) == 1 else (1 if len({int(leaf[h]) for h in distinct}) == 1 else 2)
        gangs += 1
        by_level[feasible][0] += 1
        if placed <= feasible:
            smallest += 1
            by_level[feasible][1] += 1
        if len(distinct) > 1:
            multi += 1
            sets = {h: set() for h in distinct}  # type: dict[int, set[int]]
            for t, h in zip(alloc.tasks, hosts, strict=True):
                sets[h].update(t.gpus)
            aligned += len({frozenset(s) for s in sets.values()}) == 1
    return {
        "placement": placer,
        "hosts": len(fab.hosts),
        "jobs": jobs,
        "gangs": gangs,
        "smallest_domain_share": round(smallest / gangs, 4) if gangs else None,
        "by_feasible_level": {["host", "leaf/su", "fabric"][k]: v for k, v in by_level.items()},
        "multi_host_gangs": multi,
        "rail_aligned_share": round(aligned / multi, 4) if multi else None,
        "makespan": round(now, 1),
        "wall_s": round(time.perf_counter() - t0, 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sus", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=600)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--placement", nargs="+", default=["topology", "first-fit", "best-fit"])
    args = ap.parse_args(argv)
    for p in args.placement:
        print(json.dumps(run(p, args.sus, args.jobs, args.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
