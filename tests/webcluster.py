"""A dashboard-sized cluster for the browser tests and benchmarks/web_fabric.py: one real server process holding
a 1,023-host DGX SuperPOD (``superpod(32)``) and 5,000 jobs, without 1,023 agent processes.

- The job history (every job but the active ones) is written straight into the store before the server starts:
  one transaction, about a second, where 4,700 submits over HTTP would take minutes.
- The fabric and every host but a few are stored as registration stores them (the node, up, with its GPUs),
  also before the server starts; they never beat (the server's long ``node_lost_after_s`` keeps them up), so
  the scheduler places the active jobs on them. ``UNREGISTERED`` hosts stay without an agent, ``DRAINED`` hosts are drained with a reason, and ``BAD_GPU`` is graded bad by an XID
  79 (fallen off the bus) in the one heartbeat its host sends.
  The bad GPU's host registers over HTTP, as an agent, for the node token its heartbeat needs.
- One host (``AGENT_HOST``) runs a real ``gpupool agent --emulate``: the job ``LOGS_JOB`` runs there as real
  processes, and its rank 1 writes ``STDERR_LINE`` to stderr, for the log panel.
- The active jobs come through the API as a few arrays (one call each) and single jobs.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from sqlalchemy import insert

from gpupool.domain.jobs import JobSpec
from gpupool.fabric import jsonio
from gpupool.fabric.generators import superpod
from gpupool.store import Store
from gpupool.store.codec import spec_to_json
from gpupool.store.rows import JobAttemptRow, JobRow
from procs import ADMIN, PY, ServerProc, stop, until

TENANTS = ("acme", "globex", "initech")
POOLS = ("default", "inference")
AGENT_HOST = "dgx00001"
UNREGISTERED = ("dgx01017", "dgx01018", "dgx01019", "dgx01020", "dgx01021", "dgx01022", "dgx01023")
DRAINED = {"dgx00500": "PSU replacement, ticket OPS-1234", "dgx00501": "IB cable reseat"}
BAD_GPU = ("dgx00777", 3)
# The inference pool owns three scalable units outright; the default pool the rest.
CALENDAR = 'timezone = "UTC"\ndefault_pool = "default"\n\n[[pool]]\nname = "inference"\nsus = [2, 3, 4]\nshare = 1.0\n'
NEEDLE = "needle-bert-7f3a"  # one job's name, found by search among 5,000
STDERR_LINE = "CUDA error: an illegal memory access was encountered (rank 1)"
# Rank 1 writes to stderr: what the log panel must show (stdout alone once hid exactly such a line).
LOGS_PROGRAM = (
    "import os, sys, time\n"
    "r = os.environ['RANK']\n"
    "print(f'step 0 of rank {r}', flush=True)\n"
    f"if r == '1': print({STDERR_LINE!r}, file=sys.stderr, flush=True)\n"
    "time.sleep(3600)\n"
)


@dataclass
class WebCluster:
    server: ServerProc
    agent: subprocess.Popen[bytes]
    root: Path
    hosts: list[str]
    tokens: dict[str, str]
    jobs: dict[str, str] = field(default_factory=dict)  # role -> job id
    history: int = 0

    @property
    def base(self) -> str:
        return self.server.base

    def get(self, path: str, token: str = ADMIN, **params: Any) -> Any:
        r = httpx.get(self.base + path, params=params, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        r.raise_for_status()
        return r.json()


def _history(store: Store, n: int, now: float) -> None:
    """``n`` ended jobs of the last week over the tenants and pools, each with its one run."""
    rng = np.random.default_rng(17)
    jobs, runs = [], []
    ends = (("finished", 0, "every rank exited 0"), ("failed", 1, "rank 0 on dgx00042 exited with 1"),
            ("cancelled", None, "cancelled"), ("timeout", None, "ran 3600 s, past its time limit of 3600 s"))  # fmt: skip
    for i in range(n):
        tenant, pool = TENANTS[i % 3], POOLS[(i // 3) % 2]
        submit = now - 7 * 86400 + i * (6.5 * 86400 / n)
        state, code, reason = ends[0] if i % 10 < 7 else ends[1 + i % 3]
        spec = JobSpec(f"j-hist-{i:05d}", submit, tasks=1 + i % 4, gpus_per_task=8, name=f"hist-{tenant}-{i:05d}",
                       tenant=tenant, pool=pool)  # fmt: skip
        start = submit + rng.uniform(5, 600)
        end = start + rng.uniform(60, 7200)
        jobs.append(dict(id=spec.job_id, tenant=tenant, pool=pool, name=spec.name, priority=int(spec.priority),
                         state=state, submit_time_s=submit, spec=spec_to_json(spec), gpu_milli=spec.tasks * 8000, idempotency_key=None, version=4,
                         reason_code="", reason=reason, created_s=submit, updated_s=end, attempt=1, array_id=None,
                         submitted_by="seed"))  # fmt: skip
        runs.append(dict(job_id=spec.job_id, attempt=1, assignment=2, tenant=tenant, pool=pool,
                         gpu_model="NVIDIA H100 80GB HBM3", milli_gpu=spec.tasks * 8000, hosts="[]", placed_s=start - 1,
                         started_s=start, ended_s=end, state=state, exit_code=code, reason=reason))  # fmt: skip
    with store._engine.begin() as c:
        c.execute(insert(JobRow), jobs)
        c.execute(insert(JobAttemptRow), runs)


def _nodes(store: Store, fabric: Any, skip: set[str]) -> None:
    """The nodes as a registration stores them (up, GPU model and count); with no heartbeat ever, the loop
    never judges them lost."""
    store.put_fabric(fabric, "seed")
    for host in fabric.hosts:
        if host.name not in skip:
            store.upsert_node(host.name, gpu_model=host.gpus[0].model, gpu_count=host.gpu_count, actor="seed")


def inventory(fabric: Any, host: Any) -> dict[str, Any]:
    """The body of ``POST /v1/agents/register`` for ``host`` of ``fabric``: its GPUs and HCAs as an agent's
    probes would report them."""
    hcas = [fabric.hcas[fabric.hca_index(g)] for g in host.hcas]
    return {
        "host": host.name,
        "gpus": [{"index": g.index, "model": g.model, "memory_mib": g.memory_mib} for g in host.gpus],
        "hcas": [{"name": h.name, "guid": h.guid, "rate_gbps": h.rate_gbps} for h in hcas],
    }


def _register(c: httpx.Client, fabric: Any, only: set[str]) -> dict[str, str]:
    join = c.post("/v1/join-tokens", json={}).json()["token"]
    node_tokens = {}
    for host in fabric.hosts:
        if host.name not in only:
            continue
        body = inventory(fabric, host)
        r = c.post("/v1/agents/register", json=body, headers={"Authorization": f"Bearer {join}"})
        assert r.status_code == 200, r.text
        node_tokens[host.name] = r.json()["node_token"]
    return node_tokens


def _agent(root: Path, base: str, join: str) -> subprocess.Popen[bytes]:
    argv = [PY, "-m", "gpupool", "agent", "--server", base, "--join-token", join, "--host", AGENT_HOST,
            "--interval", "1", "--state-dir", str(root / "agent"), "--emulate", "--fabric", str(root / "fabric.json"),
            "--stop-workloads-on-exit", "--isolation", "off"]  # fmt: skip
    return subprocess.Popen(argv, stdout=(root / "agent.log").open("wb"), stderr=subprocess.STDOUT)


@contextmanager
def web_cluster(root: Path, *, jobs: int = 5000, sus: int = 32) -> Iterator[WebCluster]:
    """The cluster described above, torn down on exit; ``jobs`` in all, ``sus`` scalable units."""
    fabric = superpod(sus)
    jsonio.save(fabric, root / "fabric.json")
    url = f"sqlite:///{root / 'web.db'}"
    store = Store(url)
    store.migrate()
    for t in TENANTS:
        store.create_tenant(t, "seed")
    active = 300
    _history(store, jobs - active, time.time())
    _nodes(store, fabric, {AGENT_HOST, BAD_GPU[0], *UNREGISTERED})
    store.close()
    env = {"GPUPOOL_NODE_LOST_AFTER_S": "86400", "GPUPOOL_ACCESS_LOG": "false", "GPUPOOL_SCHEDULE_PERIOD_S": "0.5"}
    server = ServerProc(url, root, root / "server.log", env)
    agent = None
    try:
        with httpx.Client(base_url=server.base, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60) as c:
            c.put("/v1/pools/default", json={"calendar_toml": CALENDAR}).raise_for_status()
            names = [h.name for h in fabric.hosts]
            node_tokens = _register(c, fabric, {BAD_GPU[0]})
            agent = _agent(root, server.base, c.post("/v1/join-tokens", json={}).json()["token"])
            until(lambda: _state(c, AGENT_HOST) == "up", 60, "the emulated agent up")
            c.patch(f"/v1/nodes/{AGENT_HOST}/labels", json={"set": {"logs": "here"}}).raise_for_status()
            host, gpu = BAD_GPU
            if host in node_tokens:
                # The grade is the agent's (its XID rules): GPU ``gpu`` bad, with the XID that made it so.
                samples = [{"index": g, "health": "bad" if g == gpu else "ok"} for g in range(8)]
                xid = {"gpu": gpu, "code": 79, "at_s": time.time(), "message": "GPU has fallen off the bus"}
                beat = {"seq": 1, "at_s": time.time(), "gpus": samples, "xids": [xid]}
                r = httpx.post(f"{server.base}/v1/agents/{host}/heartbeat", json=beat,
                               headers={"Authorization": f"Bearer {node_tokens[host]}"}, timeout=30)  # fmt: skip
                assert r.status_code == 200, r.text
            for name, why in DRAINED.items():
                if name in names:
                    c.post(f"/v1/nodes/{name}/drain", json={"reason": why}).raise_for_status()
            tokens = {t: c.post("/v1/tokens", json={"tenant": t}).json()["token"] for t in TENANTS}
            cl = WebCluster(server, agent, root, names, tokens, history=jobs - active)
            cl.jobs.update(_submit_active(c, active))
        yield cl
    finally:
        if agent is not None:
            stop(agent)
        server.stop()


def _state(c: httpx.Client, host: str) -> str | None:
    return next((n["state"] for n in c.get("/v1/nodes").json()["nodes"] if n["name"] == host), None)


def _submit_active(c: httpx.Client, n: int) -> dict[str, str]:
    """``n`` active jobs: the logs job on the agent's host, a named needle, and arrays (one call each) of which
    most are placed and the rest wait."""

    def submit(**body: Any) -> dict[str, Any]:
        r = c.post("/v1/jobs", json={"command": ["sleep", "3600"], **body})
        assert r.status_code in (200, 201), r.text
        return dict(r.json())

    out = {}
    logs = submit(tenant="acme", name="cuda-crash", tasks=2, gpus_per_task=1, node_selector={"logs": "here"},
                  command=[PY, "-c", LOGS_PROGRAM])  # fmt: skip
    out["logs"] = logs["job"]["id"]
    out["needle"] = submit(tenant="globex", name=NEEDLE, tasks=2, gpus_per_task=8)["job"]["id"]
    left = n - 2
    sizes = (("acme", "pretrain", 8, 90), ("globex", "finetune", 2, 90), ("initech", "sweep", 1, 60))
    for tenant, name, gpus, count in sizes:
        count = min(count, left)
        if count > 0:
            pool = "inference" if tenant == "globex" else "default"
            submit(tenant=tenant, name=name, pool=pool, tasks=4, gpus_per_task=gpus, array=f"0-{count - 1}")
            left -= count
    if left > 0:  # waiting: bigger than what the placed ones leave
        submit(tenant="acme", name="wait-big", tasks=64, gpus_per_task=8, array=f"0-{left - 1}")
    return out


def wait_placed(cl: WebCluster, count: int, timeout_s: float = 120) -> list[dict[str, Any]]:
    """The active jobs once at least ``count`` are placed or running (the loop places a few hundred a cycle)."""

    def active() -> list[dict[str, Any]] | None:
        jobs = []
        for state in ("placed", "running"):
            jobs += _all(cl, state)
        return jobs if len(jobs) >= count else None

    got = until(active, timeout_s, f"{count} jobs placed")
    return list(got)


def _all(cl: WebCluster, state: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = cl.get("/v1/jobs", state=state, limit=1000, offset=offset)
        out += page["jobs"]
        offset += len(page["jobs"])
        if not page["jobs"] or offset >= page.get("total", offset):
            return out
