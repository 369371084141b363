"""ITP cluster05 (3,629 jobs) on 16 GPUs (2 hosts x 8): avg JCT per policy against the fluid-SRPT bound.

    python benchmarks/sim_itp.py --policies fifo las --preemption
    python benchmarks/sim_itp.py --policies las --preemption-by-service --max-lost-s none 300 600 \
        --thresholds 3600,36000,360000 --thresholds 10000
    python benchmarks/sim_itp.py --policies gittins --preemption-by-service --max-lost-s 60 \
        --gittins-quantum 600 4000

``gittins`` ranks by the Gittins index of attained GPU-service against the service of jobs already finished
(``--gittins-quantum``: the shortest quantum in GPU-s the index considers; ``--gittins-min-group``: the
completions a GPU count needs before it gets a distribution of its own; ``--gittins-window``: the most recent
completions kept per group; ``--gittins-cohort-s``: the cohort window, 0 for none).

``sf-srpt`` (ServerFilling-SRPT) reads the trace's durations as exact estimates whatever ``--know-durations``
says: it is a clairvoyant reference arm (``"knows_durations": true`` in its line). ``--jobs N`` runs the
first N jobs only (to explore); ``--gpus``/``--gpus-per-host`` size the cluster (another ITP cluster).

Gavel's simulator on the same trace and cluster: FIFO 279,919 s, LAS 161,022 s; the bound is 66,192 s.
``--preemption-by-service`` (Tiresias; implies ``--preemption``) runs every ``--max-lost-s`` value against
every ``--thresholds`` set of LAS queue limits in GPU-seconds (the scheduler's default when not given).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path

from gpupool.scheduler import SchedulerConfig
from gpupool.scheduler.gittins import GittinsConfig
from gpupool.scheduler.settings import SchedulerSettings, sharing_policy
from gpupool.sim.engine import Engine
from gpupool.sim.fabrics import uniform_fabric
from gpupool.sim.metrics import compute_metrics
from gpupool.sim.runner import sim_jobs
from gpupool.sim.traces import load_trace
from gpupool.sim.world import WorldConfig

GITTINS = frozenset({"gittins", "sf-gittins"})  # the arms the Gittins knobs apply to
ORACLES = frozenset({"sf-srpt"})  # reference arms that read the durations as exact estimates


def _lost(text: str) -> float | None:
    return None if text.lower() == "none" else float(text)


def _thresholds(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--trace", type=Path, default=Path("/work/shared/traces/microsoft-itp-elasticflow/raw/cluster05.csv")
    )
    ap.add_argument("--policies", nargs="+", default=["fifo", "las", "sjf"])
    ap.add_argument("--placement", default="topology")
    ap.add_argument("--preemption", action="store_true")
    ap.add_argument("--preemption-by-service", action="store_true")
    ap.add_argument("--max-lost-s", nargs="+", type=_lost, default=[None])
    ap.add_argument("--thresholds", action="append", type=_thresholds, default=None)
    ap.add_argument("--know-durations", action="store_true")
    ap.add_argument("--gittins-quantum", nargs="+", type=float, default=[GittinsConfig().min_quantum_gpu_s])
    ap.add_argument("--gittins-min-group", type=int, default=GittinsConfig().min_group_samples)
    ap.add_argument("--gittins-window", type=int, default=GittinsConfig().max_samples)
    ap.add_argument("--gittins-cohort-s", nargs="+", type=float, default=[GittinsConfig().cohort_window_s])
    ap.add_argument("--gittins-survivors", action="store_true", help="cohort_min counts survivors too")
    ap.add_argument("--gittins-batch-gap-s", nargs="+", type=float, default=[GittinsConfig().batch_gap_s])
    ap.add_argument("--gittins-batch-weight", type=float, default=GittinsConfig().batch_weight)
    ap.add_argument("--gittins-batch-floor", action=argparse.BooleanOptionalAction, default=GittinsConfig().batch_floor)
    ap.add_argument("--jobs", type=int, default=0, help="the first N jobs only (0: all)")
    ap.add_argument("--gpus", type=int, default=16)
    ap.add_argument("--gpus-per-host", type=int, default=8)
    args = ap.parse_args(argv)
    trace = load_trace(args.trace, "itp")
    if args.jobs > 0:
        trace = replace(trace, jobs=trace.jobs[: args.jobs])  # sorted by submission
    fabric = uniform_fabric(args.gpus, args.gpus_per_host)
    world = WorldConfig()
    by_service = args.preemption_by_service
    preemption = args.preemption or by_service
    jobs_of = {know: sim_jobs(trace, fabric, know_durations=know, preemptible=preemption)[0] for know in (False, True)}
    limits = args.thresholds or [SchedulerConfig().las_thresholds_gpu_s]
    keys = ("jobs", "finished", "avg_jct_s", "lb_avg_jct_s", "avg_jct_over_lb", "preemptions",
            "gpu_hours_lost_to_preemption")  # fmt: skip
    arms = [
        (policy, thresholds, lost, quantum, cohort, gap)
        for policy in args.policies
        for thresholds in (limits if policy == "las" else limits[:1])
        for lost in (args.max_lost_s if by_service else [None])
        for quantum in (args.gittins_quantum if policy in GITTINS else [None])
        for cohort in (args.gittins_cohort_s if policy in GITTINS else [None])
        for gap in (args.gittins_batch_gap_s if policy in GITTINS else [None])
    ]
    for policy, thresholds, lost, quantum, cohort, gap in arms:
        gittins = GittinsConfig(
            min_quantum_gpu_s=quantum or 0.0,
            min_group_samples=args.gittins_min_group,
            max_samples=args.gittins_window,
            cohort_window_s=cohort or 0.0,
            cohort_counts_survivors=args.gittins_survivors,
            batch_gap_s=gap or 0.0,
            batch_weight=args.gittins_batch_weight,
            batch_floor=args.gittins_batch_floor,
        )
        settings = SchedulerSettings(
            policy=policy,
            placer=args.placement,
            las_thresholds_gpu_s=thresholds,
            gittins=gittins,
            preemption=preemption,
            preemption_by_service=by_service,
            max_lost_s=lost,
        )
        know = args.know_durations or policy in ORACLES
        pre = sharing_policy(settings).preemption  # what the settings come to (a preemptive policy implies)
        t0, c0 = time.perf_counter(), time.process_time()
        result = Engine(fabric, jobs_of[know], settings, world).run()
        m = compute_metrics(result, inference_slo_wait_s=world.inference_slo_wait_s)
        knobs = (
            {
                "gittins_quantum_gpu_s": quantum,
                "gittins_min_group": args.gittins_min_group,
                "gittins_window": args.gittins_window,
                "gittins_cohort_s": cohort,
                "gittins_survivors": args.gittins_survivors,
                "gittins_batch_gap_s": gap,
                "gittins_batch_weight": args.gittins_batch_weight,
                "gittins_batch_floor": args.gittins_batch_floor,
            }
            if policy in GITTINS
            else {"las_thresholds_gpu_s": list(thresholds)}
            if policy == "las"
            else {}
        )
        row = {"policy": policy, "gpus": args.gpus, "knows_durations": know, "preemption": preemption,
               "by_service": pre.by_service, "max_lost_s": pre.max_lost_s, **knobs, **{k: m[k] for k in keys},
               "wall_s": round(time.perf_counter() - t0, 3), "cpu_s": round(time.process_time() - c0, 3),
               "load_avg_1m": round(os.getloadavg()[0], 2)}  # fmt: skip
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
