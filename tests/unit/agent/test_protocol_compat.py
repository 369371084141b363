"""The agent reads a newer server's replies: unknown fields and command kinds are ignored and logged once,
the known commands beside them still arrive; a server more than one protocol version apart is refused.

A real HTTP server on 127.0.0.1 answers with canned JSON, as a server of the next protocol version would.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpupool.agent.reporter import RegistrationRefusedError, ServerClient
from gpupool.schemas import agent as wire


class _Canned(ThreadingHTTPServer):
    daemon_threads = True
    replies: dict[str, object]


class _Handler(BaseHTTPRequestHandler):
    server: _Canned

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        data = json.dumps(self.server.replies[self.path.rsplit("/", 1)[-1]]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server() -> Iterator[_Canned]:
    srv = _Canned(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


NEWER = wire.PROTOCOL_VERSION + wire.PROTOCOL_WINDOW
LAUNCH = {"kind": "launch", "assignment_id": "j1-a0-r0", "job_id": "j1", "argv": ["true"], "cgroup": "/gpupool/j1"}
REPLY = {
    "protocol": NEWER,
    "commands": [LAUNCH, {"kind": "migrate", "assignment_id": "j0-a0-r0", "to": "dgx002"}],
    "heartbeat_interval_s": 2.0,
    "server_time_s": 1.0,
    "lease_s": 30,
}


def test_unknown_fields_and_command_kinds_of_a_newer_server_are_ignored_and_logged_once(
    server: _Canned, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gpupool.agent.reporter")
    server.replies = {
        "register": {"protocol": NEWER, "node_token": "t", "heartbeat_interval_s": 2.0, "server_time_s": 1.0},
        "heartbeat": REPLY,
    }
    client = ServerClient(f"http://127.0.0.1:{server.server_address[1]}")
    try:
        assert client.register("join", wire.RegisterRequest(host="dgx001")).node_token == "t"
        beat = wire.HeartbeatRequest(seq=0, at_s=1.0)
        replies = [client.heartbeat("dgx001", "t", beat) for _ in range(3)]
    finally:
        client.close()
    assert all(r == replies[0] for r in replies)
    (launch,) = replies[0].commands
    assert isinstance(launch, wire.LaunchCommand) and launch.assignment_id == "j1-a0-r0"
    assert replies[0].heartbeat_interval_s == 2.0
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1, warned
    assert "lease_s" in warned[0] and "commands[0].cgroup" in warned[0] and "commands[kind=migrate]" in warned[0]


@pytest.mark.parametrize("gap", [wire.PROTOCOL_WINDOW + 1, -(wire.PROTOCOL_WINDOW + 1)])
def test_a_server_too_far_apart_is_refused_at_registration(server: _Canned, gap: int) -> None:
    far = wire.PROTOCOL_VERSION + gap
    server.replies = {
        "register": {"protocol": far, "node_token": "t", "heartbeat_interval_s": 2.0, "server_time_s": 1.0}
    }
    client = ServerClient(f"http://127.0.0.1:{server.server_address[1]}")
    try:
        with pytest.raises(RegistrationRefusedError, match=f"server speaks protocol {far}"):
            client.register("join", wire.RegisterRequest(host="dgx001"))
    finally:
        client.close()


def test_a_malformed_known_command_is_still_a_protocol_error() -> None:
    # Tolerance covers what this side does not know, not what it knows and cannot use.
    bad = {**REPLY, "commands": [{**LAUNCH, "argv": []}]}
    with pytest.raises(ValueError, match="argv"):
        wire.HeartbeatReply.model_validate(bad)
