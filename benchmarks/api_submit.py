"""Submit throughput of the REST API: a server of its own on loopback (scheduling loop running, 8 registered
nodes), concurrent clients submitting jobs, one JSON line: backend, submits, submits_per_s, p99_ms.

The clients are ``--procs`` processes, each an asyncio loop with ``--clients`` concurrent submitters on one
keep-alive ``httpx.AsyncClient``: threads of a synchronous client in one process spent most of a core on the
GIL and were measuring themselves. Server and clients share the machine (``cores`` in the output).

    python benchmarks/api_submit.py --backend sqlite
    python benchmarks/api_submit.py --backend postgres --database-url postgresql+psycopg://postgres@127.0.0.1/test
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psycopg
from sqlalchemy.engine import make_url

ADMIN = secrets.token_urlsafe(24)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (Linux /proc): a measure that other load on the box
    does not inflate, unlike wall-clock throughput."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client_process(
    base: str,
    token: str,
    clients: int,
    start_at: float,
    seconds: float,
    results: multiprocessing.Queue[list[float] | str],
) -> None:
    """One client process: ``clients`` coroutines submitting in a loop on one keep-alive connection pool."""
    try:
        latencies = asyncio.run(_submitters(base, token, clients, start_at, seconds))
        latencies.append(-cpu_s(os.getpid()))  # the last entry: this process's CPU seconds, negated
        results.put(latencies)
    except BaseException as e:  # report instead of leaving the parent waiting on the queue
        results.put(f"client process failed: {e!r}")


async def _submitters(base: str, token: str, clients: int, start_at: float, seconds: float) -> list[float]:
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30, limits=limits) as c:
        await asyncio.sleep(max(0.0, start_at - time.time()))
        end = time.perf_counter() + seconds

        async def one(i: int) -> None:
            n = i
            while time.perf_counter() < end:
                t0 = time.perf_counter()
                r = await c.post("/v1/jobs", json={"command": ["true"], "gpus_per_task": 1 + n % 4})
                if r.status_code != 201:
                    raise RuntimeError(f"submit failed: {r.status_code} {r.text}")
                latencies.append(time.perf_counter() - t0)
                n += 1

        await asyncio.gather(*(one(i) for i in range(clients)))
    return latencies


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--backend", choices=["sqlite", "postgres"], required=True)
    p.add_argument("--database-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    p.add_argument("--clients", type=int, default=16, help="concurrent submitters per client process")
    p.add_argument("--procs", type=int, default=2, help="client processes")
    p.add_argument("--seconds", type=float, default=10.0)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpupool-bench-"))
    schema = None
    if args.backend == "sqlite":
        url = f"sqlite:///{tmp / 'gpupool.db'}"
    else:
        schema = f"bench_{secrets.token_hex(4)}"
        libpq = make_url(args.database_url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        url = (
            make_url(args.database_url)
            .update_query_dict({"options": f"-csearch_path={schema}"})
            .render_as_string(hide_password=False)
        )
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "GPUPOOL_DATABASE_URL": url,
        "GPUPOOL_DATA_DIR": str(tmp),
        "GPUPOOL_ADMIN_TOKEN": ADMIN,
        "GPUPOOL_PORT": str(port),
        "GPUPOOL_LOG_LEVEL": "warning",
        "GPUPOOL_SCHEDULE_PERIOD_S": "1.0",
        "GPUPOOL_SCHEDULE_MIN_GAP_S": "0.25",
    }
    proc = subprocess.Popen([sys.executable, "-m", "gpupool", "server"], env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("the server did not start")
            threading.Event().wait(0.1)
        adm = {"Authorization": f"Bearer {ADMIN}"}
        httpx.post(f"{base}/v1/tenants", json={"name": "bench"}, headers=adm).raise_for_status()
        token = httpx.post(f"{base}/v1/tokens", json={"tenant": "bench"}, headers=adm).json()["token"]
        for h in range(8):
            join = httpx.post(f"{base}/v1/join-tokens", json={}, headers=adm).json()["token"]
            gpus = [{"index": i, "model": "H100", "memory_mib": 81559} for i in range(8)]
            httpx.post(
                f"{base}/v1/agents/register",
                json={"host": f"gpu-{h:02d}", "gpus": gpus},
                headers={"Authorization": f"Bearer {join}"},
            ).raise_for_status()
        ctx = multiprocessing.get_context("spawn")
        results: multiprocessing.Queue[list[float] | str] = ctx.Queue()
        start_at = time.time() + 1.0  # every process starts submitting at once, after its imports
        procs = [
            ctx.Process(target=client_process, args=(base, token, args.clients, start_at, args.seconds, results))
            for _ in range(args.procs)
        ]
        for cp in procs:
            cp.start()
        threading.Event().wait(max(0.0, start_at - time.time()))
        server_cpu0 = cpu_s(proc.pid)
        gathered = [results.get(timeout=args.seconds + 120) for _ in procs]
        for cp in procs:
            cp.join(30)
        failures = [g for g in gathered if isinstance(g, str)]
        if failures:
            raise SystemExit(failures[0])
        server_cpu = cpu_s(proc.pid) - server_cpu0
        latencies = [g[:-1] for g in gathered if isinstance(g, list)]
        client_cpu = sum(-g[-1] for g in gathered if isinstance(g, list))
        elapsed = args.seconds
        metrics = httpx.get(f"{base}/metrics").text
        series = {
            line.split()[0]: float(line.split()[-1]) for line in metrics.splitlines() if line[:1] not in ("#", "")
        }
        placements = series.get("gpupool_placements_total", 0.0)
        cycles = series.get("gpupool_schedule_cycle_seconds_count", 0.0)
        cycle_s = series.get("gpupool_schedule_cycle_seconds_sum", 0.0)
    finally:
        proc.terminate()
        proc.wait(30)
        if schema is not None:
            with psycopg.connect(libpq, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")
    lat = sorted(x for per in latencies for x in per)
    out = {
        "backend": args.backend,
        "submits": len(lat),
        "submits_per_s": round(len(lat) / elapsed, 1),
        "p99_ms": round(1000 * lat[int(0.99 * (len(lat) - 1))], 2) if lat else None,
        "clients": args.clients * args.procs,
        "client_procs": args.procs,
        "cores": os.cpu_count(),
        "seconds": round(elapsed, 2),
        "placements": placements,
        "server_cpu_ms_per_submit": round(1000 * server_cpu / max(1, len(lat)), 3),
        "client_cpu_ms_per_submit": round(1000 * client_cpu / max(1, len(lat)), 3),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "cycles": cycles,
        "cycle_ms_mean": round(1000 * cycle_s / cycles, 1) if cycles else None,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
