"""The agents' routes answered straight from ASGI (``AgentFastPath``) answer exactly what the FastAPI routes do:
the same status, content type, JSON and auth headers, for replies and for every error (bad or missing token,
another host's token, a protocol too far apart, a body that does not validate); on both backends.

The fast path takes a JSON body (``Content-Type: application/json``); the same request with another JSON type
(``application/x-routed+json``) goes to the FastAPI route, which reads any ``+json`` body as JSON. To be sure the fast path answered alone, its
requests are sent to ``AgentFastPath`` wrapped around an app that fails the test if reached, on the real app's
server and event loop."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from server_api_helpers import Api
from starlette.types import Message, Receive, Scope, Send

from gpupool.server.agent_routes import AgentFastPath, fast_route
from gpupool.server.app import error_response

JOB = {"command": ["python", "-c", "print('hi')"], "tasks": 2, "gpus_per_task": 8}  # a rank on each node
GPUS = [{"index": i, "health": "ok", "utilization_pct": 1.0} for i in range(8)]
Answer = tuple[int, dict[str, str], Any]
ROUTED = "application/x-routed+json"  # JSON to FastAPI, not taken by the fast path


async def _not_fastapi(scope: Scope, receive: Receive, send: Send) -> None:
    raise AssertionError(f"the fast path handed {scope['path']} to FastAPI")


def fast(api: Api, path: str, body: bytes, authorization: str | None) -> Answer:
    """``path`` answered by the fast path alone (FastAPI behind it fails the test)."""
    app = AgentFastPath(_not_fastapi, server=api.srv, error_response=error_response)
    headers = [(b"content-type", b"application/json")]
    if authorization is not None:
        headers.append((b"authorization", authorization.encode()))
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("testclient", 50000),  # as TestClient's requests come from
        "server": ("testserver", 80),
    }
    out: dict[str, Any] = {"body": b""}

    async def run() -> None:
        delivered = False

        async def receive() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await anyio.sleep_forever()  # the agent stays connected
            raise AssertionError("unreachable")

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                out["status"] = message["status"]
                out["headers"] = {k.decode().lower(): v.decode() for k, v in message["headers"]}
            else:
                out["body"] += message.get("body", b"")

        await app(scope, receive, send)

    portal = api.client.portal
    assert portal is not None
    portal.call(run)
    return _answer(out["status"], out["headers"], out["body"])


def routed(api: Api, path: str, body: bytes, authorization: str | None, content_type: str = ROUTED) -> Answer:
    """``path`` through the whole app: with a content type the fast path does not take, FastAPI's route."""
    headers = {"Content-Type": content_type}
    if authorization is not None:
        headers["Authorization"] = authorization
    r = api.client.post(path, content=body, headers=headers)
    return _answer(r.status_code, dict(r.headers), r.content)


def _answer(status: int, headers: dict[str, str], body: bytes) -> Answer:
    kept = {k: v for k, v in headers.items() if k in ("content-type", "www-authenticate", "retry-after")}
    return status, kept, json.loads(body) if body else None


def same(api: Api, path: str, doc: Any, authorization: str | None) -> Answer:
    body = json.dumps(doc).encode()
    got = fast(api, path, body, authorization)
    assert got == routed(api, path, body, authorization)
    return got


def test_fast_route_takes_the_agent_routes_only() -> None:
    def scope(path: str, method: str = "POST", root: str = "") -> Scope:
        return {"type": "http", "method": method, "path": path, "root_path": root}

    assert fast_route(scope("/v1/agents/register")) == ("register", "")
    assert fast_route(scope("/v1/agents/gpu-01/heartbeat")) == ("heartbeat", "gpu-01")
    assert fast_route(scope("/v1/agents/gpu-01/commands")) == ("commands", "gpu-01")
    assert fast_route(scope("/v1/agents/gpu-01/reports")) == ("reports", "gpu-01")
    for path in ("/v1/agents/gpu-01/heartbeat/", "/v1/agents//heartbeat", "/v1/agents/a/b/heartbeat", "/v1/jobs"):
        assert fast_route(scope(path)) is None, path
    assert fast_route(scope("/v1/agents/gpu-01/logs")) is None
    assert fast_route(scope("/v1/agents/gpu-01/heartbeat", method="GET")) is None
    assert fast_route(scope("/v1/agents/gpu-01/heartbeat", root="/pool")) is None


