"""What checking every request's token against the store costs: a real ``gpupool server`` process, one client
sending ``--requests`` sequential ``GET /v1/pools`` (a cheap authenticated route) with a stored tenant token
(one primary-key read and a SHA-256 per request, on a worker thread: nothing is cached, so a revoked token is
refused on its next request) and as many with the bootstrap admin token (compared in memory, no store read).
The difference per request is the price of immediate revocation.

One JSON line: per token kind, the client's p50/p99 latency (ms) and the server's CPU per request (ms);
wall, and the 1-minute load average before and after.

    .venv/bin/python benchmarks/token_check.py [--requests 2000] [--backend sqlite|postgres]

PostgreSQL: a throwaway schema of the test database (``procs.pg_schema``), dropped after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from procs import ADMIN, ServerProc, cpu_s, pg_schema


def _run(base: str, pid: int, token: str, n: int) -> dict[str, float]:
    lat: list[float] = []
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=10) as c:
        for _ in range(50):  # warm: connections, imports, the first reads
            c.get("/v1/pools").raise_for_status()
        cpu0 = cpu_s(pid)
        for _ in range(n):
            t0 = time.perf_counter()
            r = c.get("/v1/pools")
            lat.append(time.perf_counter() - t0)
            assert r.status_code == 200, r.text
        cpu = cpu_s(pid) - cpu0
    lat.sort()
    return {
        "p50_ms": round(lat[len(lat) // 2] * 1000, 3),
        "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 3),
        "server_cpu_per_request_ms": round(cpu / n * 1000, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        if args.backend == "postgres":
            url = stack.enter_context(contextlib.contextmanager(pg_schema)())
        else:
            url = f"sqlite:///{Path(tmp) / 'gpupool.db'}"
        load0, t0 = os.getloadavg()[0], time.monotonic()
        srv = ServerProc(url, Path(tmp), Path(tmp) / "server.log", env={"GPUPOOL_ACCESS_LOG": "false"})
        try:
            token = srv.tenant_token("bench")
            out = {
                "backend": url.split(":", 1)[0],
                "requests": args.requests,
                "stored_token": _run(srv.base, srv.proc.pid, token, args.requests),
                "bootstrap_token": _run(srv.base, srv.proc.pid, ADMIN, args.requests),
            }
        finally:
            srv.stop()
        out |= {"wall_s": round(time.monotonic() - t0, 1), "load_1m": [round(load0, 1), round(os.getloadavg()[0], 1)]}
        print(json.dumps(out))


if __name__ == "__main__":
    main()
