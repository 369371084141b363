"""Fuzzing what tenants may submit, through the real API to a real agent process (an emulated node).

Invariant: every submission is refused (4xx, nothing stored) or accepted, and every accepted job then runs
or fails with a reason; the agent process never exits. Hypothesis draws commands and environments from
awkward text (control characters, NULs, '=', non-ASCII, empty strings, long values) around a few real
programs. Bounded: 30 submissions, the same ones every run (derandomized).
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.fabric import jsonio
from gpupool.fabric.generators import superpod
from isolation_support import open_dir
from procs import PY, SERVER, healthy, stop, until

ADMIN = "fuzz-admin"
DONE = ("finished", "failed", "cancelled")


@dataclass
class Pool:
    http: httpx.Client
    tenant: dict[str, str]
    agent: subprocess.Popen[bytes]


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    root = tmp_path_factory.mktemp("fuzz")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    fabric = root / "fabric.json"
    jsonio.save(superpod(1), fabric)
    (root / "data").mkdir()
    env = dict(os.environ, GPUPOOL_DATA_DIR=str(root / "data"), GPUPOOL_ADMIN_TOKEN=ADMIN, GPUPOOL_PORT=str(port),
               GPUPOOL_HEARTBEAT_INTERVAL_S="0.1", GPUPOOL_NODE_LOST_AFTER_S="10", GPUPOOL_SCHEDULE_PERIOD_S="0.1",
               GPUPOOL_STOP_GRACE_S="0.5")  # fmt: skip
    server = subprocess.Popen([PY, "-c", SERVER], env=env)
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=20)
    agent: subprocess.Popen[bytes] | None = None
    with open_dir("gpupool-fuzz-") as place:
        try:
            until(lambda: healthy(http), 60, "server up")
            assert http.put("/v1/fabric", content=fabric.read_text(), headers={"Content-Type": "application/json"})
            join = http.post("/v1/join-tokens", json={}).json()["token"]
            http.post("/v1/tenants", json={"name": "fuzz"})
            token = http.post("/v1/tokens", json={"tenant": "fuzz"}).json()["token"]
            argv = [PY, "-m", "gpupool", "agent", "--server", str(http.base_url), "--host", "dgx001", "--emulate",
                    "--fabric", str(fabric), "--state-dir", str(root / "dgx001"), "--work-dir", str(place / "work"),
                    "--stop-workloads-on-exit"]  # fmt: skip
            agent = subprocess.Popen(argv, env={**os.environ, "GPUPOOL_JOIN_TOKEN": join}, stderr=subprocess.DEVNULL)
            until(lambda: [n["state"] for n in http.get("/v1/nodes").json()["nodes"]] == ["up"], 60, "node up")
            yield Pool(http, {"Authorization": f"Bearer {token}"}, agent)
            assert agent.poll() is None, f"the agent exited with {agent.returncode}"
        finally:
            if agent is not None:
                stop(agent)
            stop(server)
            http.close()


# Text that has broken agents: NULs, '=', newlines and other control characters, non-ASCII, nothing at all.
awkward = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12) | st.sampled_from(
    ["", "\x00", "a\x00b", "=", "A=B", "\n", "\t", "-", "--help", "ü", "\x7f", "\ufeff", "x" * 300]
)
programs = st.sampled_from(["/bin/true", "/bin/false", "/bin/echo", "/usr/bin/env", "/no/such/program", "true"])
commands = st.tuples(programs | awkward, st.lists(awkward, max_size=4)).map(lambda t: [t[0], *t[1]])
keys = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True) | awkward
envs = st.dictionaries(keys, awkward, max_size=4)


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,  # the same 40 submissions every run: a failure here reproduces
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(command=commands, env=envs)
def test_every_accepted_job_runs_or_fails_with_a_reason_and_the_agent_stays_up(
    pool: Pool, command: list[str], env: dict[str, str]
) -> None:
    r = pool.http.post("/v1/jobs", json={"command": command, "env": env}, headers=pool.tenant)
    assert r.status_code in (201, 422), r.text[:300]
    if r.status_code == 422:
        assert r.json()["detail"][0]["loc"][:2] in (["body", "command"], ["body", "env"]), r.text[:300]
        return
    job_id = r.json()["job"]["id"]
    job = until(lambda: (j := pool.http.get(f"/v1/jobs/{job_id}").json())["state"] in DONE and j, 30, "job over")
    if job["state"] == "failed":
        assert job["reason"].startswith("rank 0 on dgx001 exited with"), job
    if command[0] == "/no/such/program":
        assert job["reason"].endswith("exited with 127: cannot start '/no/such/program': No such file or directory")
    assert pool.agent.poll() is None, "the agent exited"
    nodes = pool.http.get("/v1/nodes").json()["nodes"]
    assert [n["state"] for n in nodes] == ["up"]
