"""ITP cluster05 (3,629 jobs) on 16 GPUs (2 hosts x 8): avg JCT per policy against the fluid-SRPT bound.

    python benchmarks/sim_itp.py --policies fifo las --preemption

Gavel's simulator on the same trace and cluster: FIFO 279,919 s, LAS 161,022 s; the bound is 66,192 s.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gpupool.sim.fabrics import uniform_fabric
from gpupool.sim.runner import simulate
from gpupool.sim.traces import load_trace


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--trace", type=Path, default=Path("/work/shared/traces/microsoft-itp-elasticflow/raw/cluster05.csv")
    )
    ap.add_argument("--policies", nargs="+", default=["fifo", "las", "sjf"])
    ap.add_argument("--placement", default="topology")
    ap.add_argument("--preemption", action="store_true")
    ap.add_argument("--know-durations", action="store_true")
    args = ap.parse_args(argv)
    trace = load_trace(args.trace, "itp")
    fabric = uniform_fabric(16, 8)
    for policy in args.policies:
        m = simulate(trace, fabric, policy=policy, placement=args.placement, preemption=args.preemption,
                     know_durations=args.know_durations).metrics  # fmt: skip
        keys = ("jobs", "finished", "avg_jct_s", "lb_avg_jct_s", "avg_jct_over_lb", "preemptions", "wall_s")
        print(json.dumps({"policy": policy, "preemption": args.preemption, **{k: m[k] for k in keys}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
