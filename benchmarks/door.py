"""The door under attack: a real ``gpupool server`` process (SQLite), started as docs/operations.md says and from
a login shell's soft limit of 1,024 open files, and what a legitimate client sees meanwhile. One JSON line:

- ``idle``: ``--held`` connections (half send nothing, half stop inside their headers) held open while
  ``--requests`` legitimate GETs are made, each on a new connection: the share answered within 2 s, p50, p99;
- ``body``: a 50 MB unauthenticated body (Content-Length, then chunked) to ``POST /v1/jobs``: the statuses,
  the bytes the client got to send before the answer, the server's RSS growth over both;
- ``flood``: a good client's p50/p99 alone and beside ``--flood-threads`` threads sending wrong tokens as fast
  as they are answered; the flood's answers by status;
- ``logs``: 100 log requests at once for a node whose log server never answers: the answers by status and
  the slowest, and a legitimate client's and that node's heartbeats' p50/p99 meanwhile;
- the server's CPU seconds, the wall time and the 1-minute load average (the machine is shared).

    .venv/bin/python benchmarks/door.py                 # about a minute
    .venv/bin/python benchmarks/door.py --held 2000     # more connections (the test process raises its own limit)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from door_probe import Flood, big_body, held_connections, p, raise_nofile, rss_mib, silent_agent_logs, timed_requests
from procs import ServerProc, cpu_s, until


def summary(took: list[float]) -> dict[str, float]:
    return {
        "within_2s": round(sum(t <= 2.0 for t in took) / len(took), 3),
        "p50_s": round(p(took, 0.5), 4),
        "p99_s": round(p(took, 0.99), 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--held", type=int, default=1100)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--flood-threads", type=int, default=4)
    ap.add_argument("--flood-s", type=float, default=10.0)
    args = ap.parse_args()
    raise_nofile(2 * args.held + 512)
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {"GPUPOOL_ACCESS_LOG": "false", "GPUPOOL_HEADER_TIMEOUT_S": "60"}  # held through the measurement
        srv = ServerProc(f"sqlite:///{root / 'door.db'}", root, root / "server.log", env, soft_nofile=1024)
        try:
            token = srv.tenant_token("bench")
            cpu0 = cpu_s(srv.proc.pid)
            with held_connections(srv.port, idle=args.held // 2, slow=args.held - args.held // 2):
                idle = {"held": args.held, **summary(timed_requests(srv.base, token, args.requests))}
            rss0 = rss_mib(srv.proc.pid)
            results = [big_body(srv.port, "/v1/jobs", 50_000_000, chunked=c) for c in (False, True)]
            body = {
                "statuses": [s for s, _ in results],
                "sent_before_answer_mib": [round(n / (1 << 20), 1) for _, n in results],
                "rss_growth_mib": round(rss_mib(srv.proc.pid) - rss0, 1),
            }
            alone = timed_requests(srv.base, token, args.requests)
            with Flood(srv.base, threads=args.flood_threads) as flood:
                until(lambda: len(flood.statuses) >= 20, 30, "the flood under way")
                beside: list[float] = []
                until_s = time.monotonic() + args.flood_s
                while time.monotonic() < until_s:
                    beside += timed_requests(srv.base, token, 5)
            counts = Counter(flood.statuses)
            flooded = {
                "alone": summary(alone),
                "beside_flood": summary(beside),
                "good_failed": sum(t == float("inf") for t in beside),
                "flood_answers": {str(k): v for k, v in sorted(counts.items())},
                "flood_per_s": round(len(flood.statuses) / args.flood_s, 1),
            }
            silent = silent_agent_logs(srv, token, 100)
            logs = {
                "answers": {str(k): v for k, v in sorted(Counter(c for c, _ in silent.answers).items())},
                "slowest_s": round(max(s for _, s in silent.answers), 2),
                "api": summary(silent.api),
                "heartbeats": summary(silent.beats),
            }
            server_cpu = round(cpu_s(srv.proc.pid) - cpu0, 2)
        finally:
            srv.stop()
    out = {
        "benchmark": "door",
        "idle": idle,
        "body": body,
        "flood": flooded,
        "logs": logs,
        "server_cpu_s": server_cpu,
        "wall_s": round(time.monotonic() - start, 1),
        "load_1m": os.getloadavg()[0],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
