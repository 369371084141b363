"""Expected-start error on a replayed trace: projected start at each job's arrival against its actual start.

    python benchmarks/eta_error.py --trace itp --gpus 64
    python benchmarks/eta_error.py --trace synthetic --gpus 128 --days 2
    python benchmarks/eta_error.py --gpus 8192 --cost 10000 [--step 0]   # one projection's cost at 1,024 hosts

The simulator replays the trace (``sim.eta.ProjectingEngine``); after the cycles at each instant where jobs
arrived (every ``--every``-th such instant), it projects, as the server does from its live state
(``scheduler.projection``), the expected start of each job that arrived then and still waits, and compares
it with that job's actual start in the same run. The run itself is the plain engine's (a projection forks
the state). Per arm (policy x estimates): median and p90 of |expected - actual| in seconds and relative to the
actual wait from the projection (a wait under 60 s counts as 60 s), how many projections said "unknown", and
the projections' cost (cycles each; CPU of the whole arm beside its wall time). ``--step`` is the projection's
``step_fraction`` (the server's 1% by default; 0: a cycle at every event, the simulator's own resolution).

Estimates: ``exact`` gives every job its trace duration as ``estimated_runtime_s`` (an oracle: what is left is
the error the projection cannot know, later arrivals that go first); ``history`` gives none, so running and
queued jobs' runtimes come from the runs that finished so far in the run (per tenant and job name, the
conditional median past the time a job has already run), as on a server whose users give no estimates.

Traces: ``itp`` is Microsoft ITP cluster05 (3,629 jobs, one tenant; read by path); ``synthetic`` the
simulator's mixed day (inference services at high priority, training, batch jobs with deadlines at batch
priority), where under ``priority`` later high-priority arrivals overtake what was projected.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobPlaced, JobStarted, JobSubmitted
from gpupool.domain.jobs import Allocation, JobSpec
from gpupool.scheduler.driver import CycleDriver
from gpupool.scheduler.projection import ProjectionConfig, ProjectionInput, project
from gpupool.scheduler.settings import SchedulerSettings, scheduler_config, sharing_policy
from gpupool.scheduler.types import CycleInputs
from gpupool.sim.eta import EtaOptions, ProjectingEngine, errors
from gpupool.sim.fabrics import uniform_fabric
from gpupool.sim.runner import sim_jobs
from gpupool.sim.traces import load_trace, synthetic_trace
from gpupool.sim.traces.records import Trace
from gpupool.sim.world import WorldConfig

ITP = Path("/work/shared/traces/microsoft-itp-elasticflow/raw/cluster05.csv")


def the_trace(args: argparse.Namespace) -> Trace:
    if args.trace == "itp":
        trace = load_trace(args.path or ITP, "itp")
    else:
        trace = synthetic_trace(
            args.seed,
            args.days,
            inference_peak_gpus=args.gpus // 4,
            training_jobs_per_day=args.training_per_day,
            batch_jobs_per_day=args.batch_per_day,
            training_max_gpus=min(64, args.gpus // 2),
        )
    if args.jobs:
        trace = Trace(trace.name, trace.format, trace.jobs[: args.jobs])
    return trace


def arm(trace: Trace, gpus: int, policy: str, estimates: str, every: int, step: float) -> dict[str, Any]:
    fabric = uniform_fabric(gpus, 8)
    jobs, skipped = sim_jobs(trace, fabric, know_durations=estimates == "exact")
    t0, c0 = time.perf_counter(), time.process_time()
    engine = ProjectingEngine(
        fabric,
        jobs,
        SchedulerSettings(policy=policy),
        WorldConfig(),
        EtaOptions(every, projection=ProjectionConfig(step_fraction=step)),
    )
    result = engine.run()
    out = errors(engine.samples, result.records)
    out.update(skipped=skipped, wall_s=round(time.perf_counter() - t0, 2), cpu_s=round(time.process_time() - c0, 2))
    return out


def cost(gpus: int, queued: int, seed: int, step: float) -> dict[str, Any]:
    """One projection's cost on a full cluster: ``queued`` jobs of 1-64 GPUs with estimates submitted to ``gpus``
    GPUs (8 per host), one cycle placed what fits, the rest wait (the server's work per refresh, on the loop's
    state after a cycle); ``step``: the projection's ``step_fraction``."""
    rng = np.random.default_rng(seed)
    fabric = uniform_fabric(gpus, 8)
    state = ClusterState(fabric)
    jobs = [
        JobSpec(f"j{i}", float(i), tasks=t, gpus_per_task=min(8, g), estimated_runtime_s=float(rng.uniform(600, 86400)))
        for i, (t, g) in enumerate((max(1, g // 8), g) for g in rng.choice([1, 2, 4, 8, 16, 32, 64], size=queued))
    ]
    for j in jobs:
        state.apply(JobSubmitted(j, j.submit_time_s))
    settings = SchedulerSettings()
    driver = CycleDriver(scheduler_config(settings), settings.usage_half_life_s)
    sharing = sharing_policy(settings)
    placed = _Placer(state)
    driver.run_cycle(state.snapshot(), state.snapshot().pending, sharing, placed, 0.0)
    snap = state.snapshot()
    inp = ProjectionInput(snap, snap.pending, 1.0, driver.config, sharing, driver.last_inputs or CycleInputs())
    t0, c0 = time.perf_counter(), time.process_time()
    p = project(inp, config=ProjectionConfig(step_fraction=step))
    known = sum(1 for v in p.starts.values() if v is not None)
    return {"gpus": gpus, "step_fraction": step, "running": len(snap.running), "queued": len(snap.pending), "cycles": p.cycles,
            "stopped": p.stopped, "known": known, "wall_s": round(time.perf_counter() - t0, 3),
            "cpu_s": round(time.process_time() - c0, 3)}  # fmt: skip


class _Placer:
    """The cost run's actuator: its first cycle's placements fill the cluster, started at once."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def place(self, allocation: Allocation, now_s: float) -> bool:
        self.state.apply(JobPlaced(allocation, now_s))
        self.state.apply(JobStarted(allocation.job_id, now_s))
        return True

    def end(self, ending: Any, now_s: float) -> bool:
        return False

    def preempt(self, preemption: Any, now_s: float) -> bool:
        return False

    def signal(self, signal: Any, now_s: float) -> bool:
        return False

    def waiting(self, waiting: Any) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", choices=["itp", "synthetic"], default="itp")
    ap.add_argument("--path", type=Path, default=None, help="the ITP trace file (default: cluster05)")
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=0, help="only the first N jobs (0: all)")
    ap.add_argument("--every", type=int, default=1, help="project at every n-th instant with arrivals")
    ap.add_argument("--policies", default="fifo,priority")
    ap.add_argument("--estimates", default="exact,history")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--training-per-day", type=float, default=300.0)
    ap.add_argument("--batch-per-day", type=float, default=200.0)
    ap.add_argument("--cost", type=int, default=0, help="instead: one projection's cost with this many jobs")
    ap.add_argument("--step", type=float, default=ProjectionConfig().step_fraction, help="its step_fraction")
    args = ap.parse_args(argv)
    load0, t0, c0 = os.getloadavg()[0], time.perf_counter(), time.process_time()
    if args.cost:
        row = {"benchmark": "eta_cost", **cost(args.gpus, args.cost, args.seed, args.step)}
        print(json.dumps({**row, "loadavg_1m": round((load0 + os.getloadavg()[0]) / 2, 2)}))
        return 0
    trace = the_trace(args)
    arms = {}
    for policy in args.policies.split(","):
        for estimates in args.estimates.split(","):
            arms[f"{policy}/{estimates}"] = arm(trace, args.gpus, policy, estimates, args.every, args.step)
    out = {
        "benchmark": "eta_error",
        "trace": args.trace if args.trace == "synthetic" else str(args.path or ITP),
        "jobs": len(trace.jobs),
        "gpus": args.gpus,
        "every": args.every,
        "step_fraction": args.step,
        "arms": arms,
        "wall_s": round(time.perf_counter() - t0, 2),
        "cpu_s": round(time.process_time() - c0, 2),
        "loadavg_1m": round((load0 + os.getloadavg()[0]) / 2, 2),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
