"""The server's scheduling loop at ``--nodes`` 8-GPU nodes under a stream of job arrays: CPU per cycle and per
placement, on the loop's thread, without the fleet's HTTP traffic around it.

    python benchmarks/loop_cycle.py [--backend sqlite|postgresql] [--nodes 1000] [--jobs 10000] [--cycles 30]
        [--completions] [--ends N] [--profile]

The server's own app (``create_app``, its loop driven by hand as the server tests do) on a store holding
``superpod(32)`` with the first ``--nodes`` hosts registered up (8 GPUs each, beating). Before each cycle the
server's own group-commit writer (``Server.submits``, the path of ``POST /v1/jobs``) stores ``--jobs /
--cycles`` jobs as four job arrays, the end-to-end benchmark's mix (1 GPU 70%, 8 GPUs 20%, 2x8 7%, 4x8 3%),
so the loop folds them in from the writer's hint as in the server. With ``--completions``, every job the last
cycle placed runs and ends between cycles (each rank reported running, then exited 0, then confirmed gone,
through the store calls the agents' reports make), so capacity recycles; without it the cluster fills and
the backlog grows, as it does in ``e2e_throughput.py`` at 1,000 nodes where launches lag. ``--ends N``: only
the first ``N`` of those jobs (by id) end between cycles, the end-to-end benchmark's steady state at 1,000
nodes (a full cluster, a backlog, ~100 jobs ending and ~100 placed per cycle).

The host cache (``server.hostcache``) is brought up to date before each cycle, as the server's refresher
thread does after each change, so the loop's read of the nodes is the one it makes in the server.
``run_cycle`` is timed on this thread's CPU clock (``time.thread_time``) and on the wall: ``placing`` cycles
(that placed something) apart from ``blocked`` ones; ``cpu_per_placement_ms`` is all cycles' CPU over all
placements. ``--profile``: the cycles under cProfile, the loop's top functions on stderr. main's code runs it
too (``PYTHONPATH=/work/main/src``). PostgreSQL: ``GPUPOOL_TEST_POSTGRES_URL``, a fresh schema dropped after.
One JSON line.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
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
from gpupool.store.ranks import RankReport, parse_assignment_id
from gpupool.store.server_ops import Submission

ADMIN = "admin-secret-for-benchmarks-0123456789"
SHAPES = ((1, 1, 0.70), (1, 8, 0.20), (2, 8, 0.07), (4, 8, 0.03))  # (tasks, GPUs per task, share)


@contextmanager
def database(backend: str, tmp: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp}/gpupool.db"
        return
    with fresh_schema(pg_base_url(), fast_commit=True) as url:
        yield url


def arrays(tick: int, n: int, now: float) -> list[Submission]:
    """``n`` jobs in the mix as one array per shape (ids unique per tick)."""
    out = []
    for k, (tasks, gpus, share) in enumerate(SHAPES):
        count = round(n * share)
        if count == 0:
            continue
        ids = [f"a{tick}-{k}.{i}" for i in range(count)]
        specs = tuple(
            JobSpec(i, now, tenant="bench", tasks=tasks, gpus_per_task=gpus, array_id=f"a{tick}-{k}") for i in ids
        )
        out.append(Submission(specs[0], ("true",), {}, None, "bench", elements=specs))
    return out


def complete(store: Store, ops: Any, job_ids: list[str]) -> None:
    """Each job's ranks reported running, then exited 0, then confirmed gone, as its agents would."""
    for job_id in job_ids:
        ranks = ops.job_assignments(job_id)
        for state, code in (("running", None), ("exited", 0)):
            for a in ranks:
                parts = parse_assignment_id(a.assignment_id)
                assert parts is not None
                store.record_rank(RankReport(job_id, parts[1], a.rank, a.host, state, code), "bench")
        for a in ranks:
            store.release_ranks(a.host, [a.assignment_id])


def pct(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1) if ordered else None


