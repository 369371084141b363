"""Sustained submits: ``--rate`` jobs per second for ``--seconds`` against a real ``gpupool server`` process on
SQLite (or ``--database-url``), its scheduling loop placing them on ``--nodes`` registered nodes of 8 GPUs
(enough room for every job: placements never wait for capacity, so whatever is pending could be placed). The
nodes never beat (their agents are not emulated: 9,000 launches a minute would be the agents' benchmark).

The load is open: request i is sent at start + i/rate whatever the answers before it, from one asyncio loop
speaking keep-alive HTTP/1.1 on ``--connections`` connections (a request waits for a free connection, and that
wait counts in its latency: latency runs from the scheduled send to the answer). Each job is its own request
with its own name and Idempotency-Key; every answer is checked for a 201.

Every second the server's /metrics give its submits and placements so far; the backlog is their difference
(jobs acknowledged and not yet placed: every one of them fits). One JSON line: submits
acknowledged, latency p50/p99/max, placements per second over the run, the backlog when the submits stop
(target: under 2 s of submits, i.e. < 300 at 150/s) and the largest seen, how long the queue took to drain
after the last submit, the server's CPU seconds and its peak and final resident memory, load average.

    .venv/bin/python benchmarks/sustained_submits.py                    # 60 s at 150/s, about 2 minutes
    .venv/bin/python benchmarks/sustained_submits.py --seconds 10       # a quick look
    ... --py-spy $(which py-spy)      # and where the server spent the load (sustained-PID.txt, raw stacks)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from gpupool.schemas.agent import GpuInfo, RegisterRequest
from gpupool.store import ServerOps, Store
from gpupool.store.agents import Registrant
from procs import ADMIN, ServerProc, cpu_s, until


def rss_mib(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of ``pid`` in MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    got = {k: int(v.split()[0]) / 1024 for k, v in re.findall(r"^(VmRSS|VmHWM):\s+(.*)$", status, re.M)}
    return round(got["VmRSS"], 1), round(got["VmHWM"], 1)


def seed_nodes(url: str, count: int) -> None:
    """``count`` nodes of 8 H100s stored as their registrations would store them (the node, its agent record
    and inventory, a first beat), before the server starts: through the API each registration rebuilds the
    registered-nodes fabric, so a thousand of them would take minutes of setup."""
    gpus = [GpuInfo(index=i, model="H100", memory_mib=81559) for i in range(8)]
    with Store(url) as store:
        store.migrate()
        ops = ServerOps(store)
        for n in range(count):
            host = f"gpu-{n:04d}"
            inventory = RegisterRequest(host=host, gpus=tuple(gpus)).model_dump(mode="json")
            store.upsert_node(host, gpu_model="H100", gpu_count=8, actor="bench")
            ops.register_agent(
                host,
                by=Registrant("admin", "bench"),
                log_url="",
                address="127.0.0.1",
                inventory=inventory,
                actor="bench",
                live_within_s=0.0,
            )
            store.heartbeat(host, actor="bench")


def tenant_token(base: str) -> str:
    h = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=base, headers=h, timeout=60) as c:
        c.post("/v1/tenants", json={"name": "acme"}).raise_for_status()
        return str(c.post("/v1/tokens", json={"tenant": "acme"}).json()["token"])


def scrape(base: str) -> dict[str, float]:
    text = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10).text
    out = {"placements": 0.0, "submits": 0.0, "gpus_free": 0.0}
    for line in text.splitlines():
        if line.startswith("gpupool_gpus_free{"):
            out["gpus_free"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("gpupool_placements_total "):
            out["placements"] = float(line.rsplit(" ", 1)[1])
        elif line.startswith("gpupool_job_submits_total "):
            out["submits"] = float(line.rsplit(" ", 1)[1])
    return out


async def offered_load(port: int, token: str, rate: float, seconds: float, connections: int) -> tuple[list[float], int]:
    """Open-loop submits; (latencies in s from each request's scheduled time, errors)."""
    head = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nIdempotency-Key: {key}\r\nContent-Length: {length}\r\n\r\n"
    )
    free: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(connections):
        free.put_nowait(await asyncio.open_connection("127.0.0.1", port))
    latencies: list[float] = []
    errors = 0
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.1

    async def one(i: int) -> None:
        nonlocal errors
        due = start + i / rate
        await asyncio.sleep(max(0.0, due - loop.time()))
        body = f'{{"command":["true"],"name":"s-{i}","gpus_per_task":1}}'.encode()
        reader, writer = await free.get()
        try:
            writer.write(head.format(key=f"s-{i}", length=len(body)).encode() + body)
            status = await reader.readuntil(b"\r\n\r\n")
            lower = status.lower()
            at = lower.find(b"content-length:")
            await reader.readexactly(int(lower[at + 15 : lower.index(b"\r\n", at)]) if at >= 0 else 0)
        finally:
            free.put_nowait((reader, writer))
        if status.startswith(b"HTTP/1.1 201"):
            latencies.append(loop.time() - due)
        else:
            errors += 1
            if errors <= 3:
                print(f"submit {i} failed: {status[:60]!r}", file=sys.stderr)

    await asyncio.gather(*(one(i) for i in range(int(rate * seconds))))
    while not free.empty():
        free.get_nowait()[1].close()
    return latencies, errors


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rate", type=float, default=150.0, help="offered submits per second")
    ap.add_argument("--nodes", type=int, default=0, help="registered 8-GPU nodes (default: room for every job)")
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--database-url", default="", help="default: SQLite in a temporary directory")
    ap.add_argument("--drain-s", type=float, default=120.0, help="how long to wait for the queue to empty after")
    ap.add_argument("--py-spy", default="", help="record the server with this py-spy binary during the load")
    args = ap.parse_args()
    jobs = int(args.rate * args.seconds)
    nodes = args.nodes or (jobs + 7) // 8 + 8
    with tempfile.TemporaryDirectory(prefix="gpupool-sustained-") as tmp:
        url = args.database_url or f"sqlite:///{tmp}/gpupool.db"
        # The server's own loop settings (ServerProc's are for tests); fake nodes never beat, so never lost.
        env = {"GPUPOOL_SCHEDULE_PERIOD_S": "2.0", "GPUPOOL_NODE_LOST_AFTER_S": "3600", "GPUPOOL_LOG_LEVEL": "warning"}
        began = time.monotonic()
        seed_nodes(url, nodes)
        srv = ServerProc(url, Path(tmp), Path(tmp) / "server.log", env=env)
        try:
            token = tenant_token(srv.base)
            until(lambda: scrape(srv.base)["gpus_free"] >= 8 * nodes, 120, "the loop sees every node")
            setup_s = time.monotonic() - began
            before = scrape(srv.base)
            cpu0, load0 = cpu_s(srv.proc.pid), os.getloadavg()[0]
            samples: list[tuple[float, dict[str, float]]] = []
            done = threading.Event()

            def sample() -> None:
                while not done.is_set():
                    samples.append((time.monotonic(), scrape(srv.base)))
                    done.wait(1.0)  # one sample a second

            sampler = threading.Thread(target=sample, daemon=True)
            spy = None
            if args.py_spy:
                profile = f"sustained-{srv.proc.pid}.txt"
                cmd = [args.py_spy, "record", "-p", str(srv.proc.pid), "-d", str(int(args.seconds)), "-r", "50"]
                spy = subprocess.Popen([*cmd, "--threads", "--idle", "--nonblocking", "--format", "raw", "-o", profile])
            t0 = time.monotonic()
            sampler.start()
            latencies, errors = asyncio.run(offered_load(srv.port, token, args.rate, args.seconds, args.connections))
            t_end = time.monotonic()
            if spy is not None:
                spy.wait()
            at_end = scrape(srv.base)
            drained_s = None
            while time.monotonic() - t_end < args.drain_s:
                now = scrape(srv.base)
                if now["placements"] >= now["submits"]:
                    drained_s = time.monotonic() - t_end
                    break
                done.wait(0.2)  # polling the queue, bounded by --drain-s
            done.set()
            sampler.join()
            after = scrape(srv.base)
            server_cpu = cpu_s(srv.proc.pid) - cpu0
            rss, peak = rss_mib(srv.proc.pid)
            load1 = os.getloadavg()[0]
        finally:
            srv.stop()
    placed = at_end["placements"] - before["placements"]
    out = {
        "benchmark": "sustained_submits",
        "backend": url.split(":", 1)[0].split("+", 1)[0],
        "rate": args.rate,
        "seconds": args.seconds,
        "nodes": nodes,
        "submits": len(latencies),
        "errors": errors,
        "submit_p50_ms": round(1000 * percentile(latencies, 0.5), 1),
        "submit_p99_ms": round(1000 * percentile(latencies, 0.99), 1),
        "submit_max_ms": round(1000 * max(latencies, default=float("nan")), 1),
        "achieved_submits_per_s": round(len(latencies) / (t_end - t0), 1),
        "placements_per_s": round(placed / (t_end - t0), 1),
        "backlog_at_end": int(at_end["submits"] - at_end["placements"]),
        "backlog_max": int(max((s["submits"] - s["placements"] for _, s in samples), default=0)),
        "drained_after_s": None if drained_s is None else round(drained_s, 1),
        "placed_total": int(after["placements"] - before["placements"]),
        "server_cpu_s": round(server_cpu, 1),
        "server_cpu_per_submit_ms": round(1000 * server_cpu / max(1, len(latencies)), 2),
        "server_rss_mib": rss,
        "server_peak_rss_mib": peak,
        "setup_s": round(setup_s, 1),
        "load_avg_1m": round(max(load0, load1), 2),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
