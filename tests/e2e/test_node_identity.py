"""Identities at the door, on real server and agent processes: a revoked token is refused on its next request
(by every replica), a rogue registration with the join token of a live node is refused while the real node
keeps working (and, restarted, comes back as itself), and the server never fetches a URL a node supplied."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from e2e_cluster import Cluster
from gpupool.store import Store
from procs import ServerProc, admin, free_port, pg_schema, until


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'gpupool.db'}"
    else:
        yield from pg_schema()


def test_a_revoked_token_is_refused_on_its_next_request_by_every_replica(db_url: str, tmp_path: Path) -> None:
    replicas = 2 if db_url.startswith("postgresql") else 1  # SQLite: one server per file
    servers = [ServerProc(db_url, tmp_path, tmp_path / f"server{i}.log") for i in range(replicas)]
    try:
        token = servers[0].tenant_token("acme")
        token_id = token.split("_")[1]
        for s in servers:  # each replica has answered the token: nothing it might remember may outlive revocation
            for _ in range(3):
                r = httpx.get(f"{s.base}/v1/jobs", headers={"Authorization": f"Bearer {token}"}, timeout=10)
                assert r.status_code == 200, r.text
        assert servers[-1].admin("DELETE", f"/v1/tokens/{token_id}")["state"] == "revoked"
        for s in servers:
            r = httpx.get(f"{s.base}/v1/jobs", headers={"Authorization": f"Bearer {token}"}, timeout=10)
            assert r.status_code == 401 and r.json()["code"] == "UNAUTHENTICATED", r.text
        (listed,) = servers[0].admin("GET", "/v1/tokens", params={"tenant": "acme"})["tokens"]
        assert listed["state"] == "revoked"
    finally:
        for s in servers:
            s.stop()


def _node_body(host: str, agent_url: str = "") -> dict[str, Any]:
    return {"host": host, "agent_url": agent_url, "gpus": [{"index": 0, "model": "H100", "memory_mib": 81559}]}


def test_a_rogue_registration_for_a_live_node_is_refused_and_the_real_node_carries_on(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    try:
        c.start_agent("dgx001")
        until(lambda: c.nodes().get("dgx001", {}).get("state") == "up", 60, "dgx001 registered")
        rogue = httpx.post(
            f"{c.url}/v1/agents/register",
            json=_node_body("dgx001", "http://127.0.0.1:1"),
            headers={"Authorization": f"Bearer {c.join}"},
            timeout=10,
        )
        assert rogue.status_code == 409 and rogue.json()["code"] == "NODE_NAME_TAKEN", rogue.text
        assert "node_token" not in rogue.text
        # The real agent's token still works: its heartbeats keep the node up and it runs a job to the end.
        job = c.submit("print('still me')", tasks=1, gpus=1)
        until(lambda: c.job(job)["state"] == "finished", 90, "the job finished on the real node")
        # Restarted (kill -9), the agent registers again at once as itself, with the node token it kept.
        c.agents["dgx001"].kill()
        c.agents["dgx001"].wait(10)
        c.start_agent("dgx001")
        with Store(f"sqlite:///{tmp_path / 'data' / 'gpupool.db'}") as store:
            regs = until(
                lambda: [e for e in store.list_audit(subject="node/dgx001", action="agent.registered")][1:],
                60,
                "the restarted agent registered",
            )
            assert [e.data["by"] for e in regs] == ["node"]
        kept = tmp_path / "dgx001" / "node-token"
        assert kept.stat().st_mode & 0o077 == 0
    finally:
        c.close()


class _Listener:
    """An HTTP server the test owns on ``host:port``: records every request, answers 200 with ``body``."""

    def __init__(self, host: str, port: int, body: str) -> None:
        self.paths: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.paths.append(self.path)
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_supplied_agent_url_is_never_fetched(tmp_path: Path) -> None:
    srv = ServerProc(f"sqlite:///{tmp_path / 'gpupool.db'}", tmp_path, tmp_path / "server.log")
    port = free_port()
    decoy = _Listener("127.0.0.2", port, "a service the node chose")  # what the node's URL names
    peer = _Listener("127.0.0.1", port, "log at the address the node connected from")
    try:
        assert httpx.get(f"http://127.0.0.2:{port}/probe", timeout=5).status_code == 200  # reachable, and counted
        assert decoy.paths == ["/probe"]
        decoy.paths.clear()
        token = srv.tenant_token("acme")
        join = admin(srv.base, "POST", "/v1/join-tokens", json={"max_nodes": 1})["token"]
        body = _node_body("evil", f"http://127.0.0.2:{port}/steal?x=")
        r = httpx.post(f"{srv.base}/v1/agents/register", json=body, headers={"Authorization": f"Bearer {join}"})
        assert r.status_code == 200, r.text
        (node,) = admin(srv.base, "GET", "/v1/nodes")["nodes"]
        assert node["agent_url"] == f"http://127.0.0.1:{port}"
        tenant = {"Authorization": f"Bearer {token}"}
        job = httpx.post(f"{srv.base}/v1/jobs", json={"command": ["true"], "gpus_per_task": 1}, headers=tenant)
        job_id = job.json()["job"]["id"]

        def placed() -> bool:
            got = httpx.get(f"{srv.base}/v1/jobs/{job_id}", headers=tenant, timeout=5).json()
            return bool(got["state"] == "placed")

        until(placed, 30, "the job placed on the node")
        logs = httpx.get(f"{srv.base}/v1/jobs/{job_id}/logs", headers=tenant, timeout=15)
        assert logs.status_code == 200, logs.text
        assert logs.json()["text"] == "log at the address the node connected from"
        assert decoy.paths == []  # never fetched: not for logs, not for anything
        assert len(peer.paths) == 1 and peer.paths[0].startswith("/logs/")
    finally:
        decoy.close()
        peer.close()
        srv.stop()