def test_replies_are_the_routes_replies(api: Api) -> None:
    node = api.register("gpu-01")
    api.register("gpu-02")
    token = node["Authorization"]
    alice = api.tenant("alice")
    job = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
    assert api.srv.loop.run_cycle().placed == 1
    beat = {"seq": 1, "at_s": api.clock.t, "gpus": GPUS, "workloads": []}
    status, headers, reply = same(api, "/v1/agents/gpu-01/heartbeat", beat, token)
    assert status == 200 and headers["content-type"] == "application/json"
    (launch,) = reply["commands"]  # a launch built from its job's one read (store.launches)
    assert launch["kind"] == "launch" and launch["job_id"] == job and launch["env"]["WORLD_SIZE"] == "2"
    poll = {"workloads": [], "held": [], "executed": []}
    status, _, polled = same(api, "/v1/agents/gpu-01/commands", poll, token)
    assert status == 200 and polled["commands"] == reply["commands"]
    running = {"assignment_id": launch["assignment_id"], "job_id": job, "state": "running", "at_s": api.clock.t}
    assert same(api, "/v1/agents/gpu-01/reports", {"workloads": [running]}, token) == (204, {}, None)
    beat["workloads"] = [running]
    assert same(api, "/v1/agents/gpu-01/heartbeat", beat, token)[2]["commands"] == []


def test_registration_answers_as_the_route(api: Api) -> None:
    join = api.client.post("/v1/join-tokens", json={}, headers=api.admin()).json()["token"]
    inventory = {"host": "gpu-09", "gpus": [{"index": i, "model": "H100", "memory_mib": 81559} for i in range(8)]}
    body = json.dumps(inventory).encode()
    status, headers, first = fast(api, "/v1/agents/register", body, f"Bearer {join}")
    assert status == 200 and headers["content-type"] == "application/json"
    node = f"Bearer {first['node_token']}"
    # Again with its node token, once each way: the same answer but for the new token (and its log key).
    status, _, second = routed(api, "/v1/agents/register", body, node)
    assert status == 200
    node = f"Bearer {second['node_token']}"
    status, _, third = fast(api, "/v1/agents/register", body, node)
    assert status == 200
    changing = ("node_token", "log_key")
    assert {k: v for k, v in second.items() if k not in changing} == {
        k: v for k, v in third.items() if k not in changing
    }
    assert set(first) == set(second) == set(third) and third["log_key"] != second["log_key"]
    # A tenant's token may not register a node: 403, the same both ways.
    status, _, refused = same(api, "/v1/agents/register", inventory, api.tenant("alice")["Authorization"])
    assert status == 403 and refused["code"] == "FORBIDDEN"


@pytest.mark.parametrize("op", ["heartbeat", "commands", "reports"])
def test_errors_are_the_routes_errors(api: Api, op: str) -> None:
    node = api.register("gpu-01")
    other = api.register("gpu-02")
    doc: dict[str, Any] = {
        "heartbeat": {"seq": 1, "at_s": api.clock.t, "workloads": []},
        "commands": {"workloads": [], "held": []},
        "reports": {"workloads": [{"assignment_id": "j-1.1.0", "job_id": "j-1", "state": "running", "at_s": 1.0}]},
    }[op]
    path = f"/v1/agents/gpu-01/{op}"
    for authorization in (None, "Bearer", "Basic abc", "Bearer gpn_nope", other["Authorization"]):
        status, headers, body = same(api, path, doc, authorization)
        assert status == 401 and headers["www-authenticate"] == "Bearer", authorization
        assert body["code"] == "UNAUTHENTICATED", body
    status, _, body = same(api, "/v1/agents/gpu-99/" + op, doc, node["Authorization"])
    assert status == 401  # a host that never registered
    status, _, body = same(api, path, {**doc, "protocol": 999}, node["Authorization"])
    assert status == 426 and body["code"] == "PROTOCOL_UNSUPPORTED"


@pytest.mark.parametrize("raw", [b"{", b"[]", b'{"seq": -1, "at_s": 0}', b'{"seq": 1, "at_s": 0, "workloads": 3}'])
def test_a_body_that_does_not_validate_gets_fastapis_own_422(api: Api, raw: bytes) -> None:
    node = api.register("gpu-01")["Authorization"]
    path = "/v1/agents/gpu-01/heartbeat"
    status, _, body = routed(api, path, raw, node, "application/json")  # the fast path hands it to FastAPI
    assert status == 422 and body["detail"] and body["detail"][0]["loc"][0] == "body"
    assert (status, body) == routed(api, path, raw, node)[::2]
