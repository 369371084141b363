"""The CLI tests' harness: a real server (uvicorn on 127.0.0.1 in a thread, SQLite) and ``gpupool`` run as a
real process against it, with the server and token from the environment."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from gpupool.server.app import create_app
from gpupool.server.settings import Settings
from procs import free_port

ADMIN = "cli-admin-token-0123456789"


@contextmanager
def cli_server(data: Path, **settings: Any) -> Iterator[str]:
    """A server on a free port with ``settings`` beyond the defaults; its URL while the block runs."""
    port = free_port()
    s = Settings(data_dir=str(data), admin_token=ADMIN, port=port, schedule_period_s=0.2, **settings)
    srv = uvicorn.Server(uvicorn.Config(create_app(s), host="127.0.0.1", port=port, log_level="warning"))
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline, "server did not start"
        t.join(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        t.join(10)


def run(url: str, token: str, *args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    """``gpupool ARGS`` as a user runs it: a real process, the server and token from the environment."""
    env = {**os.environ, "GPUPOOL_SERVER": url, "GPUPOOL_TOKEN": token, "GPUPOOL_CONFIG": "/nonexistent"}
    r = subprocess.run(
        [sys.executable, "-m", "gpupool", *args], capture_output=True, text=True, env=env, timeout=60, cwd=cwd
    )
    return r.returncode, r.stdout, r.stderr


def tenant_token(url: str, tenant: str) -> str:
    code, _, err = run(url, ADMIN, "admin", "tenants", "create", tenant)
    assert code == 0, err
    code, out, err = run(url, ADMIN, "admin", "tokens", "create", "--tenant", tenant)
    assert code == 0, err
    return out.strip()
