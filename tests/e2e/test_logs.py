"""Logs through the server only: a real ``gpupool server``, a real ``gpupool agent --emulate`` and real jobs;
``gpupool logs`` reads every rank's stdout and stderr, and ``-f`` follows one to its end (polling with an
offset, a MiB at most per answer), while the agent's log server refuses anyone but the server.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpupool.fabric import jsonio
from gpupool.fabric.generators import leaf_spine
from procs import ADMIN, PY, ServerProc, stop, until

# Two ranks; each writes numbered lines to stdout and stderr over a few seconds, then 3 MB of stdout at once.
JOB = """
import os, sys, time
rank = os.environ["RANK"]
for i in range(6):
    print(f"out {rank} {i}", flush=True)
    print(f"err {rank} {i}", file=sys.stderr, flush=True)
    time.sleep(0.4 if sys.argv[1] == "small" else 1.0)  # the big one gives its follower 6 s to start reading
if sys.argv[1] == "big":
    sys.stdout.write("".join(f"big {rank} {i:07d} \\u00e9\\u20ac\\n" for i in range(150_000)))
print(f"done {rank}", flush=True)
"""


@dataclass
class Cluster:
    server: ServerProc
    agent: subprocess.Popen[bytes]
    token: str
    state: Path

    def submit(self, *args: str, tasks: int = 2) -> str:
        body = {"command": [PY, "-c", JOB, *args], "tasks": tasks, "gpus_per_task": 1}
        r = httpx.post(f"{self.server.base}/v1/jobs", json=body, headers={"Authorization": f"Bearer {self.token}"})
        assert r.status_code == 201, r.text
        return str(r.json()["job"]["id"])

    def state_of(self, job: str) -> Any:
        return self.server.admin("GET", f"/v1/jobs/{job}")["state"]

    def cli(self, *args: str) -> subprocess.Popen[str]:
        env = dict(os.environ, GPUPOOL_SERVER=self.server.base, GPUPOOL_TOKEN=self.token)
        return subprocess.Popen([PY, "-m", "gpupool", *args], env=env, stdout=subprocess.PIPE, text=True)

    def file(self, job: str, rank: int, stream: str) -> str:
        for d in (self.state / "workloads").iterdir():
            if d.name.startswith(job) and d.name.rsplit(".", 1)[1] == str(rank):
                return (d / f"{stream}.log").read_text()
        raise AssertionError(f"no assignment of {job} rank {rank}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("logs")
    env = {"GPUPOOL_HEARTBEAT_INTERVAL_S": "0.2", "GPUPOOL_ACCESS_LOG": "false"}
    server = ServerProc(f"sqlite:///{root / 'logs.db'}", root, root / "server.log", env)
    fabric = leaf_spine(leaves=1, spines=1, hosts_per_leaf=1, gpus_per_host=8)
    jsonio.save(fabric, root / "fabric.json")
    server.admin("PUT", "/v1/fabric", json=jsonio.to_dict(fabric))
    join = server.admin("POST", "/v1/join-tokens", json={})["token"]
    token = server.tenant_token("acme")
    argv = [
        PY,
        "-m",
        "gpupool",
        "agent",
        "--server",
        server.base,
        "--join-token",
        join,
        "--host",
        fabric.hosts[0].name,
        "--interval",
        "0.2",
        "--state-dir",
        str(root / "agent"),
        "--emulate",
        "--fabric",
        str(root / "fabric.json"),
        "--stop-workloads-on-exit",
        "--isolation",
        "off",
    ]  # fmt: skip (isolation: tests/e2e/test_isolation.py)
    agent = subprocess.Popen(argv, stdout=(root / "agent.log").open("wb"), stderr=subprocess.STDOUT)
    try:
        until(lambda: [n["state"] for n in server.admin("GET", "/v1/nodes")["nodes"]] == ["up"], 60, "agent up")
        yield Cluster(server, agent, token, root / "agent")
    finally:
        stop(agent)
        server.stop()


def test_logs_follow_every_rank_and_stream_to_the_end(cluster: Cluster) -> None:
    job = cluster.submit("small")
    # Started while the job may still be pending: -f waits for it to start, then follows it to its end.
    follows = {(rank, stream): cluster.cli("logs", job, "-f", "--rank", str(rank), *flag)
               for rank in (0, 1) for stream, flag in (("stdout", ()), ("stderr", ("--stderr",)))}  # fmt: skip
    outs = {k: p.communicate(timeout=120)[0] for k, p in follows.items()}
    assert all(p.returncode == 0 for p in follows.values())
    assert cluster.state_of(job) == "finished"
    for (rank, stream), out in outs.items():
        prefix = "out" if stream == "stdout" else "err"
        want = [f"{prefix} {rank} {i}" for i in range(6)] + ([f"done {rank}"] if stream == "stdout" else [])
        assert out.splitlines() == want, (rank, stream, out)
        assert out == cluster.file(job, rank, stream)  # byte for byte what the job wrote


def test_follow_carries_a_log_larger_than_one_answer_whole(cluster: Cluster) -> None:
    job = cluster.submit("big", tasks=1)
    p = cluster.cli("logs", job, "-f", "--tail", "1")
    out = p.communicate(timeout=180)[0]
    assert p.returncode == 0
    whole = cluster.file(job, 0, "stdout")
    assert len(whole.encode()) > 2 << 20  # 3 MB: several answers of a MiB, each cut at a whole character
    assert whole.endswith(out) and out.endswith("done 0\n") and out.count("big 0 ") == 150_000


def test_the_api_reads_a_ranks_tail_and_from_an_offset(cluster: Cluster) -> None:
    job = cluster.submit("small")
    until(lambda: cluster.state_of(job) == "finished", 60, "job finished")
    h = {"Authorization": f"Bearer {cluster.token}"}
    r = httpx.get(
        f"{cluster.server.base}/v1/jobs/{job}/logs", params={"rank": 1, "stream": "stderr", "tail": 2}, headers=h
    )
    assert r.status_code == 200 and r.json()["text"] == "err 1 4\nerr 1 5\n", r.text
    size = len(cluster.file(job, 1, "stderr").encode())
    assert r.json()["next_offset"] == size
    r = httpx.get(f"{cluster.server.base}/v1/jobs/{job}/logs", params={"rank": 1, "offset": 8}, headers=h)
    assert r.json()["text"] == cluster.file(job, 1, "stdout")[8:]
    assert httpx.get(f"{cluster.server.base}/v1/jobs/{job}/logs", params={"offset": -1}, headers=h).status_code == 422


def test_the_agents_log_server_refuses_an_unsigned_request(cluster: Cluster) -> None:
    url = cluster.server.admin("GET", "/v1/nodes")["nodes"][0]["agent_url"]
    aid = next((cluster.state / "workloads").iterdir()).name
    r = httpx.get(f"{url}/logs/{aid}", headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 401 and "no X-Gpupool-Signature" in r.text
