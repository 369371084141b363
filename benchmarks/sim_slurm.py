"""Against Slurm's published numbers: a 200-job trace on 16 hosts x 8 GPUs in 4 leaves of 4 hosts.

    python benchmarks/sim_slurm.py                                   # one trace: one JSON line per arm
    python benchmarks/sim_slurm.py --seeds 1-5 --gaps 60,75,90,120   # sweep: one line per run, then summaries
    python benchmarks/sim_slurm.py --write DIR                       # the seed's trace and fabric, for gpupool sim run:
    gpupool sim run --trace DIR/slurm-1.csv --format itp --fabric DIR/16x8-4leaves.json --know-durations --out OUT

Slurm 22.05 (backfill, topology/tree, near-exact time limits) on its 200-job trace: avg JCT 2,745 s
against a lower bound of 2,027 s (1.35x), and only 22 of its 35 multi-host jobs under one leaf although
all fit one. That trace is not public, so this generates comparable ones (seeded): 200 jobs, 35 of them
multi-host (16, 24 or 32 GPUs: each fits one leaf of 32 GPUs), the rest 1, 2, 4 or 8 GPUs; Poisson
arrivals (mean gap ``--gap``); lognormal durations scaled (by bisection) so that the trace's lower bound on
avg JCT is ``--target-bound`` (2,027 s, Slurm's). The load decides the ratio to the bound and Slurm's report
does not give it, so ``--gaps`` sweeps it; the gap whose Slurm-like arm lands near 1.35x is "the same kind".

Every arm gets the same information Slurm had: a time limit per job, the runtime times (1 + u), u uniform
in [0, ``--noise``], rounded up to whole minutes (Slurm's unit). A limit is never below the runtime, so no
job is killed at its limit and the runtime is what the world runs. Arms:

- ``slurm-like`` arms: fifo + EASY backfill (limits as estimates), topology placer best effort (Slurm's
  topology/tree without ``--switches``), with every multi-host job made to require one leaf (Slurm's
  ``--switches=1`` without a give-up time), and the same with conservative backfill (a reservation for each
  blocked job, which is what Slurm's backfill does up to ``bf_max_job_test``).
- ``default``: gpupool's default settings (``SchedulerSettings()``, what ``gpupool sim run`` and the server
  run without a settings file), no topology asked: the runs that ``gpupool sim run`` makes of ``--write``'s files
  (there with the exact runtimes, ``--know-durations``, as the trace formats carry no time limit).
- ``gpupool`` arms: ``sjf`` (smallest estimated GPU-seconds first: limit x GPUs) with EASY or conservative
  backfill, or with none (greedy: any job that fits starts, no reservations), multi-host jobs leaf-required;
  ``hrrn+easy+leaf``: highest response ratio next ((wait + limit) / limit) with EASY backfill.

Each run prints one JSON line; with several seeds or gaps a summary line per (gap, arm) follows: means over
the seeds, the worst seed's counts, on how many seeds a gpupool arm beats each slurm-like arm, and the same
on the traces "of Slurm's kind" (those whose fifo+easy lands within 1.354 +- 0.07 of its bound, as Slurm
did on its own trace). The default gap, 105 s, is where fifo+easy averages 1.33x over seeds 1-20.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpupool.domain.jobs import TopologyMode
from gpupool.fabric import jsonio
from gpupool.fabric.fabric import Fabric
from gpupool.fabric.generators import leaf_spine
from gpupool.scheduler import BackfillMode
from gpupool.scheduler.settings import SchedulerSettings
from gpupool.sim.bounds import lower_bounds
from gpupool.sim.engine import Engine
from gpupool.sim.metrics import compute_metrics
from gpupool.sim.runner import sim_jobs
from gpupool.sim.traces.records import Trace, TraceJob
from gpupool.sim.world import WorldConfig

SLURM = {"avg_jct_s": 2745.0, "lb_avg_jct_s": 2027.0, "multi_host_jobs": 35, "multi_host_jobs_in_one_leaf": 22}
REQ = TopologyMode.REQUIRED


@dataclass(frozen=True, slots=True)
class Arm:
    name: str
    policy: str
    backfill: BackfillMode
    leaf_mode: TopologyMode | None
    side: str  # "slurm-like" or "gpupool"
    placer: str = "topology"
    by_service: bool = False  # Tiresias: preemption by attained service (LAS queues), estimates unused
    defaults: bool = False  # gpupool's default settings (``SchedulerSettings()``), as ``gpupool sim run`` has them


ARMS = (
    Arm("fifo+easy", "fifo", BackfillMode.EASY, None, "slurm-like"),
    Arm("fifo+easy+leaf", "fifo", BackfillMode.EASY, REQ, "slurm-like"),
    Arm("fifo+conservative+leaf", "fifo", BackfillMode.CONSERVATIVE, REQ, "slurm-like"),
    Arm("sjf+easy+leaf", "sjf", BackfillMode.EASY, REQ, "gpupool"),
    Arm("sjf+conservative+leaf", "sjf", BackfillMode.CONSERVATIVE, REQ, "gpupool"),
    Arm("sjf+greedy+leaf", "sjf", BackfillMode.NONE, REQ, "gpupool"),
    Arm("sjf+easy+leaf/frag", "sjf", BackfillMode.EASY, REQ, "gpupool", placer="frag"),
    Arm("hrrn+easy+leaf", "hrrn", BackfillMode.EASY, REQ, "gpupool"),
    Arm("las+preempt+leaf", "las", BackfillMode.NONE, REQ, "gpupool", by_service=True),
    Arm("default", "", BackfillMode.NONE, None, "gpupool", defaults=True),
)
ARM_BY_NAME = {a.name: a for a in ARMS}
DEFAULT_ARMS = ("fifo+easy", "fifo+easy+leaf", "fifo+conservative+leaf", "sjf+easy+leaf", "sjf+greedy+leaf", "default")


def make_trace(seed: int, jobs: int, multi: int, target_lb_s: float, gpus: int, gap_s: float) -> Trace:
    rng = np.random.default_rng(seed)
    sizes = np.concatenate(
        [rng.choice([16, 24, 32], size=multi), rng.choice([1, 2, 4, 8], size=jobs - multi, p=[0.4, 0.2, 0.2, 0.2])]
    )
    rng.shuffle(sizes)
    submit = np.cumsum(rng.exponential(gap_s, size=jobs))
    submit -= submit[0]
    base = rng.lognormal(0.0, 0.8, size=jobs)

    def bound(k: float) -> float:
        return lower_bounds(submit.tolist(), (base * k).tolist(), sizes.astype(float).tolist(), gpus).avg_jct_s

    lo, hi = 1.0, 100_000.0
    for _ in range(60):  # the bound grows with the scale: bisect it onto the target
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if bound(mid) < target_lb_s else (lo, mid)
    dur = np.round(base * lo, 1)
    out = tuple(TraceJob(f"s{i:03d}", float(submit[i]), float(max(dur[i], 1.0)), int(sizes[i])) for i in range(jobs))
    return Trace("slurm-like", "synthetic", out)


def write_trace(trace: Trace, fabric: Fabric, folder: Path, seed: int) -> None:
    """The trace in ITP's CSV (``job_id,submission_time,duration,num_gpu``) and the fabric as JSON."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [f"{j.job_id},{j.submit_s!r},{j.duration_s!r},{j.gpus}" for j in trace.jobs]
    (folder / f"slurm-{seed}.csv").write_text("job_id,submission_time,duration,num_gpu\n" + "\n".join(rows) + "\n")
    jsonio.save(fabric, folder / f"{fabric.name}.json")


