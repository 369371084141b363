"""``gpupool demo``: a whole gpupool on loopback: the server, emulated agents, a mixed workload; Ctrl-C ends it.

The fabric is a two-SU DGX H100 SuperPOD (``superpod(2)``: 63 hosts, 8 rails). Agents run for ``--hosts`` of
them, half from each SU (16 by default: 128 GPUs), one ``gpupool agent --emulate`` process each; the other
hosts stay in the stored fabric without an agent, so the scheduler never places on them. Every task is a
real short child process. Everything the demo starts is stopped when it ends, and it checks that.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
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
        jobs.append({"name": f"serve-{i}", "tenant": "vision", "pool": "inference", "tasks": 1, "gpus_per_task": 1,
                     "priority": "high", "command": _task(8, "inference")})  # fmt: skip
    for i, tasks in enumerate((2, 2, 4)):
        jobs.append({"name": f"train-{i}", "tenant": "language", "tasks": tasks, "gpus_per_task": 8,
                     "rail_aligned": True, "topology": {"scope": "su", "mode": "preferred"},
                     "preemptible": True, "command": _task(6, "training")})  # fmt: skip
    for i in range(6):
        jobs.append({"name": f"batch-{i}", "tenant": ("vision", "language")[i % 2], "tasks": 1, "gpus_per_task": 2,
                     "estimated_runtime_s": 5.0, "deadline_s": now + 600.0, "command": _task(4, "batch")})  # fmt: skip
    return jobs


# The inference pool: a quarter of the second SU's hosts by day, an eighth by night (its first hosts in fabric
# order, which are the ones with agents), lent to training when idle. Shown on the pools page.
CALENDAR = """timezone = "UTC"
default_pool = "default"

