"""Day and night on one SuperPOD: calendar lending vs a static split. Prints one JSON line per arm.

    python benchmarks/sim_daynight.py --days 30 --copies 3

The synthetic month (seeded), on a 1-SU DGX H100 SuperPOD (31 nodes, 248 GPUs):
- Inference: 1-GPU replicas (as the DLRM trace's GPU instances), high priority, not preemptible, pool
  ``inference``, pinned by a node selector to the hosts inference owns by day. The DLRM trace has no request rates and its alive-instance count is flat (3,078-3,445
  GPUs); its diurnal signal is the creation rate of instances by hour of day (5x from night to the
  10:00-19:00 peak). That profile, min-max scaled, sets the replicas wanted at each hour:
  ``night + (peak - night) x profile``; replicas arrive as a Poisson process at ``wanted / mean life`` per
  second and live an exponential mean of one hour, so the alive count follows the profile.
- Training: ITP cluster05's jobs (59 days) with their GPUs and durations, arrival times halved to fit a
  month, ``--copies`` copies each shifted by a random offset within a day; normal priority, preemptible,
  pool ``training``.
- calendar: inference owns 80% of the pod 08:00-22:00 and 25% at night; training gets the rest. lending:
  the same calendar, and idle hosts of either pool are lent too (reclaimed with a CHECKPOINT signal and a
  ``--grace`` of 30 s). static: inference owns 80% at all times, nothing is lent. In both, inference's demand target (``PoolDemand``) is its replicas' GPUs plus
  ``--headroom`` 8, so a closing window does not take hosts its replicas still hold. Preemption is on in both; a scheduling cycle runs at most every ``--cycle`` 10 s, as a server loop would.
- Training queueing: mean of (first start - submit) over training jobs. Inference SLO: a replica starts
  within 60 s of its arrival and is never preempted.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from gpupool.domain.calendar import parse_calendar
from gpupool.domain.events import NodeLabelled
from gpupool.domain.jobs import JobSpec, PriorityClass
from gpupool.fabric.generators import superpod
from gpupool.scheduler.settings import SchedulerSettings
from gpupool.sim.engine import Engine
from gpupool.sim.metrics import compute_metrics
from gpupool.sim.traces import load_trace
from gpupool.sim.traces.specs import to_job_spec
from gpupool.sim.world import SimJob, WorldConfig

DLRM = Path("/work/shared/traces/alibaba-dlrm-inference-v2025/disaggregated_DLRM_trace.csv")
ITP = Path("/work/shared/traces/microsoft-itp-elasticflow/raw/cluster05.csv")
LENDING = """
timezone = "UTC"
default_pool = "training"

[[pool]]
name = "inference"
sus = [1]
share = 0.8
share_outside = 0.25
windows = [{ days = "mon-sun", start = "08:00", end = "22:00" }]
"""
INFERENCE_HOSTS = (("role", "inference"),)
DAY_SHARE = 0.8
STATIC = """
timezone = "UTC"
default_pool = "training"