def time_limits(trace: Trace, seed: int, noise: float, round_s: float) -> dict[str, float]:
    """Each job's time limit: runtime x (1 + u), u ~ U[0, noise], rounded up to a multiple of ``round_s``.

    Never below the runtime, so nothing is killed at its limit. Drawn from its own stream (seed + 10,000),
    so the trace is the same whatever the noise."""
    rng = np.random.default_rng(seed + 10_000)
    u = rng.uniform(0.0, noise, size=len(trace.jobs)) if noise > 0 else np.zeros(len(trace.jobs))
    out: dict[str, float] = {}
    for j, x in zip(trace.jobs, u, strict=True):
        raw = j.duration_s * (1.0 + float(x))
        out[j.job_id] = math.ceil(raw / round_s) * round_s if round_s > 0 else raw
    return out


def run_arm(trace: Trace, fabric: Fabric, arm: Arm, limits: dict[str, float]) -> dict[str, Any]:
    """One run of ``arm``: the simulator's own path (``gpupool.sim.runner.simulate``) with the time limits
    as the jobs' estimates instead of the exact durations."""
    jobs, skipped = sim_jobs(trace, fabric, know_durations=True, preemptible=arm.by_service, leaf_mode=arm.leaf_mode)
    assert skipped == 0
    jobs = [
        dataclasses.replace(j, spec=dataclasses.replace(j.spec, estimated_runtime_s=limits[j.spec.job_id]))
        for j in jobs
    ]
    world = WorldConfig()
    settings = SchedulerSettings() if arm.defaults else SchedulerSettings(
        policy=arm.policy, placer=arm.placer, backfill=arm.backfill, preemption=arm.by_service,
        preemption_by_service=arm.by_service, topology_wait_s=0.0)  # fmt: skip
    result = Engine(fabric, jobs, settings, world).run()
    m = compute_metrics(result, inference_slo_wait_s=world.inference_slo_wait_s)
    waits = [r.start_s - r.submit_s for r in result.records if r.start_s is not None]
    m["max_queue_s"] = round(max(waits), 3) if waits else None
    return m


