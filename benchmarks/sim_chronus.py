"""Chronus MIX1 deadlines: strict-deadline met ratio per policy. Prints one JSON line per arm.

    python benchmarks/sim_chronus.py --hours 2 --gpus 512
    python benchmarks/sim_chronus.py --hours 6 --gpus 64 --arms edf     # the whole trace, a long queue
    python benchmarks/sim_chronus.py --gpus 960 --arms default --jobs-out /tmp/cj   # + each job's outcome

``--jobs-out DIR`` writes each arm's jobs (``DIR/<arm>[+preemptible].csv``: job id, kind, start, end, deadline,
outcome met / missed / refused) for ``benchmarks/chronus_join.py``, which sets them beside the per-job file
of Chronus' own artifact.

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
import csv
import json
import os
import time
from dataclasses import replace
from pathlib import Path

from gpupool.scheduler import BackfillMode
from gpupool.scheduler.settings import SchedulerSettings
from gpupool.sim.engine import SimResult
from gpupool.sim.fabrics import uniform_fabric
from gpupool.sim.metrics import deadline_met
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


def _t(x: float | None) -> str:
    return "" if x is None else f"{x:.3f}"


def write_jobs(result: SimResult, path: Path) -> None:
    """One row per job: a job with a deadline is met, missed (ended late or never ended) or refused (never
    started: deadline admission kept it waiting); a best-effort job has no outcome."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("job_id", "kind", "gpus", "submit_s", "start_s", "end_s", "deadline_s", "duration_s", "runtime_factor", "preemptions", "outcome"))  # fmt: skip
        for r in result.records:
            if r.deadline_s is None:
                outcome = ""
            elif r.start_s is None:
                outcome = "refused"
            else:
                outcome = "met" if deadline_met(r) else "missed"
            w.writerow((r.job_id, r.deadline_kind.value, f"{r.gpus:g}", _t(r.submit_s), _t(r.start_s), _t(r.end_s),
                        _t(r.deadline_s), _t(r.duration_s), f"{r.slowdown_factor:.4f}", r.preemptions, outcome))  # fmt: skip


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
    ap.add_argument("--jobs-out", type=Path, help="write each arm's per-job outcomes to DIR/<arm>[+preemptible].csv")
    args = ap.parse_args(argv)
    if args.jobs_out is not None:
        args.jobs_out.mkdir(parents=True, exist_ok=True)
    full = load_trace(args.trace, "chronus")
    trace = replace(full, jobs=tuple(j for j in full.jobs if j.submit_s < args.hours * 3600.0))
    fabric = uniform_fabric(args.gpus, 8)
    for arm in args.arms:
        cpu = time.process_time()
        out = simulate(trace, fabric, ARMS[arm], know_durations=True, preemptible=args.preemptible)
        m = out.metrics
        refused = sum(1 for r in out.result.records if r.start_s is None)
        cpu = time.process_time() - cpu
        if args.jobs_out is not None:
            write_jobs(out.result, args.jobs_out / f"{arm}{'+preemptible' if args.preemptible else ''}.csv")
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
