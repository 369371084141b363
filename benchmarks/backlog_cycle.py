"""The server's cycle under a long backlog: per-cycle wall and CPU time with 50,000 jobs pending.

    python benchmarks/backlog_cycle.py --hosts 512 --pending 50000 --cycles 200 [--store | --db URL]

A rail-optimised SuperPOD of about ``--hosts`` DGX H100 hosts, every GPU busy with running jobs that have
estimates (so EASY backfill reserves), and ``--pending`` mixed jobs (whole GPUs, gangs of 2-8 hosts, shares;
a share of them with deadlines, some too late to make them, and estimates), under the default settings
(``SchedulerSettings()``: srt, EASY backfill, deadline admission and preemption, topology). Each cycle goes
through ``CycleDriver.run_cycle``, the code path of the server's loop and the simulator: between cycles the
clock moves ``--step`` seconds, ``--ends`` running jobs end and ``--arrivals`` jobs are submitted; what the
cycle places starts at once. ``cycle_ms_*`` time ``run_cycle`` (the schedule and applying its decisions to the
state) after one snapshot per cycle (``snapshot_ms_*``). ``reasons_ms_*`` time what the server's loop does with
the cycle's waiting reasons (``SchedulingLoop._wait``): find those that changed since the last cycle
(``server.reasons.StoredReasons``; with ``--full-diff``, the loop's former diff: every reason made and compared
with last cycle's dict) and, with ``--store`` (a new SQLite file) or ``--db URL`` (an empty database, e.g.
PostgreSQL), write them to a store holding the backlog through ``ServerOps.write_reasons`` (the loop's own step,
``StoredReasons.store``; the former diff stores each job's own reason); ``write_ms_*`` apart. ``written_mean`` is how many jobs' stored
reasons a cycle writes, ``classes_written_mean`` how many shared reasons (``wait_classes`` rows).
``total_ms_*``: the cycle plus the reasons step, write included, per cycle (what the loop spends; with
PostgreSQL the database server's CPU is not in ``*_cpu_ms``). ``--gc-freeze``: ``gc.freeze()``
after the setup (the collector then skips the backlog's objects). The first cycle (which sorts the backlog into
the kept queue and writes every reason) is reported apart. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack

import numpy as np

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobFinished, JobPlaced, JobStarted, JobSubmitted
from gpupool.domain.jobs import Allocation, GpuShare, JobSpec, PriorityClass, TaskAllocation
from gpupool.fabric.generators import superpod
from gpupool.scheduler.driver import CycleDriver
from gpupool.scheduler.settings import SchedulerSettings, scheduler_config, sharing_policy
from gpupool.scheduler.types import Waiting
from gpupool.server.reasons import StoredReasons
from gpupool.sim.instant import InstantWorld
from gpupool.store import Store
from gpupool.store.records import WaitWrites
from gpupool.store.server_ops import ServerOps, Submission


def fill(state: ClusterState, rng: np.random.Generator) -> None:
    """Every GPU busy: one to eight jobs per host, each with an estimate, ending over the next hours."""
    for h, host in enumerate(state.index.fabric.hosts):
        g, start = len(host.gpus), 0
        while start < g:
            n = int(min(g - start, rng.choice([1, 2, 4, 8])))
            spec = JobSpec(f"run-{h}-{start}", 0.0, gpus_per_task=n, estimated_runtime_s=float(rng.uniform(600, 20000)))
            task = TaskAllocation(host.name, tuple(range(start, start + n)), 1000, 0, 1000 * n, 16384 * n)
            state.apply(JobSubmitted(spec, 0.0))
            state.apply(JobPlaced(Allocation(spec.job_id, (task,)), 0.0))
            state.apply(JobStarted(spec.job_id, 0.0))
            start += n


def backlog_job(i: int, now: float, rng: np.random.Generator) -> JobSpec:
    """Mixed shapes; 40% with a deadline (a tenth of those too late already), 70% with an estimate."""
    k = rng.random()
    est = float(rng.choice([300.0, 1800.0, 7200.0])) if rng.random() < 0.7 else None
    dl = None
    if rng.random() < 0.4:
        runtime = est if est is not None else 3600.0
        dl = now + runtime * (0.5 if rng.random() < 0.1 else float(rng.uniform(1.5, 20.0)))
    common = {
        "submit_time_s": now,
        "priority": PriorityClass(int(rng.choice([1, 2, 2, 2, 3]))),
        "cpu_millicores": 4000,
        "memory_mib": 65536,
        "estimated_runtime_s": est,
        "deadline_s": dl,
    }
    jid = f"b{i:06d}"
    if k < 0.1:
        share = GpuShare(int(rng.choice([250, 500])), int(rng.choice([10000, 20000])))
        return JobSpec(jid, share=share, **common)  # type: ignore[arg-type]
    if k < 0.75:
        return JobSpec(jid, gpus_per_task=int(rng.choice([1, 1, 2, 4, 8])), **common)  # type: ignore[arg-type]
    return JobSpec(jid, tasks=int(rng.choice([2, 4, 8])), gpus_per_task=8, **common)  # type: ignore[arg-type]


class _Timed:
    """``ServerOps`` whose reason writes are timed (``write_s``), or none stored (``ops`` None)."""

    def __init__(self, ops: ServerOps | None) -> None:
        self.ops, self.write_s = ops, 0.0

    def write_reasons(self, writes: WaitWrites, *, fence: object = None) -> None:
        t = time.perf_counter()
        if self.ops is not None:
            self.ops.write_reasons(writes, fence=fence)  # type: ignore[arg-type]
        self.write_s = time.perf_counter() - t


class Reasons:
    """What ``SchedulingLoop._wait`` does with a cycle's waiting jobs: find the changed reasons and store them
    (``full_diff``: the loop's former diff, every job's reason compared with last cycle's, each stored as its own)."""

    def __init__(self, ops: ServerOps | None, full_diff: bool) -> None:
        self.classes = 0
        self.book = None if full_diff else StoredReasons()
        self.stored: dict[str, tuple[str, str]] = {}
        self.timed = _Timed(ops)

    @property
    def write_s(self) -> float:
        return self.timed.write_s

    def cycle(self, waiting: Sequence[Waiting]) -> int:
        """How many reasons were written."""
        if self.book is not None:  # the loop's step, as ``SchedulingLoop._wait``
            compared = self.book.store(waiting, self.timed, None)  # type: ignore[arg-type]
            self.classes = len(compared.class_changes) + len(compared.dropped)
            return compared.written
        reasons = {w.job_id: (w.reason.value, w.message) for w in waiting}
        changed: dict[tuple[str, str], list[str]] = {}
        for j, r in reasons.items():
            if self.stored.get(j) != r:
                changed.setdefault(r, []).append(j)
        self.timed.write_reasons(WaitWrites(own=changed))
        self.stored = reasons
        return sum(len(jobs) for jobs in changed.values())


def submit(ops: ServerOps | None, jobs: list[JobSpec]) -> None:
    if ops is not None:
        for at in range(0, len(jobs), 2000):
            got = ops.submit_many([Submission(j, ("true",), {}, None, "bench") for j in jobs[at : at + 2000]])
            refused = [e for e in got if isinstance(e, Exception)]
            if refused:
                raise SystemExit(f"error: the store refused {len(refused)} jobs: {refused[0]}")


def analyze(ops: ServerOps | None) -> None:
    """PostgreSQL: statistics for the loaded backlog, as autovacuum would gather them (it is off on some
    servers, this machine's among them): without them the planner scans every pending job's index entry for
    each reasons statement (a bitmap AND of the state index and the primary key)."""
    if ops is not None and ops.store._postgres:
        with ops.store._core_tx(write=True) as conn:
            conn.exec_driver_sql("ANALYZE jobs")


def pct(xs: list[float], q: float) -> float:
    return round(float(np.percentile(xs, q)) * 1000, 2) if xs else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=512)
    ap.add_argument("--pending", type=int, default=50000)
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--step", type=float, default=5.0, help="seconds between cycles")
    ap.add_argument("--ends", type=int, default=3, help="running jobs that end between cycles")
    ap.add_argument("--arrivals", type=int, default=3, help="jobs submitted between cycles")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--gc-freeze",
        action="store_true",
        help="gc.freeze() after the setup: the collector then skips the backlog's objects (a long-lived server's choice)",
    )
    ap.add_argument("--store", action="store_true", help="write the changed reasons to a SQLite store of the backlog")
    ap.add_argument(
        "--db", default=None, help="write them to this (empty) database instead, e.g. postgresql+psycopg://..."
    )
    ap.add_argument("--full-diff", action="store_true", help="the loop's former diff of every reason")
    args = ap.parse_args(argv)
    with ExitStack() as stack:
        ops = None
        if args.store or args.db:
            url = args.db or f"sqlite:///{stack.enter_context(tempfile.TemporaryDirectory())}/b.db"
            store = stack.enter_context(Store(url))
            store.migrate()
            store.create_tenant("default", actor="bench")
            ops = ServerOps(store)
        return run(args, ops)


