"""Tokens in the store: SHA-256 hashes found by one primary-key read; tokens of before migration 0011
(PBKDF2) still work and are rewritten on first use; a join token's last use goes to one registration only."""

from __future__ import annotations

import hashlib
import secrets
import threading

import pytest
import sqlalchemy as sa

from databases import Clock
from gpupool.domain.errors import JoinTokenSpentError, NodeNameTakenError
from gpupool.store import Principal, ServerOps, Store
from gpupool.store.agents import Registrant
from gpupool.store.rows import ApiTokenRow


def _stored_hash(store: Store, token_id: str) -> str:
    with store._tx(write=False) as s:
        row = s.get(ApiTokenRow, token_id)
        assert row is not None
        return row.secret_hash


def test_new_tokens_are_kept_as_sha256_of_their_secret(store: Store) -> None:
    info, clear = store.create_token("acme", actor="admin")
    secret = clear.split("_", 2)[2]
    assert _stored_hash(store, info.id) == "sha256$" + hashlib.sha256(secret.encode()).hexdigest()
    assert len(secret) >= 43  # 32 random bytes, url-safe base64


def test_a_pbkdf2_token_from_before_0011_works_and_is_rehashed_on_first_use(store: Store, clock: Clock) -> None:
    token_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    salt = secrets.token_bytes(16)
    legacy = f"pbkdf2_sha256$1000${salt.hex()}${hashlib.pbkdf2_hmac('sha256', secret.encode(), salt, 1000).hex()}"
    with store._tx(write=True) as s:  # as 0001-0010 stored it: no expiry, no note
        s.execute(
            sa.insert(ApiTokenRow).values(
                id=token_id, tenant="acme", admin=False, secret_hash=legacy, created_s=clock.t, revoked_s=None
            )
        )
    clear = f"gpt_{token_id}_{secret}"
    assert store.authenticate(clear[:-1] + ("A" if clear[-1] != "A" else "B")) is None
    assert _stored_hash(store, token_id) == legacy  # a wrong secret rewrites nothing
    assert store.authenticate(clear) == Principal(token_id, "acme", admin=False)
    assert _stored_hash(store, token_id).startswith("sha256$")
    assert store.authenticate(clear) == Principal(token_id, "acme", admin=False)
    (listed,) = store.list_tokens("acme")
    assert (listed.expires_s, listed.note) == (None, "")


def test_a_join_tokens_last_use_goes_to_one_of_two_racing_registrations(db_url: str, clock: Clock) -> None:
    with Store(db_url, clock=clock) as store:
        store.migrate()
        ops = ServerOps(store)
        info, _ = store.create_join_token("admin", max_nodes=1)
        by = Registrant("join", info.id)
        outcomes: list[str] = []
        start = threading.Barrier(2)

        def register(host: str) -> None:
            start.wait()
            try:
                ops.register_agent(host, by=by, log_url="", address="", inventory={}, actor="agent", live_within_s=30.0)
                outcomes.append("registered")
            except JoinTokenSpentError:
                outcomes.append("spent")

        threads = [threading.Thread(target=register, args=(h,)) for h in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(outcomes) == ["registered", "spent"]
        assert store.list_join_tokens()[0].used_nodes == 1


def test_a_registered_name_with_a_stale_node_row_is_not_taken_while_live(store: Store, clock: Clock) -> None:
    ops = ServerOps(store)
    info, _ = store.create_join_token("admin")
    args = {"log_url": "", "address": "", "inventory": {}, "actor": "agent", "live_within_s": 30.0}
    ops.register_agent("h1", by=Registrant("join", info.id), **args)
    store.upsert_node("h1", gpu_model="H100", gpu_count=1, actor="agent")
    store.heartbeat("h1", actor="agent")
    with pytest.raises(NodeNameTakenError, match="live"):
        ops.register_agent("h1", by=Registrant("join", info.id), **args)
    clock.t += 30.0
    ops.register_agent("h1", by=Registrant("join", info.id), **args)
    assert store.list_join_tokens()[0].used_nodes == 1  # a name registered before takes no new use
