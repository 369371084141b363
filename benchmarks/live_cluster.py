"""A live cluster for benchmarks: one real ``gpupool server`` process and real ``gpupool agent --emulate``
processes on loopback, in a temporary directory; workloads are real child processes.

Used by launch_latency.py and sim_fidelity.py. ``WORKLOAD`` is the job's program: it prints the wall time
it started at as its first line of output (the agent keeps each assignment's stdout in its state directory),
sleeps ``$SLEEP_S`` seconds, prints the wall time it ends at and exits 0. The server and the agents run at default settings unless ``env``
overrides the server's: an agent run as root runs jobs as their tenant's user, in a cgroup, so the workload's
Python must be one that user may execute (``PYTHON``: this one unless it sits under a private directory).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from gpupool.fabric import Fabric, jsonio

PY = sys.executable
ADMIN = "bench-admin"
WORKLOAD = (
    "import os, time\n"
    "print(repr(time.time()), flush=True)\n"
    "time.sleep(float(os.environ.get('SLEEP_S', '0')))\n"
    "print(repr(time.time()), flush=True)\n"
)


def _others_may_run(path: Path) -> bool:
    real = path.resolve()
    return all(p.stat().st_mode & stat.S_IXOTH for p in (real, *real.parents))


# The tenant's user runs the workload: a virtual environment under /root is not theirs to execute.
PYTHON = PY if _others_may_run(Path(PY)) else (shutil.which("python3", path="/usr/bin:/bin") or PY)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(cond: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not met within {timeout_s} s")
        time.sleep(0.05)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process (not its children), from /proc."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class LiveCluster:
    def __init__(self, root: Path, fabric: Fabric, env: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.fabric = fabric
        self.fabric_path = root / "fabric.json"
        jsonio.save(fabric, self.fabric_path)
        (root / "data").mkdir()
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        server_env = dict(
            os.environ,
            GPUPOOL_DATA_DIR=str(root / "data"),
            GPUPOOL_ADMIN_TOKEN=ADMIN,
            GPUPOOL_PORT=str(port),
            GPUPOOL_LOG_LEVEL="warning",
            **(env or {}),
        )
        self.log = (root / "server.log").open("w")
        self.server = subprocess.Popen(
            [PY, "-m", "gpupool", "server"], env=server_env, stdout=self.log, stderr=self.log
        )
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        until(self._healthy, 60, "server up")
        r = self.http.put(
            "/v1/fabric", content=self.fabric_path.read_text(), headers={"Content-Type": "application/json"}
        )
        r.raise_for_status()
        self.join = self.http.post("/v1/join-tokens", json={}).json()["token"]
        self.http.post("/v1/tenants", json={"name": "bench"}).raise_for_status()

    def _healthy(self) -> bool:
        if self.server.poll() is not None:
            raise RuntimeError(f"server exited with {self.server.returncode}; see {self.root / 'server.log'}")
        try:
            return self.http.get("/healthz").status_code == 200
        except httpx.HTTPError:
            return False

    def start_agents(self, hosts: list[str] | None = None, timeout_s: float = 120) -> None:
        names = hosts or [h.name for h in self.fabric.hosts]
        for host in names:
            argv = [PY, "-m", "gpupool", "agent", "--server", self.url, "--join-token", self.join, "--host", host]
            argv += ["--state-dir", str(self.root / host), "--emulate", "--fabric", str(self.fabric_path)]
            self.agents[host] = subprocess.Popen(
                [*argv, "--stop-workloads-on-exit"],
                stdout=subprocess.DEVNULL,
                stderr=(self.root / f"{host}.log").open("w"),
            )

        def all_up() -> bool:
            nodes = self.http.get("/v1/nodes").json()["nodes"]
            return sum(1 for n in nodes if n["state"] == "up" and n["name"] in names) == len(names)

        until(all_up, timeout_s, "every agent registered and up")

    def submit(self, sleep_s: float, tasks: int, gpus_per_task: int, **kw: Any) -> str:
        body = {
            "command": [PYTHON, "-c", WORKLOAD],
            "env": {"SLEEP_S": f"{sleep_s:.3f}"},
            "tasks": tasks,
            "gpus_per_task": gpus_per_task,
            "tenant": "bench",
            **kw,
        }
        r = self.http.post("/v1/jobs", json=body)
        r.raise_for_status()
        return str(r.json()["job"]["id"])

    def states(self) -> dict[str, str]:
        """Job id -> state, for every job of the benchmark's tenant (one request per 1,000 jobs)."""
        out: dict[str, str] = {}
        offset = 0
        while True:  # oldest first: no page shifts under the next one
            params: dict[str, Any] = {"tenant": "bench", "limit": 1000, "offset": offset, "sort": "submitted"}
            page = self.http.get("/v1/jobs", params={**params, "order": "asc"}).json()
            out.update((j["id"], j["state"]) for j in page["jobs"])
            offset += len(page["jobs"])
            if offset >= page["total"] or not page["jobs"]:
                return out

    def wait_finished(self, ids: list[str], timeout_s: float) -> None:
        """Until every job of ``ids`` is finished; on timeout the error counts the others by state."""
        deadline = time.monotonic() + timeout_s
        while True:
            states = self.states()
            left = [j for j in ids if states.get(j) != "finished"]
            if not left:
                return
            failed = [j for j in left if states.get(j) in ("failed", "cancelled", "timeout")]
            if failed:
                job = self.job(failed[0])
                raise RuntimeError(f"{len(failed)} jobs {job['state']}; {failed[0]}: {job['reason']}")
            if time.monotonic() > deadline:
                counts: dict[str, int] = {}
                for j in left:
                    counts[states.get(j, "unknown")] = counts.get(states.get(j, "unknown"), 0) + 1
                raise TimeoutError(f"{len(left)} jobs not finished within {timeout_s} s: {counts} ({left[:3]})")
            time.sleep(0.5)

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(self.http.get(f"/v1/jobs/{job_id}").json())

    def events(self, job_id: str) -> list[dict[str, Any]]:
        return list(self.http.get(f"/v1/jobs/{job_id}/events").json()["events"])

    def event_time(self, job_id: str, action: str) -> float:
        """When the job's first ``action`` event (``job.placed``, ``job.finished``, ...) was written."""
        return min(e["at_s"] for e in self.events(job_id) if e["action"] == action)

    def started_files(self, job_id: str) -> dict[str, float]:
        """Assignment id -> the wall time its workload printed at start, for every rank of every run of the job."""
        return self._printed(job_id, 0)

    def ended_files(self, job_id: str) -> dict[str, float]:
        """Assignment id -> the wall time its workload printed as it ended (ranks that ran to the end)."""
        return self._printed(job_id, 1)

    def _printed(self, job_id: str, line: int) -> dict[str, float]:
        out = {}
        for host in self.agents:
            for f in (self.root / host / "workloads").glob(f"{job_id}.*/stdout.log"):
                lines = f.read_text().splitlines()
                if len(lines) > line:
                    out[f.parent.name] = float(lines[line])
        return out

    def received_files(self, job_id: str) -> dict[str, float]:
        """Assignment id -> when its agent took the launch command: the mtime of the ``assignment.json`` the
        agent writes before it starts the process."""
        out = {}
        for host in self.agents:
            for f in (self.root / host / "workloads").glob(f"{job_id}.*/assignment.json"):
                out[f.parent.name] = f.stat().st_mtime
        return out

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far: the server, and the agents together (their workloads not counted)."""
        agents = sum(cpu_s(p.pid) for p in self.agents.values() if p.poll() is None)
        return {"server_cpu_s": round(cpu_s(self.server.pid), 2), "agents_cpu_s": round(agents, 2)}

    def close(self) -> None:
        for p in self.agents.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.agents.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=20)
            if p.poll() is None:
                p.kill()
        self.server.send_signal(signal.SIGTERM)
        try:
            self.server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.server.kill()
        self.http.close()
        self.log.close()
