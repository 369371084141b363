"""Helpers of the server tests: a hand clock, the PostgreSQL probe, and ``Api`` (the real app behind httpx)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

import databases
from gpupool.server.app import create_app
from gpupool.server.core import Server
from gpupool.server.settings import Settings

ADMIN = "admin-secret-for-tests-0123456789"


class Clock(databases.Clock):
    """The server tests' clock starts later than the store's: a million seconds into the epoch."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        super().__init__(t)


@dataclass
class Api:
    client: TestClient
    srv: Server
    clock: Clock
    # The node token each host's last registration here got: registering it again presents it, as a restarted
    # agent presents its kept token (a join token may not take a live node's name).
    node_tokens: dict[str, str] = field(default_factory=dict)

    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN}"}

    def tenant(self, name: str) -> dict[str, str]:
        """Create a tenant (if new) and a token for it; the Authorization header of that token."""
        if name not in {t["name"] for t in self.client.get("/v1/tenants", headers=self.admin()).json()["tenants"]}:
            assert self.client.post("/v1/tenants", json={"name": name}, headers=self.admin()).status_code == 201
        r = self.client.post("/v1/tokens", json={"tenant": name}, headers=self.admin())
        assert r.status_code == 201, r.text
        return {"Authorization": f"Bearer {r.json()['token']}"}

    def register(
        self, host: str, gpus: int = 8, hcas: int = 2, address: str = "", container_runtime: str = ""
    ) -> dict[str, str]:
        kept = self.node_tokens.get(host)
        join = kept or self.client.post("/v1/join-tokens", json={}, headers=self.admin()).json()["token"]
        body = {
            "host": host,
            "agent_url": "",
            "address": address,
            "cpu_millicores": 64_000,
            "memory_mib": 512_000,
            "gpus": [{"index": i, "model": "NVIDIA H100 80GB HBM3", "memory_mib": 81559} for i in range(gpus)],
            "hcas": [{"name": f"mlx5_{i}", "rate_gbps": 400.0} for i in range(hcas)],
            "container_runtime": container_runtime,
        }
        r = self.client.post("/v1/agents/register", json=body, headers={"Authorization": f"Bearer {join}"})
        assert r.status_code == 200, r.text
        self.node_tokens[host] = r.json()["node_token"]
        return {"Authorization": f"Bearer {r.json()['node_token']}"}

    def beat(
        self,
        host: str,
        node: dict[str, str],
        workloads: list[dict[str, Any]] | None = None,
        seen_server_s: float | None = None,
    ) -> list[Any]:
        """One heartbeat; ``seen_server_s``: the latest reply the agent says it carried out (None: unsaid)."""
        body: dict[str, Any] = {"seq": 1, "at_s": self.clock.t, "workloads": workloads or []}
        if seen_server_s is not None:
            body["seen_server_s"] = seen_server_s
        r = self.client.post(f"/v1/agents/{host}/heartbeat", json=body, headers=node)
        assert r.status_code == 200, r.text
        return list(r.json()["commands"])


def make_api(url: str, tmp_path: Path, clock: Clock, **overrides: Any) -> Iterator[Api]:
    # A long lease: cycles are driven by hand at any pace (the lease is judged on the database's real clock).
    settings = Settings(
        data_dir=str(tmp_path),
        database_url=url,
        admin_token=ADMIN,
        node_lost_after_s=30.0,
        lease_ttl_s=600.0,
        lease_renew_s=1.0,
    )
    settings = replace(settings, **overrides)
    app = create_app(settings, clock=clock, run_loop=False)
    with TestClient(app) as client:
        yield Api(client, app.state.server, clock)