def run(args: argparse.Namespace, ops: ServerOps | None) -> int:
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    state = ClusterState(superpod(max(1, -(-(args.hosts + 1) // 32))))
    fill(state, rng)
    backlog = [backlog_job(i, 0.0, rng) for i in range(args.pending)]
    submit(ops, backlog)
    analyze(ops)
    for job in backlog:
        state.apply(JobSubmitted(job, 0.0))
    del backlog
    handler = Reasons(ops, args.full_diff)
    s = SchedulerSettings()
    driver, sharing, world = (
        CycleDriver(scheduler_config(s), s.usage_half_life_s),
        sharing_policy(s),
        InstantWorld(state),
    )
    setup_s = time.perf_counter() - t0
    if args.gc_freeze:
        gc.freeze()
    now, made = 0.0, args.pending
    wall, cpu, snaps, waits, waits_cpu, writes, written, pending = [], [], [], [], [], [], [], []
    totals, totals_cpu, classes = [], [], []
    first: tuple[float, float, float] | None = None
    reasons: Counter[str] = Counter()
    for c in range(args.cycles + 1):
        t = time.perf_counter()
        snap = state.snapshot()
        snap_s = time.perf_counter() - t
        t, p = time.perf_counter(), time.process_time()
        run = driver.run_cycle(snap, snap.pending, sharing, world, now)
        w, u = time.perf_counter() - t, time.process_time() - p
        t, p = time.perf_counter(), time.process_time()
        wrote = handler.cycle(run.result.waiting)
        wait_s, wait_cpu = time.perf_counter() - t, time.process_time() - p
        if c == 0:
            first = (w, u, wait_s)
        else:
            wall.append(w)
            cpu.append(u)
            snaps.append(snap_s)
            waits.append(wait_s)
            waits_cpu.append(wait_cpu)
            writes.append(handler.write_s)
            written.append(wrote)
            classes.append(handler.classes)
            totals.append(w + wait_s)
            totals_cpu.append(u + wait_cpu)
            pending.append(len(snap.pending))
        if c == args.cycles:
            reasons = Counter(x.reason.value for x in run.result.waiting)
        now += args.step
        running = sorted(state.snapshot().running)
        for j in rng.choice(len(running), size=min(args.ends, len(running)), replace=False):
            state.apply(JobFinished(running[int(j)], now))
        arrived = [backlog_job(made + i, now, rng) for i in range(args.arrivals)]
        made += args.arrivals
        submit(ops, arrived)
        for job in arrived:
            state.apply(JobSubmitted(job, now))
    assert first is not None
    print(json.dumps({
        "hosts": state.index.n_hosts, "gpus": state.index.fabric.gpu_count, "pending": args.pending,
        "cycles": args.cycles, "placed": world.placed, "pending_mean": round(float(np.mean(pending)), 1),
        "cycle_ms_p50": pct(wall, 50), "cycle_ms_p99": pct(wall, 99), "cycle_ms_max": pct(wall, 100),
        "cycle_cpu_ms_p50": pct(cpu, 50), "cycle_cpu_ms_p99": pct(cpu, 99),
        "snapshot_ms_p50": pct(snaps, 50), "snapshot_ms_p99": pct(snaps, 99),
        "total_ms_p50": pct(totals, 50), "total_ms_p99": pct(totals, 99), "total_ms_max": pct(totals, 100),
        "total_cpu_ms_p50": pct(totals_cpu, 50), "total_cpu_ms_p99": pct(totals_cpu, 99),
        "reasons": "full_diff" if handler.book is None else "changed",
        "store": (args.db or "sqlite").split(":")[0] if args.store or args.db else False,
        "reasons_ms_p50": pct(waits, 50), "reasons_ms_p99": pct(waits, 99),
        "reasons_cpu_ms_p50": pct(waits_cpu, 50), "reasons_cpu_ms_p99": pct(waits_cpu, 99),
        "write_ms_p50": pct(writes, 50), "write_ms_p99": pct(writes, 99),
        "written_mean": round(float(np.mean(written)), 1), "written_max": max(written),
        "classes_written_mean": round(float(np.mean(classes)), 1), "classes_written_max": max(classes),
        "first_cycle_ms": round(first[0] * 1000, 1), "first_cycle_cpu_ms": round(first[1] * 1000, 1),
        "first_reasons_ms": round(first[2] * 1000, 1),
        "kept_queue": driver.queue is not None, "gc_freeze": args.gc_freeze, "last_reasons": dict(reasons.most_common()),
        "setup_s": round(setup_s, 1), "cpu_s": round(time.process_time(), 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