[[pool]]
name = "inference"
sus = [2]
share = 0.25
share_outside = 0.125
windows = [{ days = "mon-sun", start = "08:00", end = "20:00" }]
"""
STATUS_EVERY_S = 4.0  # not uvicorn's keep-alive (5 s): a poll on a connection the server is closing is reset


def _quotas(gpus: int) -> list[tuple[str, dict[str, Any]]]:
    """Half the GPUs each for the two tenants, borrowing from each other (one cohort); vision's services
    their own quota in the inference pool."""
    half = max(1, gpus // 2)
    return [
        ("vision", {"pool": "default", "nominal_gpus": half, "cohort": "demo"}),
        ("language", {"pool": "default", "nominal_gpus": half, "cohort": "demo"}),
        ("vision", {"pool": "inference", "nominal_gpus": max(1, gpus // 8), "cohort": "demo"}),
    ]


def _try(call: Callable[[], httpx.Response], what: str) -> httpx.Response | None:
    """``call`` with one retry after a transport error (a reset connection, a timeout); None, said once on
    stderr, if it fails again or the server answers 5xx. The demo goes on: a status line or a submit is not
    worth stopping the whole cluster for."""
    for attempt in (1, 2):
        try:
            r = call()
        except httpx.TransportError as e:
            if attempt == 2:
                typer.echo(f"  ({what}: {type(e).__name__}; carrying on)", err=True)
                return None
            continue
        if r.status_code >= 500:
            typer.echo(f"  ({what}: HTTP {r.status_code}; carrying on)", err=True)
            return None
        return r
    return None


def _must(call: Callable[[], httpx.Response], what: str) -> httpx.Response:
    """A setup call, with ``_try``'s retry; the demo cannot go on without it, so a second failure ends it
    with one line (its processes are stopped by the caller's cleanup)."""
    r = _try(call, what)
    if r is None or (r.status_code >= 400 and r.status_code != 409):
        said = "no answer" if r is None else f"HTTP {r.status_code}: {r.text[:200]}"
        raise InputError(f"the demo's server refused its setup ({what}): {said}", source="demo")
    return r


def _submit(http: httpx.Client, body: dict[str, Any], key: str) -> bool:
    """Submit one job; the idempotency key makes a retried submit stored once. Whether it was stored."""
    r = _try(lambda: http.post("/v1/jobs", json=body, headers={"Idempotency-Key": key}), "submit")
    return r is not None and r.status_code == 201


def _cli() -> str:
    """How to call ``gpupool`` from a shell: the name if it is on PATH, else this environment's script (or
    this interpreter with ``-m``), so the printed line works when pasted."""
    script = Path(sys.executable).with_name("gpupool")
    found = shutil.which("gpupool")
    if found is not None and script.exists() and Path(found).resolve() == script.resolve():
        return "gpupool"
    return str(script) if script.exists() else f"{sys.executable} -m gpupool"


def _check(hosts: int, most: int, duration: float, interval: float, wave_s: float) -> None:
    if not 1 <= hosts <= most:
        raise InputError(f"between 1 and {most}, not {hosts}", source="--hosts")
    if not (math.isfinite(duration) and 0 <= duration <= 30 * 86_400):
        raise InputError(f"seconds from 0 (until Ctrl-C) to 30 days, not {duration:g}", source="--duration")
    if not (math.isfinite(interval) and 0.1 <= interval <= 60):
        raise InputError(f"heartbeat seconds from 0.1 to 60, not {interval:g}", source="--interval")
    if not (math.isfinite(wave_s) and 1 <= wave_s <= 86_400):
        raise InputError(f"seconds between rounds of jobs from 1 to 86,400, not {wave_s:g}", source="--wave")


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
    _check(hosts, len(per_su[0]) + len(per_su[1]), duration, interval, wave_s)
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
        doc = fabric_path.read_text()
        _must(lambda: http.put("/v1/fabric", content=doc, headers={"Content-Type": "application/json"}), "fabric")
        for tenant in ("vision", "language"):  # a retried create answers 409: it is there, which is the point
            _must(partial(http.post, "/v1/tenants", json={"name": tenant}), "tenant")
        for tenant, quota in _quotas(8 * len(chosen)):
            _must(partial(http.put, f"/v1/tenants/{tenant}/quotas", json=quota), "quota")
        _must(lambda: http.put("/v1/pools/default", json={"calendar_toml": CALENDAR}), "pool calendar")
        join = _must(lambda: http.post("/v1/join-tokens", json={}), "join token").json()["token"]
        token = _must(lambda: http.post("/v1/tokens", json={"tenant": "vision"}), "token").json()["token"]
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
        typer.echo(f"  jobs       GPUPOOL_SERVER={url} GPUPOOL_TOKEN={token} {_cli()} jobs")
        typer.echo(f"  state      {root}   (server.log, agents/<host>.log, agents/<host>/workloads/*/stdout.log)")
        typer.echo("  Ctrl-C stops everything." if duration <= 0 else f"  running for {duration:g} s")
        start = time.monotonic()
        next_wave = start
        next_status = start + STATUS_EVERY_S
        rounds = 0
        while duration <= 0 or time.monotonic() - start < duration:
            now = time.monotonic()
            if now >= next_wave:
                rounds += 1
                for i, body in enumerate(_wave(time.time())):
                    submitted += _submit(http, body, f"demo-{rounds}-{i}")
                next_wave = now + wave_s
            if now >= next_status:
                line = _counts(http)
                if line:
                    typer.echo("  " + line)
                next_status = now + STATUS_EVERY_S
            time.sleep(0.2)
    except _Stop:
        typer.echo("stopping")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
        summary = _counts(http) or "jobs: unknown"
        _cleanup(procs, root)
        shutil.rmtree(work, ignore_errors=True)
        http.close()
        server_log.close()
        typer.echo(f"submitted {submitted} jobs; {summary}; every process stopped")


def _counts(http: httpx.Client) -> str:
    """The jobs by state, or "" when the server does not answer (the demo carries on)."""
    r = _try(lambda: http.get("/v1/jobs", params={"limit": 1000}), "status")
    if r is None:
        return ""
    try:
        jobs = r.json()["jobs"]
    except (ValueError, KeyError):
        return ""
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