KEYS = (
    "jobs",
    "finished",
    "avg_jct_s",
    "lb_avg_jct_s",
    "avg_jct_over_lb",
    "p99_jct_s",
    "avg_queue_s",
    "max_queue_s",
    "multi_host_jobs",
    "multi_host_jobs_in_one_leaf",
    "gpu_utilization",
    "makespan_s",
    "avg_runtime_factor",
    "preemptions",
)


def parse_seeds(text: str) -> list[int]:
    """``1-5`` or ``1,3,7`` (or a mix: ``1-3,9``)."""
    out: list[int] = []
    for part in text.split(","):
        a, sep, b = part.partition("-")
        out.extend(range(int(a), int(b) + 1) if sep else [int(a)])
    return out


SLURM_RATIO = SLURM["avg_jct_s"] / SLURM["lb_avg_jct_s"]  # 1.354
SLURM_KIND_TOL = 0.07


def _slurm_kind(
    arm: str, seeds: Sequence[int], by_seed: dict[tuple[int, str], dict[str, Any]], refs: Sequence[str]
) -> dict[str, Any]:
    """On the traces "of Slurm's kind" (fifo+easy within 1.354 +- 0.07 of its bound, as Slurm was on its own):
    how many there are, on how many ``arm`` beats every slurm-like reference, and is under Slurm's 2,745 s."""
    kind = [s for s in seeds if abs(by_seed[(s, "fifo+easy")]["avg_jct_over_lb"] - SLURM_RATIO) <= SLURM_KIND_TOL]
    jct = {s: by_seed[(s, arm)]["avg_jct_s"] for s in kind}
    return {
        "slurm_kind_seeds": kind,
        "slurm_kind_beats_slurm_like": sum(1 for s in kind if all(jct[s] < by_seed[(s, r)]["avg_jct_s"] for r in refs)),
        "slurm_kind_under_2745_s": sum(1 for s in kind if jct[s] < SLURM["avg_jct_s"]),
    }


