"""End to end: the real server process and four real ``gpupool agent`` processes (emulated DGX H100 nodes of
a one-SU SuperPOD) on loopback; workloads are real child processes that print what they were given.

Run as root the agents isolate as a real node does (each job as its tenant's user, in its own cgroup): the
jobs run a Python any user may execute and print to their logs, which the test reads in the agents' state
directories; their working directories sit in a directory others may enter (``--work-dir``).

Short heartbeats (0.2 s) and a short lost-timeout (3 s) keep it quick; every wait polls with a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpupool.agent.runtime import process_start_ticks
from gpupool.fabric import jsonio
from gpupool.fabric.export.nccl import nccl_ib_hca
from gpupool.fabric.generators import superpod
from gpupool.fabric.parsers.nvidia_smi import parse_query_xml
from isolation_support import python_for_others

PY = sys.executable
ADMIN = "e2e-admin"
HOSTS = ("dgx001", "dgx002", "dgx003", "dgx004")
LOST_AFTER_S = 3.0  # a loaded 2-core build box can delay a 0.2 s beat by a second or more
# The server as a real process: its app under uvicorn, configured only through GPUPOOL_* variables.
SERVER = (
    "import uvicorn\n"
    "from gpupool.server.app import create_app\n"
    "from gpupool.server.settings import load_settings\n"
    "s = load_settings()\n"
    "uvicorn.run(create_app(s), host=s.host, port=s.port, log_level='warning', timeout_graceful_shutdown=3)\n"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(cond: Callable[[], Any], timeout_s: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what} not met within {timeout_s} s"
        time.sleep(0.05)


class Cluster:
    def __init__(self, root: Path, **settings: str) -> None:
        """``settings``: GPUPOOL_* variables of the server beyond the defaults below."""
        self.root = root
        self.fabric = superpod(1)
        self.fabric_path = root / "fabric.json"
        jsonio.save(self.fabric, self.fabric_path)
        (root / "data").mkdir()
        self.work = Path(tempfile.mkdtemp(prefix="gpupool-e2e-work-"))  # jobs' users may enter it, not list it
        self.work.chmod(0o711)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = dict(
            os.environ,
            GPUPOOL_DATA_DIR=str(root / "data"),
            GPUPOOL_ADMIN_TOKEN=ADMIN,
            GPUPOOL_PORT=str(port),
            GPUPOOL_HEARTBEAT_INTERVAL_S="0.2",
            GPUPOOL_NODE_LOST_AFTER_S=str(LOST_AFTER_S),
            GPUPOOL_SCHEDULE_PERIOD_S="0.2",
            GPUPOOL_STOP_GRACE_S="1.0",  # SIGTERM -> SIGKILL after 1 s: the cancel test waits 15 s, not 30
        )
        env.update(settings)
        self.env = env
        self.server = subprocess.Popen([PY, "-c", SERVER], env=env)
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
        until(self._healthy, 30, "server up")
        r = self.http.put(
            "/v1/fabric", content=self.fabric_path.read_text(), headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 200, r.text
        self.join = self.http.post("/v1/join-tokens", json={}).json()["token"]
        assert self.http.post("/v1/tenants", json={"name": "acme"}).status_code == 201
        self.agents: dict[str, subprocess.Popen[bytes]] = {}

    def _healthy(self) -> bool:
        try:
            return self.http.get("/healthz").status_code == 200
        except httpx.HTTPError:
            return False

    def start_agent(self, host: str) -> None:
        argv = [PY, "-m", "gpupool", "agent", "--server", self.url, "--join-token", self.join, "--host", host]
        argv += ["--state-dir", str(self.root / host), "--emulate", "--fabric", str(self.fabric_path)]
        argv += ["--work-dir", str(self.work / host)]
        self.agents[host] = subprocess.Popen([*argv, "--stop-workloads-on-exit"], stderr=subprocess.DEVNULL)

    def nodes(self) -> dict[str, dict[str, Any]]:
        return {n["name"]: n for n in self.http.get("/v1/nodes").json()["nodes"]}

    def submit(self, code: str, tasks: int, gpus: int, **kw: Any) -> str:
        body = {
            "command": [python_for_others(), "-c", code],
            "tasks": tasks,
            "gpus_per_task": gpus,
            "tenant": "acme",
            **kw,
        }
        r = self.http.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        return str(r.json()["job"]["id"])

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(self.http.get(f"/v1/jobs/{job_id}").json())

    def launch_records(self) -> Iterator[dict[str, Any]]:
        for host in HOSTS:
            for f in (self.root / host / "workloads").glob("*/launch.json"):
                yield json.loads(f.read_text())

    def close(self) -> None:
        for p in self.agents.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.agents.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=15)
        # What an agent killed with -9 left behind: ours only if the start time still matches.
        for rec in self.launch_records():
            now = process_start_ticks(rec["pid"])
            if now is not None and now[0] == rec["start_ticks"]:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(rec["pid"], signal.SIGKILL)
        self.server.send_signal(signal.SIGTERM)
        try:
            self.server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.server.kill()
        self.http.close()
        shutil.rmtree(self.work, ignore_errors=True)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        for h in HOSTS:
            c.start_agent(h)
        until(lambda: len(c.nodes()) == len(HOSTS) and {n["state"] for n in c.nodes().values()} == {"up"}, 90, "nodes")
        yield c
    finally:
        c.close()


def env_writer(then: str = "time.sleep(120)") -> str:
    """A workload that prints its env as one JSON line to its log, then ``then``."""
    return f"import json, os, signal, sys, time\nprint(json.dumps({{'env': dict(os.environ)}}), flush=True)\n{then}\n"


def ranks_of(c: Cluster, job_id: str) -> dict[str, dict[str, Any]]:
    """Assignment id -> what its workload printed, with the host whose agent ran it (<state>/<host>/workloads/)."""
    out = {}
    for host in HOSTS:
        for log in (c.root / host / "workloads").glob("*/stdout.log"):
            line = log.read_text().partition("\n")
            if not line[1]:
                continue  # not printed yet, or only half
            rec = json.loads(line[0])
            if rec["env"]["GPUPOOL_JOB_ID"] == job_id:
                out[log.parent.name] = {**rec, "host": host}
    return out


def ranks_when(c: Cluster, job_id: str, n: int) -> dict[str, dict[str, Any]] | None:
    r = ranks_of(c, job_id)
    return r if len(r) == n else None


def start_gang(c: Cluster) -> tuple[str, dict[str, dict[str, Any]]]:
    job = c.submit(env_writer(), tasks=2, gpus=8)
    until(lambda: c.job(job)["state"] == "running", 30, "gang running")
    return job, until(lambda: ranks_when(c, job, 2), 20, "both ranks wrote their env")


def test_gang_starts_on_two_hosts_with_ranks_and_rail_hcas(cluster: Cluster) -> None:
    c = cluster
    _, first = start_gang(c)
    ranks = sorted(first.values(), key=lambda r: int(r["env"]["RANK"]))
    assert [r["env"]["RANK"] for r in ranks] == ["0", "1"]
    assert {r["env"]["WORLD_SIZE"] for r in ranks} == {"2"}
    assert {r["env"]["MASTER_ADDR"] for r in ranks} == {"127.0.0.1"}
    assert len({r["env"]["MASTER_PORT"] for r in ranks}) == 1
    hosts = [r["host"] for r in ranks]
    assert len(set(hosts)) == 2  # one rank per 8-GPU host
    for r in ranks:
        # The GPUs by UUID, in PCI bus order: the index of each in the node's nvidia-smi listing.
        smi = parse_query_xml((c.root / r["host"] / "node" / "nvidia-smi-q.xml").read_text())
        uuids = [g.uuid for g in smi.gpus]
        gpus = [uuids.index(u) for u in r["env"]["CUDA_VISIBLE_DEVICES"].split(",")]
        assert r["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert gpus == list(range(8)) and r["env"]["LOCAL_RANK"] == "0"
        # Each rank's NCCL_IB_HCA names exactly its GPUs' rail HCAs, as the emulated node names them.
        assert r["env"]["NCCL_IB_HCA"] == nccl_ib_hca(c.fabric, r["host"], gpus)
        names = {n.split(":")[0] for n in r["env"]["NCCL_IB_HCA"].lstrip("=").split(",")}
        node_hcas = {h["name"] for h in c.nodes()[r["host"]]["hcas"]}
        assert names == node_hcas and len(names) == 8


def test_kill9_agent_node_is_lost_and_the_gang_is_requeued_whole_elsewhere(cluster: Cluster) -> None:
    c = cluster
    job, first = start_gang(c)
    victim, survivor = [r["host"] for r in sorted(first.values(), key=lambda r: int(r["env"]["RANK"]))]
    c.agents[victim].send_signal(signal.SIGKILL)
    t_kill = time.monotonic()
    until(lambda: c.nodes()[victim]["state"] == "lost", 15, "node lost")
    assert time.monotonic() - t_kill < LOST_AFTER_S + 3.0
    # Requeued whole: both ranks run again, neither on the lost node; the surviving old rank was stopped.
    try:
        again = until(lambda: ranks_when(c, job, 4), 30, "the gang re-launched")
    except AssertionError:
        events = c.http.get(f"/v1/jobs/{job}/events").json()["events"]
        pytest.fail(f"not re-launched: {c.job(job)}; events {[(e['action'], e['data']) for e in events]}")
    new = [r for aid, r in again.items() if aid not in first]
    assert sorted(r["env"]["RANK"] for r in new) == ["0", "1"]
    assert victim not in {r["host"] for r in new} and len({r["host"] for r in new}) == 2
    until(lambda: c.job(job)["state"] == "running", 15, "running again")
    old_survivor = next(aid for aid, r in first.items() if r["host"] == survivor)
    exit_file = c.root / survivor / "workloads" / old_survivor / "exit.json"
    until(exit_file.exists, 15, "the old rank on the surviving node stopped")
    assert json.loads(exit_file.read_text())["exit_code"] == -signal.SIGTERM


def test_an_xid_planted_in_the_kernel_log_drains_that_gpu(cluster: Cluster) -> None:
    c = cluster
    host = "dgx003"
    xml = (c.root / host / "node" / "nvidia-smi-q.xml").read_text()
    bus = xml.split('<gpu id="')[4].split('"')[0]  # GPU 3: "00000000:5D:00.0"
    line = f"[ 1234.567890] NVRM: Xid (PCI:0000:{bus.split(':')[1].lower()}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    with (c.root / host / "node" / "kern.log").open("a") as f:
        f.write(line)
    until(lambda: c.nodes()[host]["gpus"][3]["health"] == "bad", 15, "GPU 3 graded bad")
    assert [g["health"] for g in c.nodes()[host]["gpus"]].count("bad") == 1
    # Drained: an 8-GPU task no longer fits on that node, whatever else is free.
    jobs = [c.submit(env_writer(), tasks=1, gpus=8) for _ in range(4)]
    until(lambda: sum(c.job(j)["state"] == "running" for j in jobs) == 3, 30, "three 8-GPU jobs running")
    # "running" comes when the agent has launched the process; its env file follows a moment later.
    running = [j for j in jobs if c.job(j)["state"] == "running"]
    until(lambda: all(ranks_when(c, j, 1) for j in running), 20, "the three running jobs wrote their env")
    placed = {r["host"] for j in jobs for r in ranks_of(c, j).values()}
    assert placed == set(HOSTS) - {host}


IGNORE_TERM = (
    "import signal, sys, time\n"
    "def note(*_):\n"
    "    print('got SIGTERM at', time.monotonic(), flush=True)\n"
    "signal.signal(signal.SIGTERM, note)\n"
    "print('ready', flush=True)\n"
    "while True: time.sleep(0.01)\n"
)


@pytest.mark.slow
def test_a_cancelled_job_gets_sigterm_then_sigkill_after_the_grace(cluster: Cluster) -> None:
    c = cluster
    job = c.submit(IGNORE_TERM, tasks=1, gpus=1)
    until(lambda: c.job(job)["state"] == "running", 30, "running")
    logs = lambda: c.http.get(f"/v1/jobs/{job}/logs", params={"rank": 0}).json().get("text", "")  # noqa: E731
    until(lambda: "ready" in logs(), 10, "workload ready (through the server's log route)")
    assert c.http.post(f"/v1/jobs/{job}/cancel").status_code == 200
    records = until(lambda: [f for h in HOSTS for f in (c.root / h / "workloads").glob("*/exit.json")], 15, "killed")
    assert json.loads(records[0].read_text())["exit_code"] == -signal.SIGKILL
    out = (records[0].parent / "stdout.log").read_text()
    assert "got SIGTERM" in out  # it was asked first, and killed only when it ignored the request
