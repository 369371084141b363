"""A cluster of real processes for the end-to-end tests: one ``gpupool server`` (its app under uvicorn,
configured only through GPUPOOL_* variables) with a one-SU SuperPOD fabric stored, and ``gpupool agent
--emulate`` processes for its hosts. Workloads are real child processes that print what they were given.

Run as root the agents isolate as a real node does (each job as its tenant's user, in its own cgroup): the
jobs run a Python any user may execute and print to their logs, which the tests read in the agents' state
directories; their working directories sit in a directory others may enter (``--work-dir``).

Short heartbeats (0.2 s) and a short lost-timeout keep it quick; every wait polls with a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from gpupool.agent.runtime import process_start_ticks
from gpupool.fabric import jsonio
from gpupool.fabric.generators import superpod
from isolation_support import python_for_others
from procs import PY, SERVER, free_port, healthy, stop, until

ADMIN = "e2e-admin"
HOSTS = ("dgx001", "dgx002", "dgx003", "dgx004")
LOST_AFTER_S = 3.0  # a loaded 2-core build box can delay a 0.2 s beat by a second or more


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
        until(lambda: healthy(self.http), 30, "server up")
        r = self.http.put(
            "/v1/fabric", content=self.fabric_path.read_text(), headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 200, r.text
        self.join = self.http.post("/v1/join-tokens", json={}).json()["token"]
        assert self.http.post("/v1/tenants", json={"name": "acme"}).status_code == 201
        self.agents: dict[str, subprocess.Popen[bytes]] = {}

    def start_agent(self, host: str, url: str | None = None) -> None:
        """An emulated agent for ``host`` talking to ``url`` (this cluster's server unless given: a replica's)."""
        argv = [PY, "-m", "gpupool", "agent", "--server", url or self.url, "--join-token", self.join, "--host", host]
        argv += ["--state-dir", str(self.root / host), "--emulate", "--fabric", str(self.fabric_path)]
        argv += ["--work-dir", str(self.work / host)]
        self.agents[host] = subprocess.Popen([*argv, "--stop-workloads-on-exit"], stderr=subprocess.DEVNULL)

    def restart(self) -> None:
        """Start the server again (after a kill): same settings, same port."""
        self.server = subprocess.Popen([PY, "-c", SERVER], env=self.env)
        until(lambda: healthy(self.http), 30, "server back")

    def replica(self) -> tuple[subprocess.Popen[bytes], str]:
        """Another server process on this cluster's settings and another port (one database: pass
        GPUPOOL_DATABASE_URL to the cluster); its process and URL. The caller stops it."""
        port = free_port()
        proc = subprocess.Popen([PY, "-c", SERVER], env=dict(self.env, GPUPOOL_PORT=str(port)))
        url = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=url, timeout=10) as http:
            until(lambda: healthy(http), 60, "replica up")
        return proc, url

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
        stop(self.server, 15)
        self.http.close()
        shutil.rmtree(self.work, ignore_errors=True)


def all_up(c: Cluster, hosts: tuple[str, ...] = HOSTS) -> bool:
    nodes = c.nodes()
    return set(hosts) <= set(nodes) and all(nodes[h]["state"] == "up" for h in hosts)


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
