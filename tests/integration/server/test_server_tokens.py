"""Tokens through the API (list, create with an expiry, revoke: audited, refused on the next request), node
identity at registration (a join token takes no live node's name; the node's own token or an admin may) and
/metrics behind a token. On SQLite and PostgreSQL, the real app, a hand clock."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from server_api_helpers import ADMIN, Api, Clock, make_api

from gpupool.store.fencing import LEASE_IDLE_S

BODY: dict[str, Any] = {"agent_url": "", "gpus": [{"index": 0, "model": "H100", "memory_mib": 81559}]}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def register(api: Api, host: str, token: str) -> Any:
    return api.client.post("/v1/agents/register", json={**BODY, "host": host}, headers=bearer(token))


def join_token(api: Api, **body: Any) -> str:
    r = api.client.post("/v1/join-tokens", json=body, headers=api.admin())
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


def audit(api: Api, action: str) -> list[dict[str, Any]]:
    return [{"actor": e.actor, "subject": e.subject, "data": e.data} for e in api.srv.store.list_audit(action=action)]


# -- API tokens ----------------------------------------------------------------------------------------------
def test_a_revoked_token_is_refused_on_its_very_next_request(api: Api) -> None:
    alice = api.tenant("alice")
    assert api.client.get("/v1/jobs", headers=alice).status_code == 200  # used once: nothing may remember it
    (listed,) = api.client.get("/v1/tokens", params={"tenant": "alice"}, headers=api.admin()).json()["tokens"]
    assert listed["state"] == "active" and listed["tenant"] == "alice"
    r = api.client.delete(f"/v1/tokens/{listed['id']}", headers=api.admin())
    assert r.status_code == 200 and r.json()["state"] == "revoked"
    refused = api.client.get("/v1/jobs", headers=alice)
    assert refused.status_code == 401 and refused.json()["code"] == "UNAUTHENTICATED"
    # Revoking again changes nothing and is not audited again; the one event names the admin.
    assert api.client.delete(f"/v1/tokens/{listed['id']}", headers=api.admin()).status_code == 200
    (event,) = audit(api, "token.revoked")
    assert event["actor"] == "admin:bootstrap" and event["subject"] == f"token/{listed['id']}"


def test_tokens_expire_and_listings_never_show_a_secret(api: Api, clock: Clock) -> None:
    api.tenant("acme")
    body = {"tenant": "acme", "expires_in_s": 60, "note": "ci bot"}
    made = api.client.post("/v1/tokens", json=body, headers=api.admin()).json()
    assert made["expires_s"] == clock.t + 60
    acme = bearer(made["token"])
    assert api.client.get("/v1/jobs", headers=acme).status_code == 200
    listing = api.client.get("/v1/tokens", headers=api.admin())
    secret = made["token"].split("_", 2)[2]
    assert secret not in listing.text and "secret" not in listing.text
    clock.t += 60
    assert api.client.get("/v1/jobs", headers=acme).status_code == 401
    states = {t["id"]: t["state"] for t in api.client.get("/v1/tokens", headers=api.admin()).json()["tokens"]}
    assert states[made["id"]] == "expired"
    (event,) = [e for e in audit(api, "token.created") if e["data"]["note"] == "ci bot"]
    assert event["data"]["expires_s"] == made["expires_s"] and event["actor"] == "admin:bootstrap"


def test_bad_expiries_and_ids_are_refused_with_the_field_named(api: Api, clock: Clock) -> None:
    api.tenant("acme")
    for body, field in (
        ({"tenant": "acme", "expires_in_s": 10, "expires_at_s": clock.t + 10}, "expires_in_s"),
        ({"tenant": "acme", "expires_at_s": clock.t - 1}, "expires_at_s"),
        ({"tenant": "acme", "expires_in_s": 0}, "expires_in_s"),
        ({"tenant": "acme", "admin": True}, "tenant"),
    ):
        r = api.client.post("/v1/tokens", json=body, headers=api.admin())
        assert r.status_code == 422, (body, r.text)
        assert field in str(r.json()["detail"][0]["loc"]), r.text
    assert api.client.post("/v1/join-tokens", json={"max_nodes": 0}, headers=api.admin()).status_code == 422
    assert len(api.client.get("/v1/tokens", headers=api.admin()).json()["tokens"]) == 1  # the helper's only
    assert api.client.delete("/v1/tokens/nope", headers=api.admin()).status_code == 404
    assert api.client.delete("/v1/join-tokens/nope", headers=api.admin()).status_code == 404


def test_token_routes_need_an_admin(api: Api) -> None:
    alice = api.tenant("alice")
    for method, path in (("GET", "/v1/tokens"), ("GET", "/v1/join-tokens"), ("DELETE", "/v1/tokens/x")):
        assert api.client.request(method, path, headers=alice).status_code == 403
        assert api.client.request(method, path).status_code == 401


# -- join tokens and node identity ---------------------------------------------------------------------------
def test_a_join_token_registers_as_many_new_nodes_as_allowed_and_stops_when_revoked(api: Api) -> None:
    join = join_token(api, max_nodes=2, note="rack 7")
    assert register(api, "n1", join).status_code == 200
    assert register(api, "n2", join).status_code == 200
    third = register(api, "n3", join)
    assert third.status_code == 409 and third.json()["code"] == "JOIN_TOKEN_SPENT"
    (listed,) = [t for t in api.client.get("/v1/join-tokens", headers=api.admin()).json()["join_tokens"]]
    assert (listed["used_nodes"], listed["max_nodes"], listed["note"]) == (2, 2, "rack 7")
    other = join_token(api)
    other_id = other.split("_")[1]
    assert api.client.delete(f"/v1/join-tokens/{other_id}", headers=api.admin()).json()["state"] == "revoked"
    refused = register(api, "n3", other)
    assert refused.status_code == 401 and refused.json()["code"] == "UNAUTHENTICATED"
    assert api.srv.store.list_audit(action="join_token.revoked")[0].actor == "admin:bootstrap"


@pytest.mark.slow
def test_a_registration_stalled_inside_its_transaction_still_registers(pg_schema_url: str, tmp_path: Path) -> None:
    """A server stalled between two statements of a transaction (starved of CPU, or another thread collecting
    garbage with the GIL held: 4-7 s of wall time for 0.1 s of CPU at load 21-26 on this machine) is alive, and
    its transaction must not be ended under it. Here the registration's node write stalls after taking its row
    for longer than the 5 s (LEASE_IDLE_S) that every PostgreSQL session once had as its idle-in-transaction
    limit, which answered 503 STORE_UNAVAILABLE "idle-in-transaction timeout"; now only the transactions that
    lock the leadership row keep that limit. The node registers, and beats."""
    stalls: list[str] = []

    def stall(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not stalls and "FROM nodes" in statement and "FOR UPDATE" in statement:
            stalls.append(statement)
            threading.Event().wait(LEASE_IDLE_S + 1.0)  # the stall itself: nothing to poll for

    with contextmanager(make_api)(pg_schema_url, tmp_path, Clock()) as api:
        sa.event.listen(api.srv.store._engine, "after_cursor_execute", stall)
        node = api.register("gpu-01")
        assert len(stalls) == 1
        assert api.beat("gpu-01", node) == []
        (registered,) = api.srv.store.list_audit(action="node.registered")
        assert registered.subject == "node/gpu-01"


def test_join_tokens_expire(api: Api, clock: Clock) -> None:
    join = join_token(api, expires_in_s=30)
    clock.t += 30
    assert register(api, "n1", join).status_code == 401


def test_a_rogue_registration_with_a_join_token_for_a_live_node_is_refused(api: Api, clock: Clock) -> None:
    join = join_token(api)
    real = bearer(register(api, "gpu-01", join).json()["node_token"])
    api.beat("gpu-01", real)
    rogue = register(api, "gpu-01", join)
    assert rogue.status_code == 409 and rogue.json()["code"] == "NODE_NAME_TAKEN"
    assert "node_token" not in rogue.text
    api.beat("gpu-01", real)  # the real node's token keeps working
    (registered,) = api.srv.store.list_audit(action="agent.registered")
    assert registered.data["by"] == "join"
    # Once the node is lost (silent past the timeout), a join token may register its name again.
    clock.t += api.srv.settings.node_lost_after_s + 1
    assert register(api, "gpu-01", join).status_code == 200
    assert api.client.post("/v1/agents/gpu-01/heartbeat", json={"seq": 2, "at_s": 0}, headers=real).status_code == 401


def test_the_node_token_or_an_admin_may_register_a_live_node_again(api: Api) -> None:
    first = register(api, "gpu-01", join_token(api)).json()["node_token"]
    api.beat("gpu-01", bearer(first))
    again = register(api, "gpu-01", first)
    assert again.status_code == 200
    second = again.json()["node_token"]
    assert register(api, "gpu-01", first).status_code == 401  # replaced: the old node token is no one's now
    by_admin = register(api, "gpu-01", ADMIN)
    assert by_admin.status_code == 200
    assert (
        api.client.post("/v1/agents/gpu-01/heartbeat", json={"seq": 1, "at_s": 0}, headers=bearer(second)).status_code
        == 401
    )
    assert [e.data["by"] for e in api.srv.store.list_audit(action="agent.registered")] == ["join", "node", "admin"]
    assert api.srv.store.list_audit(action="agent.registered")[-1].actor == "admin:bootstrap"
    # A tenant's token registers nothing, and another host's node token is not this one's.
    other = register(api, "gpu-02", join_token(api)).json()["node_token"]
    assert register(api, "gpu-01", other).status_code == 401
    assert register(api, "gpu-01", api.tenant("alice")["Authorization"].split()[1]).status_code == 403


def test_the_log_url_is_the_peer_address_with_the_announced_port(api: Api) -> None:
    body = {**BODY, "host": "gpu-01", "agent_url": "http://169.254.169.254:8123/latest/meta-data"}
    r = api.client.post("/v1/agents/register", json=body, headers=bearer(join_token(api)))
    assert r.status_code == 200
    (node,) = api.client.get("/v1/nodes", headers=api.admin()).json()["nodes"]
    assert node["agent_url"] == "http://testclient:8123"  # Starlette's test client's peer "address"


# -- /metrics ------------------------------------------------------------------------------------------------
def test_metrics_need_an_admin_or_the_metrics_token(db_url: str, tmp_path: Path, clock: Clock) -> None:
    for api in make_api(db_url, tmp_path, clock, metrics_token="scrape-me-0123456789"):
        assert api.client.get("/metrics").status_code == 401
        assert api.client.get("/metrics", headers=api.tenant("alice")).status_code == 403
        assert api.client.get("/metrics", headers=bearer("wrong")).status_code == 401
        for ok in (api.admin(), bearer("scrape-me-0123456789")):
            r = api.client.get("/metrics", headers=ok)
            assert r.status_code == 200 and "gpupool_" in r.text
    for api in make_api(db_url, tmp_path / "open", clock, metrics_open=True):
        assert api.client.get("/metrics").status_code == 200
