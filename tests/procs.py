"""The one harness of the tests that run real processes: free ports, polling with a deadline (never a sleep),
``gpupool server`` processes, PostgreSQL schemas of their own, and stopping a child for good.

Every test that starts a server or an agent process builds on this module (``tests/e2e``, ``tests/ha``,
``tests/chaos``, the benchmarks' clusters), so that a change to how a process is started or awaited is made
once. The cluster of a server and emulated agents is ``e2e_cluster.Cluster``, built on these pieces.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

PY = sys.executable
ADMIN = "ha-admin-token-0123456789abcdef"
# The server as a real process: its app under uvicorn, configured only through GPUPOOL_* variables (``python -c``).
SERVER = (
    "import uvicorn\n"
    "from gpupool.server.app import create_app\n"
    "from gpupool.server.settings import load_settings\n"
    "s = load_settings()\n"
    "uvicorn.run(create_app(s), host=s.host, port=s.port, log_level='warning', timeout_graceful_shutdown=3)\n"
)
PG = os.environ.get("GPUPOOL_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far, not its children's (Linux /proc): what the benchmarks
    report beside wall time."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(cond: Callable[[], Any], timeout_s: float = 20.0, what: str = "condition", every_s: float = 0.05) -> Any:
    """Poll ``cond`` until it returns something true and return that; past the deadline the test fails
    naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while not (got := cond()):
        assert time.monotonic() < deadline, f"{what} not met within {timeout_s} s"
        threading.Event().wait(every_s)  # poll interval, bounded by the deadline above
    return got


def wait_for(cond: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll ``cond`` until true; the seconds it took."""
    start = time.monotonic()
    until(cond, timeout_s, what)
    return time.monotonic() - start


def healthy(http: httpx.Client) -> bool:
    """The server behind ``http`` answers /healthz with 200."""
    try:
        return http.get("/healthz").status_code == 200
    except httpx.HTTPError:
        return False


def stop(p: subprocess.Popen[Any], timeout_s: float = 20) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout_s``; reaped either way."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


class ServerProc:
    """One ``gpupool server`` process; ``env`` adds GPUPOOL_* settings. Waits until it answers /healthz."""

    def __init__(
        self,
        url: str,
        data: Path,
        log: Path,
        env: dict[str, str] | None = None,
        wait_s: float = 60,
        soft_nofile: int | None = None,  # start it with this soft RLIMIT_NOFILE (what a login shell gives, say)
    ) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        full = {
            **os.environ,
            "GPUPOOL_DATABASE_URL": url,
            "GPUPOOL_DATA_DIR": str(data),
            "GPUPOOL_ADMIN_TOKEN": ADMIN,
            "GPUPOOL_PORT": str(self.port),
            "GPUPOOL_SCHEDULE_PERIOD_S": "0.2",
            "GPUPOOL_LEADER_RETRY_S": "0.2",
            "GPUPOOL_NODE_LOST_AFTER_S": "600",
            **(env or {}),
        }
        self.log = log.open("a")
        limit = None if soft_nofile is None else ["prlimit", f"--nofile={soft_nofile}:", "--"]
        self.proc = subprocess.Popen(
            [*(limit or ()), PY, "-m", "gpupool", "server"], env=full, stdout=self.log, stderr=subprocess.STDOUT
        )
        if wait_s:
            wait_for(self.answers, wait_s, f"server on port {self.port}")

    def health(self) -> tuple[int, dict[str, Any]] | None:
        try:
            r = httpx.get(f"{self.base}/healthz", timeout=2.0)
        except httpx.HTTPError:
            return None
        return r.status_code, dict(r.json())

    def answers(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"server exited with {self.proc.returncode}: {self.log_path.read_text()[-3000:]}")
        return self.health() is not None

    def is_leader(self) -> bool:
        got = self.health()
        return got is not None and got[0] == 200 and bool(got[1].get("leader"))

    def admin(self, method: str, path: str, **kw: Any) -> Any:
        r = httpx.request(method, f"{self.base}{path}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10, **kw)
        assert r.status_code < 300, r.text
        return r.json()

    def tenant_token(self, name: str) -> str:
        self.admin("POST", "/v1/tenants", json={"name": name})
        return str(self.admin("POST", "/v1/tokens", json={"tenant": name})["token"])

    def all_jobs(self) -> list[dict[str, Any]]:
        # Oldest first: a job submitted meanwhile lands on a later page, so no page shifts under the next one.
        jobs: list[dict[str, Any]] = []
        while True:
            params = {"limit": 1000, "offset": len(jobs), "sort": "submitted", "order": "asc"}
            page = self.admin("GET", "/v1/jobs", params=params)
            jobs += page["jobs"]
            if len(jobs) >= page["total"] or not page["jobs"]:
                return jobs

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        stop(self.proc, 15)
        self.log.close()


def admin(base: str, method: str, path: str, **kw: Any) -> Any:
    r = httpx.request(method, f"{base}{path}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10, **kw)
    assert r.status_code < 300, r.text
    return r.json()


def setup_pool(base: str, hosts: int) -> str:
    """Tenant ``acme`` with a token (returned) and ``hosts`` registered nodes of 8 H100s that never beat (a
    server with a long ``node_lost_after_s`` keeps them up): placements happen without agents."""
    admin(base, "POST", "/v1/tenants", json={"name": "acme"})
    token = str(admin(base, "POST", "/v1/tokens", json={"tenant": "acme"})["token"])
    for h in range(hosts):
        join = admin(base, "POST", "/v1/join-tokens", json={})["token"]
        body = {"host": f"gpu-{h:02d}", "gpus": [{"index": i, "model": "H100", "memory_mib": 81559} for i in range(8)]}
        r = httpx.post(f"{base}/v1/agents/register", json=body, headers={"Authorization": f"Bearer {join}"})
        assert r.status_code == 200, r.text
    return token


def pg_schema() -> Iterator[str]:
    """A fresh schema on the test PostgreSQL, as a database URL whose search_path is that schema; dropped after.
    Skips when PostgreSQL does not answer (fails under CI, which must have it)."""
    import psycopg
    from sqlalchemy.engine import make_url

    libpq = make_url(PG).set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        psycopg.connect(libpq, connect_timeout=2).close()
    except psycopg.Error as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but PostgreSQL does not answer: {e}")
        pytest.skip("PostgreSQL does not answer")
    schema = f"e_{secrets.token_hex(6)}"
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield (
            make_url(PG).update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
        )
    finally:
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
