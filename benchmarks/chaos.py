"""The long chaos run: ``--faults`` faults drawn by ``--seed`` (kill -9 of a server replica or of an agent, the
leader paused 25 s, every connection through the proxy dropped, a half-exited gang across a restart of both
replicas) against two server replicas on PostgreSQL behind a round-robin TCP proxy and four emulated agents,
with the invariants of ``tests/chaos_harness.py`` checked every half second.

One JSON line: faults injected (by kind), violations (target 0; each is in chaos.log with its time), leader
takeovers and their p50/p99/max (target <= 10 s, a paused leader included), jobs and gangs by final state
(gang completion after faults), how long the queue took to drain after the last fault, wall time and the
1-minute load average. The run's folder (chaos.log: every fault and violation, the agents' state) is kept
when there was a violation, and its path printed to stderr.

    .venv/bin/python benchmarks/chaos.py --faults 200          # about 40 minutes on a quiet 2-core machine
    .venv/bin/python benchmarks/chaos.py --faults 10 --seed 3  # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from chaos_harness import run_chaos
from procs import pg_schema


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--faults", type=int, default=200)
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--kinds", default="", help="comma-separated kinds in this order instead of drawn ones")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    began = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="gpupool-chaos-"))
    gen = pg_schema()
    url = next(gen)
    try:
        kinds = [k for k in args.kinds.split(",") if k] or None
        report = run_chaos(root, url, args.seed, kinds=kinds, faults=0 if kinds else args.faults)
    finally:
        next(gen, None)
    out = {"benchmark": "chaos", **report.summary()}
    out["run_wall_s"] = round(time.monotonic() - began, 1)
    out["load_avg_1m"] = round(max(load0, os.getloadavg()[0]), 2)
    print(json.dumps(out))
    if report.violations:
        print(f"violations: see {root / 'chaos.log'}", file=sys.stderr)
        for v in report.violations[:20]:
            print(f"  {v.at_s:8.2f} {v.invariant}: {v.detail}", file=sys.stderr)
    else:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
