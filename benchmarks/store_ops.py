"""Time the store's hot use cases on SQLite or PostgreSQL: submits (1 and N threads), placements, token checks.

Prints one JSON line: backend, submits_per_s (one thread), submits_per_s_threads, threads, p99_submit_ms,
placements_per_s, authenticate_per_s, the process's CPU per operation of the one-thread phases (``cpu_ms``:
submit, placement, authenticate; on PostgreSQL the server's CPU is not in it) and the 1-min load average. The
database is fresh: a temporary SQLite file, or a throwaway schema in PostgreSQL. Usage:
python benchmarks/store_ops.py --backend sqlite|postgres [--database-url URL] [--jobs 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import tempfile
import threading
import time
from pathlib import Path

from gpupool.domain.jobs import Allocation, JobSpec, TaskAllocation
from gpupool.store import Store

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _run(url: str, jobs: int, threads: int) -> dict[str, object]:
    store = Store(url)
    store.migrate()
    store.create_tenant("bench", actor="bench")
    gpus = 8
    hosts = -(-jobs // gpus)
    for h in range(hosts):
        store.upsert_node(f"h{h}", gpu_model="H100", gpu_count=gpus, actor="bench")

    lat: list[float] = []
    cpu: dict[str, float] = {}
    c0 = time.process_time()
    t0 = time.perf_counter()
    for i in range(jobs):
        s = time.perf_counter()
        store.submit_job(JobSpec(f"a{i}", tenant="bench"), f"ka{i}", actor="bench")
        lat.append(time.perf_counter() - s)
    one = jobs / (time.perf_counter() - t0)
    cpu["submit"] = (time.process_time() - c0) / jobs

    per = jobs // threads

    def worker(w: int) -> None:
        for i in range(per):
            store.submit_job(JobSpec(f"b{w}-{i}", tenant="bench"), f"kb{w}-{i}", actor="bench")

    ts = [threading.Thread(target=worker, args=(w,)) for w in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    many = per * threads / (time.perf_counter() - t0)

    c0 = time.process_time()
    t0 = time.perf_counter()
    for i in range(jobs):
        alloc = Allocation(f"a{i}", (TaskAllocation(f"h{i // gpus}", (i % gpus,)),))
        store.record_allocation(f"a{i}", 1, alloc, actor="bench")
    placements = jobs / (time.perf_counter() - t0)
    cpu["placement"] = (time.process_time() - c0) / jobs

    _, token = store.create_token("bench", actor="bench")
    n_auth = 500
    c0 = time.process_time()
    t0 = time.perf_counter()
    for _ in range(n_auth):
        assert store.authenticate(token) is not None
    auth = n_auth / (time.perf_counter() - t0)
    cpu["authenticate"] = (time.process_time() - c0) / n_auth
    store.close()
    lat.sort()
    return {
        "submits_per_s": round(one, 1),
        "submits_per_s_threads": round(many, 1),
        "threads": threads,
        "p99_submit_ms": round(1000 * lat[int(0.99 * (len(lat) - 1))], 2),
        "placements_per_s": round(placements, 1),
        "authenticate_per_s": round(auth, 1),
        "cpu_ms": {k: round(1000 * v, 3) for k, v in cpu.items()},
        "load_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=8)
    args = ap.parse_args()
    if args.backend == "sqlite":
        with tempfile.TemporaryDirectory() as d:
            url = args.database_url or f"sqlite:///{Path(d) / 'bench.db'}"
            result = _run(url, args.jobs, args.threads)
    else:
        import psycopg
        from sqlalchemy.engine import make_url

        base = make_url(args.database_url or DEFAULT_PG)
        libpq = base.set(drivername="postgresql").render_as_string(hide_password=False)
        schema = f"bench_{secrets.token_hex(4)}"
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        try:
            url = base.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
            result = _run(url, args.jobs, args.threads)
        finally:
            with psycopg.connect(libpq, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")
    print(json.dumps({"backend": args.backend, "jobs": args.jobs, **result}))


if __name__ == "__main__":
    main()
