"""``AuthFailures`` around a stand-in application that answers each token with a fixed status: a flood of bad
tokens from one address is refused there, a good token from the same address passes (without its address
even being looked at), and a good token that fails loses that pass."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpupool.server import door
from gpupool.server.door import AuthFailures


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


GOOD = {b"Bearer good-1", b"Bearer good-2"}  # the tokens the stand-in application takes


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    status = 200 if dict(scope["headers"])[b"authorization"] in GOOD else 401
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def _status(door_app: AuthFailures, token: str) -> int:
    scope = {
        "type": "http",
        "path": "/v1/agents/heartbeat",
        "headers": [(b"authorization", f"Bearer {token}".encode())],
        "client": ("10.0.0.7", 40000),
    }
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    asyncio.run(door_app(scope, receive, send))
    return int(sent[0]["status"])


def test_a_good_token_passes_its_flooded_address_unlooked_at_until_it_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    looked: list[Any] = []
    address_key = door.address_key
    monkeypatch.setattr(door, "address_key", lambda client: looked.append(client) or address_key(client))
    guard = AuthFailures(_app, burst=3, per_s=0.001, clock=Clock())
    assert _status(guard, "good-1") == 200  # good from now on
    assert [_status(guard, f"bad-{i}") for i in range(5)] == [401, 401, 401, 429, 429]  # the address's burst
    looked.clear()
    assert [_status(guard, "good-1") for _ in range(3)] == [200, 200, 200]
    assert looked == []  # a good token's request never reads its address
    assert _status(guard, "good-2") == 429  # a token new to the flooded address waits like the flood
    assert looked == [("10.0.0.7", 40000)]
    monkeypatch.setattr(door, "address_key", address_key)
    monkeypatch.setattr(f"{__name__}.GOOD", set())  # good-1 is revoked: its next request fails
    assert [_status(guard, "good-1") for _ in range(2)] == [401, 429]  # then it waits at its address
