"""HTTPS and structured logs: the real ``gpupool server`` with a certificate made here (trustme: a throwaway CA),
and a real ``gpupool agent`` that trusts that CA through ``--ca-bundle``.

Invariants: the server speaks only TLS on its port, with the configured certificate (a client that does not
trust the CA is refused, plain HTTP gets no answer); the agent registers over it; with ``log_format: json``
every line the server writes is one JSON object, and the access line of a request carries the request id
the response returned. Half a TLS setting or an unknown log format stops the start with one line, exit 2.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme

from gpupool.fabric import jsonio
from gpupool.fabric.generators import leaf_spine
from procs import free_port, until

PY = sys.executable
ADMIN = "tls-admin"


def server_env(tmp_path: Path, port: int, **settings: str) -> dict[str, str]:
    env = dict(os.environ, GPUPOOL_DATA_DIR=str(tmp_path / "data"), GPUPOOL_ADMIN_TOKEN=ADMIN, GPUPOOL_PORT=str(port))
    env.update({f"GPUPOOL_{k.upper()}": v for k, v in settings.items()})
    return env


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """An HTTPS server with JSON logs; yields its URL, the CA file and the server's log file."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca_file, chain, key = tmp_path / "ca.pem", tmp_path / "server.pem", tmp_path / "server.key"
    ca.cert_pem.write_to_path(str(ca_file))
    cert.private_key_pem.write_to_path(str(key))
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    port = free_port()
    env = server_env(
        tmp_path, port, tls_cert=str(chain), tls_key=str(key), log_format="json", heartbeat_interval_s="0.2"
    )
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([PY, "-m", "gpupool", "server"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"https://127.0.0.1:{port}"
    trusted = httpx.Client(verify=ssl.create_default_context(cafile=str(ca_file)), timeout=5)

    def healthy() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return trusted.get(f"{url}/healthz").status_code == 200
        assert proc.poll() is None, log_path.read_text()
        return False

    try:
        until(healthy, 60, "HTTPS server up")
        yield url, ca_file, log_path
    finally:
        trusted.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_https_server_agent_with_ca_bundle_and_json_logs_with_request_ids(
    tls_server: tuple[str, Path, Path], tmp_path: Path
) -> None:
    url, ca_file, log_path = tls_server
    ctx = ssl.create_default_context(cafile=str(ca_file))
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=url, verify=ctx, headers=admin, timeout=10) as http:
        r = http.get("/healthz", headers={"X-Request-ID": "tls-test-1"})
        assert (r.status_code, r.headers["x-request-id"]) == (200, "tls-test-1")
        fresh = http.get("/healthz", headers={"X-Request-ID": "not a sane id; <script>"}).headers["x-request-id"]
        assert len(fresh) == 16 and "script" not in fresh  # replaced by one of its own
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{url}/healthz", timeout=5)  # the public CAs do not vouch for it
        with pytest.raises(httpx.HTTPError):
            httpx.get(url.replace("https://", "http://") + "/healthz", timeout=5)  # no plain HTTP on that port

        fabric = leaf_spine(leaves=1, spines=1, hosts_per_leaf=1, gpus_per_host=8)
        fabric_path = tmp_path / "fabric.json"
        jsonio.save(fabric, fabric_path)
        join = http.post("/v1/join-tokens", json={}).json()["token"]
        host = fabric.hosts[0].name
        argv = [PY, "-m", "gpupool", "agent", "--server", url, "--ca-bundle", str(ca_file), "--host", host]
        argv += [
            "--join-token",
            join,
            "--state-dir",
            str(tmp_path / "agent"),
            "--emulate",
            "--fabric",
            str(fabric_path),
        ]
        agent = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
        try:
            until(lambda: [n["state"] for n in http.get("/v1/nodes").json()["nodes"]] == ["up"], 60, "agent joined")
        finally:
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=15)

    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    access = [e for e in lines if e["logger"] == "uvicorn.access"]
    (mine,) = [e for e in access if e["request_id"] == "tls-test-1"]
    assert (mine["method"], mine["path"], mine["status"], mine["level"]) == ("GET", "/healthz", 200, "INFO")
    assert "timestamp" in mine
    (register,) = [e for e in access if e["path"] == "/v1/agents/register"]
    assert register["status"] == 200 and len(register["request_id"]) == 16


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"tls_cert": "/etc/hostname"}, "tls_key: tls_cert and tls_key go together"),
        ({"tls_cert": "/nonexistent.pem", "tls_key": "/etc/hostname"}, "tls_cert: no such file: /nonexistent.pem"),
        ({"log_format": "xml"}, "log_format: 'xml' is not a log format"),
    ],
)
def test_a_bad_tls_or_log_setting_stops_the_start(tmp_path: Path, settings: dict[str, str], message: str) -> None:
    env = server_env(tmp_path, free_port(), **settings)
    r = subprocess.run([PY, "-m", "gpupool", "server"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert message in r.stderr
