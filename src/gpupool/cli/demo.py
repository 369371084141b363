"""``gpupool demo``: a whole gpupool on loopback: the server, emulated agents, a mixed workload; Ctrl-C ends it.

The fabric is a two-SU DGX H100 SuperPOD (``superpod(2)``: 63 hosts, 8 rails). Agents run for ``--hosts`` of
them, half from each SU (16 by default: 128 GPUs), one ``gpupool agent --emulate`` process each; the other
hosts stay in the stored fabric without an agent, so the scheduler never places on them. Every task is a
real short child process. Everything the demo starts is stopped when it ends, and it checks that.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from gpupool.agent.runtime import process_start_ticks
from gpupool.domain.errors import InputError
from gpupool.fabric import jsonio
from gpupool.fabric.generators import superpod
from gpupool.fabric.model import Domain


def _task(seconds: float, what: str) -> list[str]:
    # /bin/sh, not this Python: run as root the agents run each job as its tenant's user, who may not be
    # allowed into the directory this interpreter lives in (a virtual environment under /root, say).
    script = (
        f'echo "{what} rank $RANK of $WORLD_SIZE on GPUs $CUDA_VISIBLE_DEVICES HCAs $NCCL_IB_HCA"; '
        f"sleep {seconds:g}; echo done"
    )
    return ["/bin/sh", "-c", script]


def _wave(now: float) -> list[dict[str, Any]]:
    """One round of the mixed workload: inference services, training gangs, deadline batch jobs, two tenants."""
    jobs: list[dict[str, Any]] = []
    for i in range(4):
        jobs.append({"name": f"serve-{i}", "tenant": "vision", "tasks": 1, "gpus_per_task": 1, "priority": "high",
                     "command": _task(8, "inference")})  # fmt: skip
    for i, tasks in enumerate((2, 2, 4)):
        jobs.append({"name": f"train-{i}", "tenant": "language", "tasks": tasks, "gpus_per_task": 8,
                     "rail_aligned": True, "topology": {"scope": "su", "mode": "preferred"},
                     "preemptible": True, "command": _task(6, "training")})  # fmt: skip
    for i in range(6):
        jobs.append({"name": f"batch-{i}", "tenant": ("vision", "language")[i % 2], "tasks": 1, "gpus_per_task": 2,
                     "estimated_runtime_s": 5.0, "deadline_s": now + 600.0, "command": _task(4, "batch")})  # fmt: skip
    return jobs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Stop(Exception):
    pass


def demo(
    hosts: Annotated[int, typer.Option("--hosts", help="Emulated hosts with an agent (half per SU).")] = 16,
    duration: Annotated[float, typer.Option("--duration", help="Seconds to run (0: until Ctrl-C).")] = 0.0,
    interval: Annotated[float, typer.Option("--interval", help="Agent heartbeat seconds.")] = 1.0,
    wave_s: Annotated[float, typer.Option("--wave", help="Submit a new round of jobs this often.")] = 20.0,
    workdir: Annotated[Path | None, typer.Option("--workdir", help="Keep state here (default: a temp dir).")] = None,
) -> None:
    """Start a server and emulated GPU nodes on loopback, submit a mixed workload, run until Ctrl-C."""
    fabric = superpod(2)
    su = fabric.domain_ids(Domain.SU)
    per_su = [[h.name for i, h in enumerate(fabric.hosts) if su[i] == s] for s in (0, 1)]
    if not 1 <= hosts <= len(per_su[0]) + len(per_su[1]):
        raise InputError(f"between 1 and {len(fabric.hosts)}, not {hosts}", source="--hosts")
    chosen = per_su[0][: (hosts + 1) // 2] + per_su[1][: hosts // 2]
    root = workdir or Path(tempfile.mkdtemp(prefix="gpupool-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    fabric_path = root / "fabric.json"
    jsonio.save(fabric, fabric_path)
    admin = secrets.token_urlsafe(24)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, GPUPOOL_DATA_DIR=str(root / "data"), GPUPOOL_ADMIN_TOKEN=admin, GPUPOOL_PORT=str(port),
               GPUPOOL_HOST="127.0.0.1", GPUPOOL_LOG_LEVEL="warning", GPUPOOL_HEARTBEAT_INTERVAL_S=str(interval),
               GPUPOOL_NODE_LOST_AFTER_S=str(max(10.0, 10 * interval)), GPUPOOL_STOP_GRACE_S="2")  # fmt: skip
    procs: list[subprocess.Popen[bytes]] = []
    # The jobs' working directories: a directory their users may enter (the state may sit in a private one).
    work = Path(tempfile.mkdtemp(prefix="gpupool-demo-work-"))
    work.chmod(0o711)
    stopping = [False]

    def on_signal(_sig: int, _frame: object) -> None:
        if not stopping[0]:
            stopping[0] = True
            raise _Stop

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    server_log = (root / "server.log").open("wb")
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=10)
    submitted = 0
    try:
        # Own sessions: Ctrl-C reaches the demo only, which then stops everything in order.
        procs.append(subprocess.Popen([sys.executable, "-m", "gpupool", "server"], env=env, stdout=server_log,
                                      stderr=subprocess.STDOUT, start_new_session=True))  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if http.get("/healthz").status_code == 200:
                    break
            if procs[0].poll() is not None or time.monotonic() > deadline:
                raise InputError(f"the server did not start; see {root / 'server.log'}", source="demo")
            time.sleep(0.1)
        http.put("/v1/fabric", content=fabric_path.read_text(), headers={"Content-Type": "application/json"})
        for tenant in ("vision", "language"):
            http.post("/v1/tenants", json={"name": tenant})
        join = http.post("/v1/join-tokens", json={}).json()["token"]
        token = http.post("/v1/tokens", json={"tenant": "vision"}).json()["token"]
        for h in chosen:
            argv = [sys.executable, "-m", "gpupool", "agent", "--server", url, "--host", h,
                    "--state-dir", str(root / "agents" / h), "--work-dir", str(work / h), "--emulate",
                    "--fabric", str(fabric_path), "--interval", str(interval), "--stop-workloads-on-exit"]  # fmt: skip
            log = (root / "agents").joinpath(f"{h}.log")
            log.parent.mkdir(exist_ok=True)
            procs.append(
                subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
                                 env={**os.environ, "GPUPOOL_JOIN_TOKEN": join})  # not in argv: others may read it
            )  # fmt: skip
        (root / "pids.json").write_text(json.dumps([p.pid for p in procs]))
        typer.echo(f"gpupool demo: {len(chosen)} emulated DGX H100 hosts ({8 * len(chosen)} GPUs) of a 2-SU SuperPOD")
        typer.echo(f"  API        {url}/docs   (admin token {admin})")
        typer.echo(f"  dashboard  {url}/")
        typer.echo(f"  jobs       GPUPOOL_SERVER={url} GPUPOOL_TOKEN={token} gpupool jobs")
        typer.echo(f"  state      {root}   (server.log, agents/<host>.log, agents/<host>/workloads/*/stdout.log)")
        typer.echo("  Ctrl-C stops everything." if duration <= 0 else f"  running for {duration:g} s")
        start = time.monotonic()
        next_wave = start
        next_status = start + 5
        while duration <= 0 or time.monotonic() - start < duration:
            now = time.monotonic()
            if now >= next_wave:
                for body in _wave(time.time()):
                    r = http.post("/v1/jobs", json=body)
                    submitted += r.status_code == 201
                next_wave = now + wave_s
            if now >= next_status:
                typer.echo("  " + _counts(http))
                next_status = now + 5
            time.sleep(0.2)
    except _Stop:
        typer.echo("stopping")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
        summary = ""
        with contextlib.suppress(httpx.HTTPError, ValueError):
            summary = _counts(http)
        _cleanup(procs, root)
        shutil.rmtree(work, ignore_errors=True)
        http.close()
        server_log.close()
        typer.echo(f"submitted {submitted} jobs; {summary}; every process stopped")


def _counts(http: httpx.Client) -> str:
    jobs = http.get("/v1/jobs", params={"limit": 1000}).json()["jobs"]
    counts: dict[str, int] = {}
    for j in jobs:
        counts[j["state"]] = counts.get(j["state"], 0) + 1
    return "jobs: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def _cleanup(procs: list[subprocess.Popen[bytes]], root: Path) -> None:
    """Agents first (they stop their workloads), then the server; then anything a workload left behind."""
    agents, server = procs[1:], procs[:1]
    for group in (agents, server):
        for p in group:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in group:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    for rec in (root / "agents").glob("*/workloads/*/launch.json"):
        with contextlib.suppress(ValueError, KeyError, OSError):
            meta = json.loads(rec.read_text())
            now = process_start_ticks(int(meta["pid"]))
            if now is not None and now[0] == int(meta["start_ticks"]):  # still ours, not a reused pid
                os.killpg(int(meta["pid"]), signal.SIGKILL)