def summarise(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per (gap, arm): means over seeds, worst seed's leaf count, and wins over the slurm-like arms."""
    out: list[dict[str, Any]] = []
    gaps = sorted({r["gap_s"] for r in rows})
    for gap in gaps:
        at_gap = [r for r in rows if r["gap_s"] == gap]
        by_seed = {(r["seed"], r["arm"]): r for r in at_gap}
        seeds = sorted({r["seed"] for r in at_gap})
        for arm in dict.fromkeys(r["arm"] for r in at_gap):
            rs = [by_seed[(s, arm)] for s in seeds]
            line: dict[str, Any] = {
                "summary": True,
                "gap_s": gap,
                "arm": arm,
                "side": rs[0]["side"],
                "seeds": len(rs),
                "mean_avg_jct_s": round(float(np.mean([r["avg_jct_s"] for r in rs])), 1),
                "mean_lb_avg_jct_s": round(float(np.mean([r["lb_avg_jct_s"] for r in rs])), 1),
                "mean_avg_jct_over_lb": round(float(np.mean([r["avg_jct_over_lb"] for r in rs])), 4),
                "min_avg_jct_over_lb": min(r["avg_jct_over_lb"] for r in rs),
                "max_avg_jct_over_lb": max(r["avg_jct_over_lb"] for r in rs),
                "mean_p99_jct_s": round(float(np.mean([r["p99_jct_s"] for r in rs])), 1),
                "worst_max_queue_s": max(r["max_queue_s"] for r in rs),
                "multi_host_in_one_leaf_worst": min(r["multi_host_jobs_in_one_leaf"] for r in rs),
                "multi_host_jobs": rs[0]["multi_host_jobs"],
            }
            if rs[0]["side"] == "gpupool":
                refs = [ref for ref in ("fifo+easy+leaf", "fifo+easy") if (seeds[0], ref) in by_seed]
                for ref in refs:
                    line[f"beats_{ref}_seeds"] = sum(
                        1 for s in seeds if by_seed[(s, arm)]["avg_jct_s"] < by_seed[(s, ref)]["avg_jct_s"]
                    )
                if "fifo+easy" in refs:
                    line |= _slurm_kind(arm, seeds, by_seed, refs)
            out.append(line)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seeds", type=str, default=None, help="sweep seeds: '1-5' or '1,3,7' (overrides --seed)")
    ap.add_argument("--target-bound", type=float, default=SLURM["lb_avg_jct_s"])
    ap.add_argument("--gap", type=float, default=105.0, help="mean seconds between arrivals (105: Slurm's 1.35x)")
    ap.add_argument("--gaps", type=str, default=None, help="sweep gaps: '60,90,120' (overrides --gap)")
    ap.add_argument("--noise", type=float, default=0.1, help="time limit = runtime x (1 + U[0, noise]) ...")
    ap.add_argument("--round-s", type=float, default=60.0, help="... rounded up to a multiple of this")
    ap.add_argument("--write", type=Path, default=None, help="write each seed's trace (ITP CSV) and the fabric here")
    ap.add_argument(
        "--arms", type=str, default=",".join(DEFAULT_ARMS), help=f"comma-separated, of {', '.join(ARM_BY_NAME)}"
    )
    args = ap.parse_args(argv)
    seeds = parse_seeds(args.seeds) if args.seeds else [args.seed]
    gaps = [float(g) for g in args.gaps.split(",")] if args.gaps else [args.gap]
    arms = [ARM_BY_NAME[a] for a in args.arms.split(",")]
    fabric = leaf_spine(4, 2, 4, 8, name="16x8-4leaves")
    rows: list[dict[str, Any]] = []
    for gap in gaps:
        for seed in seeds:
            trace = make_trace(seed, 200, 35, args.target_bound, fabric.gpu_count, gap)
            limits = time_limits(trace, seed, args.noise, args.round_s)
            if args.write is not None:
                write_trace(trace, fabric, args.write, seed)
            for arm in arms:
                m = run_arm(trace, fabric, arm, limits)
                row = {"arm": arm.name, "side": arm.side, "seed": seed, "gap_s": gap, "noise": args.noise}
                row |= {k: m[k] for k in KEYS}
                row["wall_s"] = m["wall_s"]
                rows.append(row)
                print(json.dumps(row), flush=True)
    if len(seeds) > 1 or len(gaps) > 1:
        for line in summarise(rows):
            print(json.dumps(line), flush=True)
    else:
        print(json.dumps({"slurm": SLURM}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
