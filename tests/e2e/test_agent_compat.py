"""The previous release's agent against the current server: real processes on loopback.

"Previous release" is a commit pinned below: a release is a commit on main that changes ``__version__``
in ``src/gpupool/__init__.py`` (docs/operations.md). When a release is cut, this pin moves to the one
before it. The old agent runs from that commit's ``src/`` (``git archive``) on this environment's libraries,
so the test needs the repository's history (a full clone); without it the test fails and says so.

Invariant: an agent one release older registers, heartbeats, is told to launch a job's rank, runs it and
reports it, and the job finishes, whatever the current server has added to the protocol since.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpupool.fabric import jsonio
from gpupool.fabric.generators import leaf_spine
from procs import until

PREVIOUS_RELEASE = "d3c2f50235271cbdf1529d344ed868cad0649ff3"  # 0.2.0: the first tolerant agent
REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
ADMIN = "compat-admin"


def previous_release_src(dest: Path) -> Path:
    """The pinned commit's ``src/`` under ``dest``, from git (no worktree left behind)."""
    r = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", PREVIOUS_RELEASE, "src/gpupool"],
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 0, f"needs the git history with commit {PREVIOUS_RELEASE} (a full clone): {r.stderr!r}"
    with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest / "src"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, httpx.Client]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(
        os.environ,
        GPUPOOL_DATA_DIR=str(tmp_path / "data"),
        GPUPOOL_ADMIN_TOKEN=ADMIN,
        GPUPOOL_PORT=str(port),
        GPUPOOL_HEARTBEAT_INTERVAL_S="0.2",
        GPUPOOL_SCHEDULE_PERIOD_S="0.2",
        GPUPOOL_LOG_LEVEL="warning",
    )
    proc = subprocess.Popen([PY, "-m", "gpupool", "server"], env=env)
    url = f"http://127.0.0.1:{port}"
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)

    def healthy() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return http.get("/healthz").status_code == 200
        return False

    try:
        until(healthy, 60, "server up")
        yield url, http
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        http.close()


def test_the_previous_releases_agent_runs_a_job_for_the_current_server(
    tmp_path: Path, server: tuple[str, httpx.Client]
) -> None:
    url, http = server
    old_src = previous_release_src(tmp_path / "old")
    env = dict(os.environ, PYTHONPATH=str(old_src))
    where = subprocess.run(
        [PY, "-c", "import gpupool.agent.daemon as d; print(d.__file__)"], env=env, capture_output=True, text=True
    )
    assert where.stdout.startswith(str(old_src)), where  # the old code runs, not this checkout's

    fabric = leaf_spine(leaves=1, spines=1, hosts_per_leaf=1, gpus_per_host=8)
    host = fabric.hosts[0].name
    fabric_path = tmp_path / "fabric.json"
    jsonio.save(fabric, fabric_path)
    r = http.put("/v1/fabric", content=fabric_path.read_text(), headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    join = http.post("/v1/join-tokens", json={}).json()["token"]
    assert http.post("/v1/tenants", json={"name": "acme"}).status_code == 201
    argv = [PY, "-m", "gpupool", "agent", "--server", url, "--join-token", join, "--host", host, "--interval", "0.2"]
    argv += ["--state-dir", str(tmp_path / "agent"), "--emulate", "--fabric", str(fabric_path)]
    log = (tmp_path / "agent.log").open("wb")
    agent = subprocess.Popen([*argv, "--stop-workloads-on-exit"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        until(lambda: [n["state"] for n in http.get("/v1/nodes").json()["nodes"]] == ["up"], 60, "old agent up")
        body = {"command": [PY, "-c", "print('hello from a job')"], "gpus_per_task": 2, "tenant": "acme"}
        r = http.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        job = r.json()["job"]["id"]
        state = lambda: http.get(f"/v1/jobs/{job}").json()["state"]  # noqa: E731
        until(lambda: state() in ("finished", "failed"), 60, "job ended")
        assert state() == "finished", (tmp_path / "agent.log").read_text()
        logs = http.get(f"/v1/jobs/{job}/logs", params={"rank": 0}).json()["text"]
        assert "hello from a job" in logs
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=15)
        except subprocess.TimeoutExpired:
            agent.kill()
        log.close()
