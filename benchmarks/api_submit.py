"""Submit throughput of the REST API: a server of its own on loopback (scheduling loop running, 8 registered
nodes), concurrent clients submitting jobs, one JSON line: backend, submits, submits_per_s, p99_ms.

The clients are ``--procs`` processes, each an asyncio loop with ``--clients`` concurrent submitters. The
default client (``--client raw``) speaks HTTP/1.1 itself on one keep-alive connection per submitter, with
requests filled in from a template: httpx cost the clients 2.7 ms of CPU per submit, more than the server
spent, and clients and server share the machine (``cores`` in the output). Every job is still its own
request (its own name and idempotency key), and every response is parsed for its status and job id:
anything but a 201 with a new id counts in ``errors``. ``--client httpx`` keeps the old client to compare.
Server and client CPU per submit are read from /proc, which the neighbours' load barely moves.

``--profile DIR`` runs the server under cProfile (every thread) and prints its top functions to stderr.

    python benchmarks/api_submit.py --backend sqlite
    python benchmarks/api_submit.py --backend postgres --database-url postgresql+psycopg://postgres@127.0.0.1/test
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import multiprocessing
import os
import pstats
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sqlalchemy.engine import make_url

ADMIN = secrets.token_urlsafe(24)
_Result = tuple[list[float], int, set[str], float] | str  # latencies, errors, job ids, CPU s; or a failure


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (Linux /proc): a measure that other load on the box
    does not inflate, unlike wall-clock throughput."""
    return cpu_s_of(Path(f"/proc/{pid}/stat"))


