"""Time one page of the jobs list (``Store.job_page``, what ``GET /v1/jobs`` runs) on SQLite or PostgreSQL.

A fresh database gets ``--jobs`` jobs (default 5,000; 4% active, the rest finished, two tenants, names to
search), stored 5,000 a transaction. Then each query below is asked ``--repeat`` times for a page of
``--limit`` jobs (default 100): the default order (active first, newest first), every other sort, a tenant's
active jobs, a name search, a deep page (offset past the middle). Prints ONE JSON line: the median wall
milliseconds per query, the CPU milliseconds of the whole run per page, and the 1-minute load average.

Usage: python benchmarks/job_list.py --backend sqlite|postgres [--database-url URL] [--jobs 5000] [--limit 100]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from gpupool.domain.jobs import JobSpec
from gpupool.domain.states import JobState
from gpupool.store import ServerOps, Store
from gpupool.store.joblist import JobQuery, JobSort
from gpupool.store.rows import JobRow
from gpupool.store.server_ops import Submission

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@contextmanager
def database(backend: str, url: str | None) -> Iterator[str]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as d:
            yield url or f"sqlite:///{Path(d) / 'bench.db'}"
        return
    base = make_url(url or DEFAULT_PG)
    libpq = base.set(drivername="postgresql").render_as_string(hide_password=False)
    schema = f"bench_{secrets.token_hex(4)}"
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield base.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def fill(store: Store, jobs: int) -> None:
    for t in ("alpha", "beta"):
        store.create_tenant(t, actor="bench")
    specs = [
        JobSpec(f"j{i:07d}", tenant=("alpha", "beta")[i % 2], name=f"run-{i}-{('train', 'eval', 'serve')[i % 3]}",
                submit_time_s=float(i), gpus_per_task=1 + i % 8)
        for i in range(jobs)
    ]  # fmt: skip
    ops = ServerOps(store)
    for k in range(0, jobs, 5000):  # 5,000 a transaction: a larger one idles past PostgreSQL's timeout
        ops.submit_many([Submission(s, ("true",), {}, None, "bench") for s in specs[k : k + 5000]])
    with store._engine.begin() as conn:  # every 25th stays pending (active), the others finished
        done = [s.job_id for i, s in enumerate(specs) if i % 25]
        for k in range(0, len(done), 5000):
            conn.execute(sa.update(JobRow).where(JobRow.id.in_(done[k : k + 5000])).values(state="finished"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    queries = {f"sort_{s.value}": JobQuery(sort=s, limit=args.limit) for s in JobSort}
    queries["tenant_active"] = JobQuery(tenant="beta", active=True, limit=args.limit)
    queries["search"] = JobQuery(text="EVAL", limit=args.limit)
    queries["pending"] = JobQuery(states=frozenset({JobState.PENDING}), limit=args.limit)
    queries["deep_page"] = JobQuery(limit=args.limit, offset=args.jobs * 3 // 5)
    with database(args.backend, args.database_url) as url:
        store = Store(url)
        store.migrate()
        fill(store, args.jobs)
        ms: dict[str, float] = {}
        cpu0, pages = time.process_time(), 0
        for name, q in queries.items():
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                store.job_page(q)
                times.append(1000 * (time.perf_counter() - t0))
                pages += 1
            ms[name] = round(statistics.median(times), 2)
        cpu_ms = 1000 * (time.process_time() - cpu0) / pages
        store.close()
    out = {"bench": "job_list", "backend": args.backend, "jobs": args.jobs, "limit": args.limit,
           "median_ms": ms, "cpu_ms_per_page": round(cpu_ms, 2), "load_1m": round(os.getloadavg()[0], 2)}  # fmt: skip
    print(json.dumps(out))


if __name__ == "__main__":
    main()
