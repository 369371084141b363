"""Chronus MIX1 deadlines: strict-deadline met ratio per policy. Prints one JSON line per arm.

    python benchmarks/sim_chronus.py --hours 2 --gpus 512
    python benchmarks/sim_chronus.py --hours 6 --gpus 64 --arms edf     # the whole trace, a long queue

The trace (Philly-derived, 30,940 jobs over 5.6 h, strict and best-effort) is cut to the jobs submitted in
the first ``--hours`` and run on a leaf/spine cluster of ``--gpus`` H100s (8 per host). Every arm gives
the scheduler the trace durations as estimates (Chronus profiles each job before admitting it; deadline
admission without an estimate would assume the one-hour default and refuse almost every job).
Arms: default (gpupool's default settings), fifo, priority, edf (no sharing rules); edf+admission and slack+admission (deadline admission: a
strict job that cannot finish by its deadline even if started now is refused, and with ``slack`` a job's
priority rises as its slack shrinks). Jobs refused or still waiting count as missed.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path

from gpupool.scheduler import BackfillMode
from gpupool.scheduler.settings import SchedulerSettings
from gpupool.sim.fabrics import uniform_fabric
from gpupool.sim.runner import simulate
from gpupool.sim.traces import load_trace

MIX1 = Path("/work/shared/traces/philly-chronus-deadline/trace_job_Philly_MIX1.csv")
# The named arms keep what they measured before issue 20 changed the defaults (no backfill, admission only
# where named); ``default`` is whatever the defaults are.
_PLAIN = SchedulerSettings(backfill=BackfillMode.NONE, deadline_admission=False)
ARMS = {
    "default": SchedulerSettings(),  # what ``gpupool sim run`` and the server run without a settings file
    "default+admission": SchedulerSettings(deadline_admission=True),
    "fifo": replace(_PLAIN, policy="fifo"),
    "priority": replace(_PLAIN, policy="priority"),
    "edf": replace(_PLAIN, policy="edf"),
    "edf+admission": replace(_PLAIN, policy="edf", deadline_admission=True),
    "slack+admission": replace(_PLAIN, policy="slack", deadline_admission=True),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=MIX1)
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--gpus", type=int, default=512)
    ap.add_argument("--arms", nargs="+", default=list(ARMS))
    ap.add_argument(
        "--preemptible",
        action="store_true",
        help="submit every job preemptible (Chronus preempts its jobs at lease ends; a trace does not say)",
    )
    args = ap.parse_args(argv)
    full = load_trace(args.trace, "chronus")
    trace = replace(full, jobs=tuple(j for j in full.jobs if j.submit_s < args.hours * 3600.0))
    fabric = uniform_fabric(args.gpus, 8)
    for arm in args.arms:
        cpu = time.process_time()
        out = simulate(trace, fabric, ARMS[arm], know_durations=True, preemptible=args.preemptible)
        m = out.metrics
        refused = sum(1 for r in out.result.records if r.start_s is None)
        cpu = time.process_time() - cpu
        print(json.dumps({
            "arm": arm, "preemptible": args.preemptible, "gpus": fabric.gpu_count, "hours": args.hours, "jobs": m["jobs"], "finished": m["finished"],
            "strict_met_ratio": m["deadline_met_ratio_by_class"].get("strict"), "deadline_jobs": m["deadline_jobs"],
            "never_started": refused, "preemptions": m["preemptions"],
            "avg_jct_s": m["avg_jct_s"], "lb_avg_jct_s": m["lb_avg_jct_s"], "gpu_utilization": m["gpu_utilization"],
            "wall_s": m["wall_s"], "cpu_s": round(cpu, 2), "load_avg_1m": round(os.getloadavg()[0], 2),
        }), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
