"""A cluster of real processes for the end-to-end tests: one ``gpupool server`` (its app under uvicorn,
configured only through GPUPOOL_* variables) with a fabric stored (a one-SU SuperPOD unless a test gives
another), and ``gpupool agent --emulate`` processes for its hosts. Workloads are real child processes that
print what they were given.

Faults reach an agent's emulated node as they would a real one's files: an XID appended to its kernel log
(``plant_xid``), port congestion and a GPU's temperature through its ``faults.json`` (``faults``). With
``journal=True`` the server writes its loop's journal (``journal_events`` reads what the loop applied;
``replay`` runs ``gpupool sim replay`` on it).

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
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from gpupool.agent.emulated import write_faults
from gpupool.agent.runtime import process_start_ticks
from gpupool.domain.events import Event
from gpupool.fabric import jsonio
from gpupool.fabric.fabric import Fabric
from gpupool.fabric.generators import superpod
from gpupool.scheduler import journal
from isolation_support import python_for_others
from procs import PY, SERVER, free_port, healthy, stop, until
from tcp_proxy import TcpProxy

ADMIN = "e2e-admin"
HOSTS = ("dgx001", "dgx002", "dgx003", "dgx004")
LOST_AFTER_S = 3.0  # a loaded 2-core build box can delay a 0.2 s beat by a second or more


class Cluster:
    def __init__(
        self, root: Path, fabric: Fabric | None = None, *, replicas: int = 1, journal: bool = False, **settings: str
    ) -> None:
        """``settings``: GPUPOOL_* variables of the server beyond the defaults below; ``fabric``: the stored
        fabric and the agents' hosts (default ``superpod(1)``, whose first four hosts are ``HOSTS``).
        ``replicas`` > 1 starts that many servers on the one database ``settings`` must name
        (GPUPOOL_DATABASE_URL), behind a round-robin ``TcpProxy``: agents and ``http`` reach them through it
        (``url``), as through a load balancer."""
        assert replicas == 1 or "GPUPOOL_DATABASE_URL" in settings, "replicas share a database: name it"
        self.root = root
        self.fabric = fabric or superpod(1)
        self.hosts = HOSTS if fabric is None else tuple(h.name for h in self.fabric.hosts)
        self.journal_path = root / "journal.jsonl"
        if journal:
            settings = {"GPUPOOL_JOURNAL_PATH": str(self.journal_path), **settings}
        self.fabric_path = root / "fabric.json"
        jsonio.save(self.fabric, self.fabric_path)
        (root / "data").mkdir()
        self.work = Path(tempfile.mkdtemp(prefix="gpupool-e2e-work-"))  # jobs' users may enter it, not list it
        self.work.chmod(0o711)
        ports = [free_port() for _ in range(replicas)]
        env = dict(
            os.environ,
            GPUPOOL_DATA_DIR=str(root / "data"),
            GPUPOOL_ADMIN_TOKEN=ADMIN,
            GPUPOOL_PORT=str(ports[0]),
            GPUPOOL_HEARTBEAT_INTERVAL_S="0.2",
            GPUPOOL_NODE_LOST_AFTER_S=str(LOST_AFTER_S),
            GPUPOOL_SCHEDULE_PERIOD_S="0.2",
            GPUPOOL_STOP_GRACE_S="1.0",  # SIGTERM -> SIGKILL after 1 s: the cancel test waits 15 s, not 30
        )
        env.update(settings)
        self.env = env  # the first replica's; ``envs[i]`` is replica i's (its own port)
        self.envs = [dict(env, GPUPOOL_PORT=str(p)) for p in ports]
        self.server_urls = [f"http://127.0.0.1:{p}" for p in ports]
        self.servers = [subprocess.Popen([PY, "-c", SERVER], env=e) for e in self.envs]  # one migrates (a lock)
        for i in range(replicas):
            self._until_up(i)
        self.server = self.servers[0]
        self.proxy = TcpProxy([("127.0.0.1", p) for p in ports]) if replicas > 1 else None
        self.url = self.proxy.url if self.proxy is not None else self.server_urls[0]
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
        r = self.http.put(
            "/v1/fabric", content=self.fabric_path.read_text(), headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 200, r.text
        self.join = self.http.post("/v1/join-tokens", json={}).json()["token"]
        assert self.http.post("/v1/tenants", json={"name": "acme"}).status_code == 201
        self.agents: dict[str, subprocess.Popen[bytes]] = {}

    def _until_up(self, i: int, timeout_s: float = 60) -> None:
        with httpx.Client(base_url=self.server_urls[i], timeout=10) as direct:
            until(lambda: healthy(direct), timeout_s, f"server {self.server_urls[i]} up")

    def start_agent(self, host: str, url: str | None = None, extra: tuple[str, ...] = ()) -> None:
        """An emulated agent for ``host`` talking to ``url`` (this cluster's server unless given: a replica's);
        ``extra``: more ``gpupool agent`` arguments (``("--label", "zone=b")``)."""
        argv = [PY, "-m", "gpupool", "agent", "--server", url or self.url, "--join-token", self.join, "--host", host]
        argv += ["--state-dir", str(self.root / host), "--emulate", "--fabric", str(self.fabric_path)]
        argv += ["--work-dir", str(self.work / host), *extra]
        self.agents[host] = subprocess.Popen([*argv, "--stop-workloads-on-exit"], stderr=subprocess.DEVNULL)

    def restart(self, i: int = 0, wait: bool = True) -> None:
        """Start server ``i`` again (after a kill): same settings, same port; with ``wait``, until it answers."""
        self.servers[i] = subprocess.Popen([PY, "-c", SERVER], env=self.envs[i])
        if i == 0:
            self.server = self.servers[0]
        if wait:
            self._until_up(i)  # as long as the first start: a loaded box (load 30) took over 30 s

    def replica(self) -> tuple[subprocess.Popen[bytes], str]:
        """Another server process on this cluster's settings and another port (one database: pass
        GPUPOOL_DATABASE_URL to the cluster); its process and URL. The caller stops it."""
        port = free_port()
        proc = subprocess.Popen([PY, "-c", SERVER], env=dict(self.env, GPUPOOL_PORT=str(port)))
        url = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=url, timeout=10) as http:
            until(lambda: healthy(http), 60, "replica up")
        return proc, url

    # -- faults, as a real node's files show them -------------------------------------------------------------
    def node_dir(self, host: str) -> Path:
        """Where ``host``'s agent keeps its emulated node's files (sysfs, nvidia-smi XML, kernel log)."""
        return self.root / host / "node"

    def plant_xid(self, host: str, gpu: int) -> None:
        """XID 79 (fallen off the bus) for ``gpu`` in ``host``'s kernel log, as the driver prints it."""
        xml = (self.node_dir(host) / "nvidia-smi-q.xml").read_text()
        bus = xml.split('<gpu id="')[gpu + 1].split('"')[0].split(":")[1].lower()  # "00000000:5D:00.0" -> 5d
        line = f"[ 1234.567890] NVRM: Xid (PCI:0000:{bus}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
        with (self.node_dir(host) / "kern.log").open("a") as f:
            f.write(line)

    def faults(
        self,
        host: str,
        *,
        xmit_wait_per_s: dict[str, float] | None = None,
        temperature_c: dict[int, float] | None = None,
    ) -> None:
        """Set ``host``'s port congestion (``PortXmitWait`` ticks/s per HCA name) and held GPU temperatures."""
        write_faults(self.node_dir(host), xmit_wait_per_s=xmit_wait_per_s, temperature_c=temperature_c)

    # -- the loop's journal -----------------------------------------------------------------------------------
    def journal_events(self) -> list[Event]:
        """Every event the server's loop applied to its state so far (complete lines of its journal)."""
        if not self.journal_path.exists():
            return []
        lines = self.journal_path.read_text().splitlines(keepends=True)
        return [r.value for r in journal.read(lines, str(self.journal_path)) if r.kind == "event"]

    def replay(self) -> dict[str, Any]:
        """``gpupool sim replay --json`` of the journal: its JSON, asserting it ran (0: same, 1: differences)."""
        r = subprocess.run(
            [PY, "-m", "gpupool", "sim", "replay", "--json", str(self.journal_path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode in (0, 1), r.stderr
        out: dict[str, Any] = json.loads(r.stdout)
        assert out["same"] == (r.returncode == 0)
        return out

    def placements(self, job_id: str) -> list[list[tuple[str, tuple[int, ...]]]]:
        """Every placement the server made of ``job_id``, in order: (host, GPUs) per rank (its audit trail)."""
        events = self.http.get(f"/v1/jobs/{job_id}/events").json()["events"]
        return [
            [(t["host"], tuple(t["gpus"])) for t in e["data"]["tasks"]] for e in events if e["action"] == "job.placed"
        ]

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
        for host in self.hosts:
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
        for server in {*self.servers, self.server}:  # a test may have replaced ``server``
            stop(server, 15)
        if self.proxy is not None:
            self.proxy.close()
        self.http.close()
        shutil.rmtree(self.work, ignore_errors=True)


@contextlib.contextmanager
def running(root: Path, agents: Sequence[str], **settings: str) -> Iterator[Cluster]:
    """A cluster with an agent on each of ``agents``, every node up, closed on exit. Nodes are judged lost
    only after 10 s unless ``settings`` say otherwise: a loaded build box delays beats, and the tests that use
    this are not about node loss."""
    c = Cluster(root, **{"GPUPOOL_NODE_LOST_AFTER_S": "10", **settings})
    try:
        for h in agents:
            c.start_agent(h)
        until(lambda: all_up(c, tuple(agents)), 90, "the nodes up")
        yield c
    finally:
        c.close()


def shared_dir(c: Cluster, name: str) -> Path:
    """A folder every workload may write to, whichever user its agent runs it as."""
    out = c.work / name
    out.mkdir()
    out.chmod(0o777)
    return out


def all_up(c: Cluster, hosts: tuple[str, ...] | None = None) -> bool:
    hosts = c.hosts if hosts is None else hosts
    nodes = c.nodes()
    return set(hosts) <= set(nodes) and all(nodes[h]["state"] == "up" for h in hosts)


def env_writer(then: str = "time.sleep(120)") -> str:
    """A workload that prints its env as one JSON line to its log, then ``then``."""
    return f"import json, os, signal, sys, time\nprint(json.dumps({{'env': dict(os.environ)}}), flush=True)\n{then}\n"


def ranks_of(c: Cluster, job_id: str) -> dict[str, dict[str, Any]]:
    """Assignment id -> what its workload printed, with the host whose agent ran it (<state>/<host>/workloads/)."""
    out = {}
    for host in c.hosts:
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