def thread_cpu_s(pid: int) -> dict[int, float]:
    """CPU seconds of each of ``pid``'s threads (by thread id; the event loop's is ``pid`` itself)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = cpu_s_of(task / "stat")
        except OSError:
            continue  # the thread ended meanwhile
    return out


def cpu_s_of(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def backend_cpu_s(libpq: str, app_name: str) -> dict[int, float]:
    """CPU seconds of each PostgreSQL backend serving connections named ``app_name`` (same machine)."""
    with psycopg.connect(libpq, autocommit=True) as conn:
        pids = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", [app_name])]
    out = {}
    for pid in pids:
        try:
            out[pid] = cpu_s_of(Path(f"/proc/{pid}/stat"))
        except OSError:
            continue
    return out


def client_process(
    kind: str,
    port: int,
    token: str,
    run: str,
    proc: int,
    clients: int,
    start_at: float,
    seconds: float,
    results: multiprocessing.Queue[_Result],
) -> None:
    """One client process: ``clients`` coroutines submitting in a loop, each on its own keep-alive connection."""
    try:
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
        submitters = _raw_submitters if kind == "raw" else _httpx_submitters
        latencies, errors, ids = asyncio.run(submitters(port, token, run, proc, clients, start_at, seconds))
        results.put((latencies, errors, ids, cpu_s(os.getpid())))
    except BaseException as e:  # report instead of leaving the parent waiting on the queue
        results.put(f"client process failed: {e!r}")


def _body(run: str, proc: int, n: int) -> tuple[bytes, str]:
    """Job ``n`` of client process ``proc``: its JSON body (own name, 1-4 GPUs) and idempotency key."""
    name = f"bench-{proc}-{n}"
    body = f'{{"command":["true"],"name":"{name}","gpus_per_task":{1 + n % 4}}}'.encode()
    return body, f"{run}-{proc}-{n}"


async def _raw_submitters(
    port: int, token: str, run: str, proc: int, clients: int, start_at: float, seconds: float
) -> tuple[list[float], int, set[str]]:
    latencies: list[float] = []
    ids: set[str] = set()
    errors = 0
    head = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nIdempotency-Key: {key}\r\nContent-Length: {length}\r\n\r\n"
    )
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(clients)]
    await asyncio.sleep(max(0.0, start_at - time.time()))
    end = time.perf_counter() + seconds
    perf = time.perf_counter

    async def one(i: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal errors
        n = i
        while perf() < end:
            body, key = _body(run, proc, n)
            t0 = perf()
            writer.write(head.format(key=key, length=len(body)).encode() + body)
            status_head = await reader.readuntil(b"\r\n\r\n")
            lower = status_head.lower()
            at = lower.find(b"content-length:")
            length = int(lower[at + 15 : lower.index(b"\r\n", at)]) if at >= 0 else 0
            reply = await reader.readexactly(length)
            dt = perf() - t0
            job = json.loads(reply).get("job") if status_head.startswith(b"HTTP/1.1 201") else None
            job_id = job.get("id") if isinstance(job, dict) else None
            if not isinstance(job_id, str) or job_id in ids:
                errors += 1
                if errors <= 3:
                    print(f"submit failed: {status_head[:40]!r} {reply[:200]!r}", file=sys.stderr)
            else:
                ids.add(job_id)
                latencies.append(dt)
            n += clients

    await asyncio.gather(*(one(i, r, w) for i, (r, w) in enumerate(conns)))
    for _, w in conns:
        w.close()
    return latencies, errors, ids


async def _httpx_submitters(
    port: int, token: str, run: str, proc: int, clients: int, start_at: float, seconds: float
) -> tuple[list[float], int, set[str]]:
    latencies: list[float] = []
    ids: set[str] = set()
    errors = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30, limits=limits) as c:
        await asyncio.sleep(max(0.0, start_at - time.time()))
        end = time.perf_counter() + seconds

        async def one(i: int) -> None:
            nonlocal errors
            n = i
            while time.perf_counter() < end:
                body, key = _body(run, proc, n)
                t0 = time.perf_counter()
                r = await c.post("/v1/jobs", content=body, headers={"Idempotency-Key": key})
                dt = time.perf_counter() - t0
                job_id = r.json().get("job", {}).get("id") if r.status_code == 201 else None
                if not isinstance(job_id, str) or job_id in ids:
                    errors += 1
                else:
                    ids.add(job_id)
                    latencies.append(dt)
                n += clients

        await asyncio.gather(*(one(i) for i in range(clients)))
    return latencies, errors, ids


def serve_profiled(out_dir: str) -> None:
    """``gpupool server`` under cProfile: the main thread (event loop) and every thread it starts, one
    stats file each, written when the thread ends (the server stops its threads on SIGTERM). Timed in
    per-thread CPU seconds, so a thread waiting on a lock, the database or the GIL counts nothing."""
    import cProfile
    import signal

    from gpupool.cli.server import server

    original = threading.Thread.run

    def profiled(self: threading.Thread) -> None:
        prof = cProfile.Profile(time.thread_time)
        prof.enable()
        try:
            original(self)
        finally:
            prof.disable()
            prof.dump_stats(str(Path(out_dir) / f"thread-{self.name}-{threading.get_ident()}.prof"))

    def stop(_sig: int, _frame: object) -> None:
        raise SystemExit(0)

    # uvicorn shuts down on SIGTERM, then raises it again under the handler it found: this one lets the
    # main thread's stats be written instead of the default handler killing the process.
    signal.signal(signal.SIGTERM, stop)
    threading.Thread.run = profiled  # type: ignore[method-assign]
    prof = cProfile.Profile(time.thread_time)
    prof.enable()
    try:
        server()
    finally:
        prof.disable()
        prof.dump_stats(str(Path(out_dir) / "main.prof"))


def profile_table(out_dir: str, top: int = 45) -> str:
    files = sorted(str(p) for p in Path(out_dir).glob("*.prof"))
    if not files:
        return "no profiles were written"
    text = io.StringIO()
    for f in files:
        st = pstats.Stats(f, stream=text)
        text.write(f"== {Path(f).name}: {st.total_tt:.2f} s\n")  # type: ignore[attr-defined]
    stats = pstats.Stats(*files, stream=text)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return text.getvalue()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["sqlite", "postgres"])
    p.add_argument("--database-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    p.add_argument("--client", choices=["raw", "httpx"], default="raw")
    p.add_argument("--clients", type=int, default=16, help="concurrent submitters per client process")
    p.add_argument("--procs", type=int, default=2, help="client processes")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--schedule-period-s", type=float, default=1.0, help="GPUPOOL_SCHEDULE_PERIOD_S of the server")
    p.add_argument("--schedule-min-gap-s", type=float, default=0.25, help="GPUPOOL_SCHEDULE_MIN_GAP_S (0.05 default)")
    p.add_argument("--profile", metavar="DIR", help="run the server under cProfile; print its top to stderr")
    p.add_argument("--serve-profiled", metavar="DIR", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve_profiled:
        serve_profiled(args.serve_profiled)
        return
    if args.backend is None:
        p.error("--backend is required")
    tmp = Path(tempfile.mkdtemp(prefix="gpupool-bench-"))
    schema = libpq = None
    app_name = f"gpupool-bench-{secrets.token_hex(4)}"
    if args.backend == "sqlite":
        url = f"sqlite:///{tmp / 'gpupool.db'}"
    else:
        schema = f"bench_{secrets.token_hex(4)}"
        libpq = make_url(args.database_url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        url = (
            make_url(args.database_url)
            .update_query_dict({"options": f"-csearch_path={schema}", "application_name": app_name})
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
        "GPUPOOL_SCHEDULE_PERIOD_S": str(args.schedule_period_s),
        "GPUPOOL_SCHEDULE_MIN_GAP_S": str(args.schedule_min_gap_s),
    }
    cmd = [sys.executable, "-m", "gpupool", "server"]
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
        for old in Path(args.profile).glob("*.prof"):
            old.unlink()
        cmd = [sys.executable, __file__, "--serve-profiled", args.profile]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
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
        results: multiprocessing.Queue[_Result] = ctx.Queue()
        start_at = time.time() + 1.5  # every process starts submitting at once, after its imports
        run = secrets.token_hex(4)
        procs = [
            ctx.Process(
                target=client_process,
                args=(args.client, port, token, run, k, args.clients, start_at, args.seconds, results),
            )
            for k in range(args.procs)
        ]
        for cp in procs:
            cp.start()
        threading.Event().wait(max(0.0, start_at - time.time()))
        server_cpu0, threads0 = cpu_s(proc.pid), thread_cpu_s(proc.pid)
        db0 = backend_cpu_s(libpq, app_name) if libpq is not None else {}
        load0 = os.getloadavg()[0]
        gathered = [results.get(timeout=args.seconds + 120) for _ in procs]
        server_cpu, threads1 = cpu_s(proc.pid) - server_cpu0, thread_cpu_s(proc.pid)
        db1 = backend_cpu_s(libpq, app_name) if libpq is not None else {}
        # Server CPU by thread: the event loop's (HTTP, validation, answers; its id is the pid), the threads
        # started during the run (the group-commit writer starts with the first submit) and the rest (the
        # scheduling loop, started with the server, and the threadpool, idle here).
        loop_cpu = threads1.get(proc.pid, 0.0) - threads0.get(proc.pid, 0.0)
        new_cpu = sum(c for tid, c in threads1.items() if tid not in threads0)
        db_cpu = sum(c - db0.get(pid, 0.0) for pid, c in db1.items())
        for cp in procs:
            cp.join(30)
        failures = [g for g in gathered if isinstance(g, str)]
        if failures:
            raise SystemExit(failures[0])
        done = [g for g in gathered if not isinstance(g, str)]
        client_cpu = sum(g[3] for g in done)  # includes each client's start-up (imports, connecting)
        errors = sum(g[1] for g in done)
        all_ids: set[str] = set()
        for g in done:
            errors += len(all_ids & g[2])  # one job id answered to two submits would be a duplicate
            all_ids |= g[2]
        metrics = httpx.get(f"{base}/metrics", headers=adm).text
        series = {
            line.split()[0]: float(line.split()[-1]) for line in metrics.splitlines() if line[:1] not in ("#", "")
        }
        stored = int(series.get("gpupool_job_submits_total", 0.0))
        placements = series.get("gpupool_placements_total", 0.0)
        cycles = series.get("gpupool_schedule_cycle_seconds_count", 0.0)
        cycle_s = series.get("gpupool_schedule_cycle_seconds_sum", 0.0)
    finally:
        proc.terminate()
        proc.wait(60)
        if schema is not None and libpq is not None:
            with psycopg.connect(libpq, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")
    lat = sorted(x for g in done for x in g[0])
    n = len(lat)
    out: dict[str, Any] = {
        "backend": args.backend,
        "client": args.client,
        "submits": n,
        "submits_per_s": round(n / args.seconds, 1),
        "p99_ms": round(1000 * lat[int(0.99 * (n - 1))], 2) if lat else None,
        "p50_ms": round(1000 * lat[(n - 1) // 2], 2) if lat else None,
        "errors": errors,
        "stored": stored,
        "clients": args.clients * args.procs,
        "client_procs": args.procs,
        "cores": os.cpu_count(),
        "seconds": args.seconds,
        "schedule_min_gap_s": args.schedule_min_gap_s,
        "placements": placements,
        "server_cpu_ms_per_submit": round(1000 * server_cpu / max(1, n), 3),
        "server_cpu_ms_per_submit_by_thread": {
            "event_loop": round(1000 * loop_cpu / max(1, n), 3),
            "writer": round(1000 * new_cpu / max(1, n), 3),
            "scheduler_and_rest": round(1000 * (server_cpu - loop_cpu - new_cpu) / max(1, n), 3),
        },
        "client_cpu_ms_per_submit": round(1000 * client_cpu / max(1, n), 3),
        "db_cpu_ms_per_submit": round(1000 * db_cpu / max(1, n), 3) if libpq is not None else None,
        "load_avg_1m": round(max(load0, os.getloadavg()[0]), 2),
        "cycles": cycles,
        "cycle_ms_mean": round(1000 * cycle_s / cycles, 1) if cycles else None,
    }
    print(json.dumps(out))
    if args.profile:
        print(profile_table(args.profile), file=sys.stderr)


if __name__ == "__main__":
    main()