def run(args: argparse.Namespace, url: str, tmp: Path) -> dict[str, Any]:
    setup = Store(url)
    setup.migrate()
    setup.create_tenant("bench", "admin")
    fabric = superpod(32)
    setup.put_fabric(fabric, "admin")
    hosts = [h.name for h in fabric.hosts][: args.nodes]
    for h in hosts:
        setup.upsert_node(h, gpu_model="H100", gpu_count=8, actor="bench")
    settings = Settings(
        data_dir=str(tmp), database_url=url, admin_token=ADMIN, lease_ttl_s=600.0, node_lost_after_s=3600.0
    )
    app = create_app(settings, run_loop=False)
    per_tick = args.jobs // args.cycles
    rows: list[tuple[float, float, int]] = []  # (cpu s, wall s, placed) per cycle
    prof = cProfile.Profile(time.thread_time) if args.profile else None
    with TestClient(app):
        server = app.state.server
        setup.touch_nodes(dict.fromkeys(hosts, time.time()))
        server.loop.run_cycle()  # the first cycle builds the state
        placed_before: list[str] = []
        for tick in range(args.cycles):
            if args.completions:
                complete(setup, server.ops, sorted(placed_before)[: args.ends or None])
            futures = [server.submits.enqueue(s) for s in arrays(tick, per_tick, time.time())]
            for f in futures:
                f.result(timeout=120)
            setup.touch_nodes(dict.fromkeys(hosts, time.time()))
            server.hosts.refresh()  # the server's refresher thread reloads the host cache, not the loop's
            t, w = time.thread_time(), time.perf_counter()
            if prof is not None:
                prof.enable()
            report = server.loop.run_cycle()
            if prof is not None:
                prof.disable()
            rows.append((time.thread_time() - t, time.perf_counter() - w, report.placed))
            placed_before = [j for j, s in server.loop._db_state.items() if s is JobState.PLACED]
        state = server.loop._state
        pending = len(state.snapshot().pending) if state is not None else -1
    setup.close()
    if prof is not None:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(60)
        print(out.getvalue(), file=sys.stderr)
    placing = [r for r in rows if r[2] > 0]
    blocked = [r for r in rows if r[2] == 0]
    placed = sum(r[2] for r in rows)
    return {
        "benchmark": "loop_cycle",
        "backend": args.backend,
        "nodes": args.nodes,
        "jobs": per_tick * args.cycles,
        "cycles": args.cycles,
        "completions": args.completions,
        "ends": args.ends,
        "placed": placed,
        "pending_at_end": pending,
        "placing_cycles": len(placing),
        "placing_cpu_ms_p50": pct([r[0] for r in placing], 0.5),
        "placing_cpu_ms_max": pct([r[0] for r in placing], 1.0),
        "placing_wall_ms_p50": pct([r[1] for r in placing], 0.5),
        "blocked_cpu_ms_p50": pct([r[0] for r in blocked], 0.5),
        "blocked_cpu_ms_p99": pct([r[0] for r in blocked], 0.99),
        "blocked_wall_ms_p50": pct([r[1] for r in blocked], 0.5),
        "cycle_cpu_s": round(sum(r[0] for r in rows), 2),
        "cpu_per_placement_ms": round(1000 * sum(r[0] for r in rows) / max(placed, 1), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    ap.add_argument("--nodes", type=int, default=1000, help="8-GPU nodes registered (at most 1,023)")
    ap.add_argument("--jobs", type=int, default=10_000, help="jobs submitted over all cycles")
    ap.add_argument("--cycles", type=int, default=30)
    ap.add_argument("--completions", action="store_true", help="jobs placed run and end between cycles")
    ap.add_argument("--ends", type=int, default=0, help="with --completions: at most this many end per cycle")
    ap.add_argument("--profile", action="store_true", help="the cycles under cProfile: top functions on stderr")
    args = ap.parse_args()
    cpu0 = time.process_time()
    with tempfile.TemporaryDirectory(prefix="gpupool-cycle-") as name, database(args.backend, Path(name)) as url:
        out = run(args, url, Path(name))
    out |= {"cpu_s": round(time.process_time() - cpu0, 1), "load_avg_1m": round(os.getloadavg()[0], 2)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
