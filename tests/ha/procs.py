"""Helpers of the HA tests: real ``gpupool server`` processes on loopback, polled with deadlines (no sleeps)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ADMIN = "ha-admin-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(cond: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll ``cond`` until true; the seconds it took. A timeout fails the test naming ``what``."""
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        threading.Event().wait(0.05)  # poll interval, bounded by the deadline above
    return time.monotonic() - start


class ServerProc:
    """One ``gpupool server`` process; ``env`` adds GPUPOOL_* settings. Waits until it answers /healthz."""

    def __init__(self, url: str, data: Path, log: Path, env: dict[str, str] | None = None, wait_s: float = 60) -> None:
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
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpupool", "server"], env=full, stdout=self.log, stderr=subprocess.STDOUT
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

    def admin(self, method: str, path: str, **kw: Any) -> Any:
        r = httpx.request(method, f"{self.base}{path}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10, **kw)
        assert r.status_code < 300, r.text
        return r.json()

    def tenant_token(self, name: str) -> str:
        self.admin("POST", "/v1/tenants", json={"name": name})
        return str(self.admin("POST", "/v1/tokens", json={"tenant": name})["token"])

    def all_jobs(self) -> list[dict[str, Any]]:
        jobs: list[dict[str, Any]] = []
        after = None
        while True:
            params: dict[str, Any] = {"limit": 1000, **({"after": after} if after else {})}
            page = self.admin("GET", "/v1/jobs", params=params)
            jobs += page["jobs"]
            after = page["next_after"]
            if after is None:
                return jobs

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
