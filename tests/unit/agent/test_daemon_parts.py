"""The agent's small parts: retry backoff, the log server over a real socket, the client's error mapping."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpupool.agent.logserver import LogServer, read_from, tail_bytes
from gpupool.agent.reporter import (
    Backoff,
    BackoffPolicy,
    NodeUnknownError,
    ProtocolError,
    ServerClient,
    ServerUnavailableError,
)
from gpupool.schemas import agent as wire
from gpupool.schemas import logsig


def test_backoff_doubles_to_the_cap_with_jitter_inside_its_band() -> None:
    policy = BackoffPolicy(base_s=0.5, factor=2.0, cap_s=10.0, jitter=0.25)
    b = Backoff(policy, seed=1)
    delays = [b.next_delay() for _ in range(12)]
    for n, d in enumerate(delays):
        raw = min(10.0, 0.5 * 2**n)
        assert 0.75 * raw <= d <= raw
    assert delays[-1] <= 10.0 and delays[-1] >= 7.5


def test_backoff_is_repeatable_by_seed_and_restarts_after_reset() -> None:
    policy = BackoffPolicy()
    a, b, c = Backoff(policy, 3), Backoff(policy, 3), Backoff(policy, 4)
    seq_a = [a.next_delay() for _ in range(6)]
    assert seq_a == [b.next_delay() for _ in range(6)]
    assert seq_a != [c.next_delay() for _ in range(6)]  # agents with their own seeds do not retry in step
    a.reset()
    assert a.next_delay() <= policy.base_s


def test_backoff_without_jitter_is_exact_and_survives_a_long_outage() -> None:
    b = Backoff(BackoffPolicy(base_s=1.0, factor=3.0, cap_s=20.0, jitter=0.0), seed=0)
    assert [b.next_delay() for _ in range(4)] == [1.0, 3.0, 9.0, 20.0]
    for _ in range(5000):
        b.next_delay()
    assert b.next_delay() == 20.0


@pytest.mark.parametrize("kw", [{"base_s": 0.0}, {"factor": 0.5}, {"cap_s": 0.1, "base_s": 1.0}, {"jitter": 1.5}])
def test_unusable_backoff_policies_are_refused(kw: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="unusable backoff"):
        BackoffPolicy(**kw)


def test_tail_bytes_counts_lines_with_and_without_a_final_newline(tmp_path: Path) -> None:
    p = tmp_path / "log"
    p.write_bytes(b"one\ntwo\nthree\n")
    assert tail_bytes(p, 2) == (b"two\nthree\n", 14)  # and the size: where a follower goes on from
    assert tail_bytes(p, 10)[0] == b"one\ntwo\nthree\n"
    assert tail_bytes(p, 0) == (b"", 14)
    assert tail_bytes(p, None)[0] == b"one\ntwo\nthree\n"
    p.write_bytes(b"one\ntwo\npartial")
    assert tail_bytes(p, 1)[0] == b"partial"
    assert tail_bytes(p, 2)[0] == b"two\npartial"
    p.write_bytes(b"x" * 100 + b"\n")
    assert tail_bytes(p, 5, max_bytes=10)[0] == b"x" * 9 + b"\n"


def test_tail_bytes_reads_backwards_across_blocks(tmp_path: Path) -> None:
    p = tmp_path / "log"
    p.write_bytes(b"".join(f"line {i}\n".encode() for i in range(50_000)))
    assert tail_bytes(p, 3)[0] == b"line 49997\nline 49998\nline 49999\n"


def test_read_from_stops_before_a_character_not_yet_whole(tmp_path: Path) -> None:
    p = tmp_path / "log"
    p.write_bytes("ab\u00e9\u20ac".encode() + "\U0001f600".encode()[:3])  # é (2 bytes), € (3), half an emoji
    assert read_from(p, 0) == ("ab\u00e9\u20ac".encode(), 7)
    assert read_from(p, 0, max_bytes=3) == (b"ab", 2)  # the é would be cut: left for the next read
    assert read_from(p, 7) == (b"", 7)
    with p.open("ab") as f:
        f.write("\U0001f600".encode()[3:])
    assert read_from(p, 7) == ("\U0001f600".encode(), 11)
    assert read_from(p, 99) == (b"", 11)  # past the end: back to it


KEY = "node-log-key"


def signed(logs: LogServer, target: str, *, key: str = KEY, at: float | None = None) -> httpx.Response:
    at = time.time() if at is None else at
    return httpx.get(logs.url + target, headers={logsig.HEADER: logsig.sign(key, "GET", target, at)})


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[LogServer]:
    d = tmp_path / "a-1"
    d.mkdir()
    (d / "stdout.log").write_text("hello\nworld\n")
    (d / "stderr.log").write_text("oops\n")
    s = LogServer(tmp_path).start()
    s.set_key(KEY)
    yield s
    s.close()


def test_log_server_serves_streams_tails_and_offsets_on_loopback(logs: LogServer) -> None:
    assert logs.url.startswith("http://127.0.0.1:")
    r = signed(logs, "/logs/a-1")
    assert r.status_code == 200 and r.text == "hello\nworld\n"
    assert r.headers["content-type"].startswith("text/plain") and r.headers["x-log-next-offset"] == "12"
    assert signed(logs, "/logs/a-1?stream=stderr").text == "oops\n"
    assert signed(logs, "/logs/a-1?stream=stdout&tail=1").text == "world\n"
    r = signed(logs, "/logs/a-1?stream=stdout&offset=6")
    assert (r.text, r.headers["x-log-next-offset"]) == ("world\n", "12")


def test_log_server_answers_only_the_servers_signed_requests(logs: LogServer) -> None:
    for r, why in (
        (httpx.get(f"{logs.url}/logs/a-1"), "no X-Gpupool-Signature header"),
        (signed(logs, "/logs/a-1", key="guessed"), "does not match"),
        (signed(logs, "/logs/a-1", at=time.time() - 120), "s old"),
        (httpx.get(f"{logs.url}/logs/a-1", headers={logsig.HEADER: "t=1"}), "must read t="),
    ):
        assert r.status_code == 401 and why in r.text and "hello" not in r.text, r.text
    # Signed for another path: the signature covers the path and query.
    target = "/logs/a-1?stream=stderr"
    forged = {logsig.HEADER: logsig.sign(KEY, "GET", "/logs/a-1", time.time())}
    assert httpx.get(logs.url + target, headers=forged).status_code == 401
    logs.set_key("")  # an agent that has not registered yet serves nobody
    assert "no log key" in signed(logs, "/logs/a-1").text


@pytest.mark.parametrize(
    ("path", "status", "words"),
    [
        ("/logs/nope", 404, "no assignment 'nope'"),
        ("/logs/.hidden", 404, "no assignment"),
        ("/logs/a-1?stream=env", 400, "stream must be one of stdout, stderr"),
        ("/logs/a-1?tail=-3", 400, "tail must be a whole number"),
        ("/logs/a-1?offset=x", 400, "offset must be a whole number"),
        ("/other", 404, "only /logs/"),
    ],
)
def test_log_server_refuses_what_it_does_not_serve(logs: LogServer, path: str, status: int, words: str) -> None:
    r = signed(logs, path)
    assert r.status_code == status and words in r.text


def test_client_maps_a_dead_server_to_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound and never listening: connection refused
        client = ServerClient(f"http://127.0.0.1:{s.getsockname()[1]}", timeout_s=2.0)
        with pytest.raises(ServerUnavailableError, match="ConnectError"):
            client.register("t", wire.RegisterRequest(host="h"))
        client.close()


def _client(status: int, body: bytes = b"{}") -> ServerClient:
    return ServerClient(
        "http://server", transport=httpx.MockTransport(lambda _req: httpx.Response(status, content=body))
    )


def test_client_maps_statuses_to_what_the_loop_does_next() -> None:
    beat = wire.HeartbeatRequest(seq=0, at_s=0.0)
    with pytest.raises(NodeUnknownError):
        _client(404).heartbeat("h", "t", beat)
    with pytest.raises(NodeUnknownError):
        _client(401).heartbeat("h", "t", beat)
    with pytest.raises(ServerUnavailableError, match="HTTP 503"):
        _client(503).heartbeat("h", "t", beat)
    with pytest.raises(ProtocolError, match="refused: HTTP 422"):
        _client(422, b'{"detail": "bad"}').heartbeat("h", "t", beat)
    with pytest.raises(ProtocolError, match="not a HeartbeatReply"):
        _client(200, b'{"commands": []}').heartbeat("h", "t", beat)
    reply = _client(
        200, b'{"commands": [{"kind": "stop", "assignment_id": "a"}], "heartbeat_interval_s": 1, "server_time_s": 5}'
    )
    got = reply.heartbeat("h", "t", beat)
    assert isinstance(got.commands[0], wire.StopCommand) and got.commands[0].grace_s == 30.0