[[pool]]
name = "inference"
sus = [1]
share = 0.8
"""


def dlrm_profile(path: Path) -> np.ndarray:
    """Instances created per hour of day (GPU instances created after the trace start), min-max scaled."""
    trace = load_trace(path, "dlrm")
    hours = np.array([int(j.submit_s // 3600) % 24 for j in trace.jobs if j.gpus > 0 and j.submit_s > 0])
    counts = np.bincount(hours, minlength=24).astype(np.float64)
    scaled: np.ndarray = (counts - counts.min()) / max(float(counts.max() - counts.min()), 1.0)
    return scaled


def inference_jobs(profile: np.ndarray, days: float, night: int, peak: int, life_s: float, seed: int) -> list[SimJob]:
    rng = np.random.default_rng(seed)
    out: list[SimJob] = []
    for hour in range(int(days * 24)):
        wanted = night + (peak - night) * profile[hour % 24]
        n = int(rng.poisson(wanted * 3600.0 / life_s))
        for t in np.sort(rng.uniform(hour * 3600.0, (hour + 1) * 3600.0, size=n)):
            spec = JobSpec(f"inf{len(out):06d}", float(t), pool="inference", priority=PriorityClass.HIGH,
                           node_selector=INFERENCE_HOSTS)  # fmt: skip
            out.append(SimJob(spec, float(max(60.0, rng.exponential(life_s))), "inference"))
    return out


def training_jobs(days: float, copies: int, seed: int) -> list[SimJob]:
    rng = np.random.default_rng(seed + 1)
    trace = load_trace(ITP, "itp")
    out: list[SimJob] = []
    for c in range(copies):
        shift = float(rng.uniform(0.0, 86400.0))
        for tj in trace.jobs:
            submit = tj.submit_s / 2.0 + shift
            if submit >= days * 86400.0:
                continue
            spec = to_job_spec(tj, max_gpus_per_task=8, submit_s=submit)
            if spec is None:
                continue
            spec = replace(spec, job_id=f"c{c}-{spec.job_id}", pool="training", preemptible=True)
            out.append(SimJob(spec, tj.duration_s, "training"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--copies", type=int, default=3)
    ap.add_argument("--night-gpus", type=int, default=40)
    ap.add_argument("--peak-gpus", type=int, default=170)
    ap.add_argument("--grace", type=float, default=30.0)
    ap.add_argument("--headroom", type=int, default=8, help="GPUs over the services' own in their demand target")
    ap.add_argument("--cycle", type=float, default=10.0, help="seconds between scheduling cycles at most")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--arms", nargs="+", default=["calendar", "lending", "static"])
    args = ap.parse_args(argv)
    fabric = superpod(1)
    jobs = inference_jobs(dlrm_profile(DLRM), args.days, args.night_gpus, args.peak_gpus, 3600.0, args.seed)
    jobs += training_jobs(args.days, args.copies, args.seed)
    world = WorldConfig(min_cycle_interval_s=args.cycle)
    for arm in args.arms:
        text, lend = {"lending": (LENDING, True), "calendar": (LENDING, False), "static": (STATIC, False)}[arm]
        settings = SchedulerSettings(seed=args.seed, lend_pools=lend, preemption_grace_s=args.grace)
        t0 = time.perf_counter()
        engine = Engine(fabric, jobs, settings, world, seed=args.seed, calendar=parse_calendar(text, arm),
                        demand_headroom_gpus=args.headroom)  # fmt: skip
        # Replicas are pinned to the hosts inference owns by day (the calendar's prefix of the SU). Since
        # brief I4 the scheduler itself never reclaims a non-preemptible job nor lends it other pools' hosts,
        # and keeps the hosts covering a pool's demand target unlent; the pinning is kept so that runs
        # before and after compare the same workload.
        for h in fabric.hosts[: round(DAY_SHARE * len(fabric.hosts))]:
            engine.state.apply(NodeLabelled(h.name, INFERENCE_HOSTS, 0.0))
        res = engine.run()
        m = compute_metrics(res, inference_slo_wait_s=world.inference_slo_wait_s)
        train = [r for r in res.records if r.kind == "training"]
        waits = [r.queue_s for r in train if r.queue_s is not None]
        jct = [r.jct_s for r in train if r.jct_s is not None]
        row = {
            "arm": arm,
            "gpus": fabric.gpu_count,
            "days": args.days,
            "training_jobs": len(train),
            "training_finished": len(jct),
            "training_avg_queue_s": round(float(np.mean(waits)), 1),
            "training_p99_queue_s": round(float(np.percentile(waits, 99)), 1),
            "training_avg_jct_s": round(float(np.mean(jct)), 1),
            "inference_jobs": m["inference_jobs"],
            "inference_slo_attainment": m["inference_slo_attainment"],
            "preemptions": m["preemptions"],
            "gpu_hours_lost_to_preemption": m["gpu_hours_lost_to_preemption"],
            "gpu_utilization": m["gpu_utilization"],
            "wall_s": round(time.perf_counter() - t0, 1),
        }
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
