"""The scheduling loop's sync under a backlog: its CPU per cycle with ``--pending`` jobs queued while another
process submits and cancels ``--changes`` of each between cycles.

    python benchmarks/loop_sync.py [--backend sqlite|postgresql] [--pending 10000] [--cycles 30] [--changes 100]

The server's own app (``create_app``, its loop driven by hand as the server tests do) on a store holding the
SuperPOD fabric and no registered node (nothing is placed: every cycle keeps the whole backlog). Between cycles
a second store on the same database (another process's writes: no hint of them reaches the loop) submits
``--changes`` jobs and cancels ``--changes`` pending ones. ``sync_cpu_ms``: ``SchedulingLoop._sync`` (the read
of the store and the fold into the state) on the loop's thread CPU clock; ``cycle_cpu_ms``: the whole cycle.
Runs main's code too (``PYTHONPATH=/work/main/src``): it times ``_sync`` whatever it reads. PostgreSQL: the URL
in ``GPUPOOL_TEST_POSTGRES_URL``, a fresh schema dropped after. One JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from databases import fresh_schema, pg_base_url
from gpupool.domain.jobs import JobSpec
from gpupool.domain.states import JobState
from gpupool.fabric.generators import superpod
from gpupool.server.app import create_app
from gpupool.server.settings import Settings
from gpupool.store import Store
from gpupool.store.server_ops import ServerOps, Submission

ADMIN = "admin-secret-for-benchmarks-0123456789"


@contextmanager
def database(backend: str, tmp: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp}/gpupool.db"
        return
    with fresh_schema(pg_base_url(), fast_commit=True) as url:
        yield url


def submit(ops: ServerOps, first: int, n: int, now: float) -> list[str]:
    ids = [f"j{i:07d}" for i in range(first, first + n)]
    subs = [
        Submission(JobSpec(i, now, tenant="bench", gpus_per_task=1 + k % 8), ("true",), {}, None, "b")
        for k, i in enumerate(ids)
    ]
    for start in range(0, len(subs), 1000):
        for out in ops.submit_many(subs[start : start + 1000]):
            assert not isinstance(out, Exception), out
    return ids


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def run(args: argparse.Namespace, url: str, tmp: Path) -> dict[str, Any]:
    setup = Store(url)
    setup.migrate()
    setup.create_tenant("bench", "admin")
    setup.put_fabric(superpod(args.sus), "admin")
    other = ServerOps(setup)
    now = time.time()
    queued = submit(other, 0, args.pending, now)
    settings = Settings(data_dir=str(tmp), database_url=url, admin_token=ADMIN, lease_ttl_s=600.0)
    app = create_app(settings, run_loop=False)
    sync_cpu: list[float] = []
    cycle_cpu: list[float] = []
    with TestClient(app):
        loop = app.state.server.loop
        timed = loop._sync

        def sync(nodes: Any) -> bool:
            t = time.thread_time()
            ok = bool(timed(nodes))
            sync_cpu.append(time.thread_time() - t)
            return ok

        loop._sync = sync
        loop.run_cycle()  # the first cycle rebuilds
        sync_cpu.clear()
        nxt = args.pending
        for _ in range(args.cycles):
            queued += submit(other, nxt, args.changes, time.time())
            nxt += args.changes
            for job_id in queued[: args.changes]:
                rec = setup.get_job(job_id)
                setup.transition_job(job_id, rec.version, JobState.CANCELLED, "bench", "b")
            queued = queued[args.changes :]
            t = time.thread_time()
            loop.run_cycle()
            cycle_cpu.append(time.thread_time() - t)
        state = loop._state
        pending = len(state.snapshot().pending) if state is not None else -1
    setup.close()
    return {
        "benchmark": "loop_sync",
        "backend": args.backend,
        "pending": args.pending,
        "changes": args.changes,
        "cycles": args.cycles,
        "pending_at_end": pending,
        "syncs": len(sync_cpu),
        "sync_cpu_ms_p50": pct(sync_cpu, 0.5),
        "sync_cpu_ms_p99": pct(sync_cpu, 0.99),
        "cycle_cpu_ms_p50": pct(cycle_cpu, 0.5),
        "cycle_cpu_ms_p99": pct(cycle_cpu, 0.99),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--cycles", type=int, default=30)
    ap.add_argument("--changes", type=int, default=100, help="jobs submitted and jobs cancelled between cycles")
    ap.add_argument("--sus", type=int, default=4, help="scalable units of the stored SuperPOD fabric")
    args = ap.parse_args()
    cpu0 = time.process_time()
    with tempfile.TemporaryDirectory(prefix="gpupool-sync-") as name, database(args.backend, Path(name)) as url:
        out = run(args, url, Path(name))
    out |= {"cpu_s": round(time.process_time() - cpu0, 1), "load_avg_1m": round(os.getloadavg()[0], 2)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
