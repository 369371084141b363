"""What ``DoorHttp`` and its transport wrapper put on the wire, under a real uvicorn in this process with the
transport's writes counted: one write per response (status line, headers and body together), pipelined
answers in order, streamed and large bodies whole and never held past ``HOLD_BYTES``, a 100 Continue and a
streamed chunk sent while the application still waits, a 413 read by a client still sending its body, and the
header timeout measured from the last answer on a keep-alive connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any, BinaryIO

import uvicorn

from gpupool.server.door import BodyLimit
from gpupool.server.serve import HOLD_BYTES, DoorHttp
from procs import free_port, until

HEAD_TIMEOUT_S = 1.0


class _Counted:
    """A transport that records each write made to it (what the wrapper hands on: one send each)."""

    def __init__(self, inner: asyncio.Transport) -> None:
        self._inner = inner
        self.writes: list[bytes] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self._inner.write(data)


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``/echo/X``: X back; ``/stream/N``: N chunks of 16 KiB, a pass of the loop between some;
    ``/big/N``: N bytes in one body; ``/wait``: a first chunk, then the rest once the request body is in."""
    if scope["type"] != "http":
        return
    path: str = scope["path"]
    plain = [(b"content-type", b"text/plain")]
    if path.startswith("/stream/"):
        await send({"type": "http.response.start", "status": 200, "headers": plain})
        for i in range(int(path.rsplit("/", 1)[1])):
            await send({"type": "http.response.body", "body": bytes([65 + i % 26]) * (16 << 10), "more_body": True})
            if i % 7 == 6:
                await asyncio.sleep(0)
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/wait":
        await send({"type": "http.response.start", "status": 200, "headers": plain})
        await send({"type": "http.response.body", "body": b"first;", "more_body": True})
        got = b""
        while (message := await receive())["type"] == "http.request":
            got += message.get("body", b"")
            if not message.get("more_body", False):
                break
        await send({"type": "http.response.body", "body": b"then " + got})
        return
    body = b"x" * int(path.rsplit("/", 1)[1]) if path.startswith("/big/") else path.encode()
    while (await receive()).get("more_body", False):
        pass
    head = [*plain, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def _nobody_is_admin(authorization: str) -> bool | None:
    return False


@contextlib.contextmanager
def serving(app: Any = _app) -> Iterator[tuple[int, list[_Counted]]]:
    """A uvicorn server of ``app`` with ``DoorHttp``, and the counted transports of its connections."""
    transports: list[_Counted] = []

    class Counted(DoorHttp):
        header_timeout_s = HEAD_TIMEOUT_S

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            transports.append(_Counted(transport))
            super().connection_made(transports[-1])  # type: ignore[arg-type]

    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, http=Counted, lifespan="off", log_config=None, timeout_keep_alive=30
    )
    config.timeout_graceful_shutdown = 2
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    until(lambda: server.started, 20, "uvicorn started")
    try:
        yield port, transports
    finally:
        server.should_exit = True
        thread.join(20)


def _response(f: BinaryIO) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response from ``f`` (Content-Length or chunked), leaving what follows unread."""
    status = int(f.readline().split()[1])
    headers = {}
    while (line := f.readline()) not in (b"\r\n", b""):
        name, value = line.decode().split(":", 1)
        headers[name.lower()] = value.strip()
    if "content-length" in headers:
        return status, headers, f.read(int(headers["content-length"]))
    body = b""
    while size := int(f.readline(), 16):
        body += f.read(size)
        assert f.read(2) == b"\r\n"
    assert f.read(2) == b"\r\n"
    return status, headers, body


def _get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


def test_each_keep_alive_response_is_one_write() -> None:
    with serving() as (port, transports), socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        f = s.makefile("rb")
        for i in range(3):
            s.sendall(_get(f"/echo/{i}"))
            assert _response(f)[::2] == (200, f"/echo/{i}".encode())
        (counted,) = transports
        # Before: the status line and headers, then the body, two writes (two sends) per response.
        assert len(counted.writes) == 3, [w[:40] for w in counted.writes]
        assert all(
            w.startswith(b"HTTP/1.1 200 OK\r\n") and w.endswith(b"/echo/%d" % i) for i, w in enumerate(counted.writes)
        )


def test_pipelined_requests_are_answered_in_order() -> None:
    with serving() as (port, transports), socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"".join(_get(f"/echo/{i}") for i in range(5)))
        f = s.makefile("rb")
        assert [_response(f)[2] for _ in range(5)] == [f"/echo/{i}".encode() for i in range(5)]
        assert len(transports[0].writes) == 5


def test_streamed_and_large_bodies_arrive_whole_and_are_never_held_whole() -> None:
    with serving() as (port, transports), socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        f = s.makefile("rb")
        s.sendall(_get("/stream/40"))
        status, headers, body = _response(f)
        assert (status, headers["transfer-encoding"], len(body)) == (200, "chunked", 40 * (16 << 10))
        assert body == b"".join(bytes([65 + i % 26]) * (16 << 10) for i in range(40))
        streamed = transports[0].writes
        assert max(map(len, streamed)) <= HOLD_BYTES and len(streamed) >= len(body) // HOLD_BYTES, len(streamed)
        s.sendall(_get("/big/3000000"))
        assert _response(f)[2] == b"x" * 3_000_000
        s.sendall(_get("/echo/after"))  # the connection still serves, in order
        assert _response(f)[2] == b"/echo/after"


def test_a_chunk_and_a_100_continue_go_out_while_the_application_waits() -> None:
    with serving() as (port, _), socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        f = s.makefile("rb")
        # The application answers its first chunk, then waits for a body sent only once that chunk is read.
        s.sendall(b"POST /wait HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n")
        assert f.readline().startswith(b"HTTP/1.1 200 ")
        while f.readline() != b"\r\n":
            pass
        assert f.readline() == b"6\r\n" and f.read(8) == b"first;\r\n"
        s.sendall(b"body")
        assert f.readline() == b"9\r\n" and f.read(11) == b"then body\r\n" and f.read(5) == b"0\r\n\r\n"
        # A client that waits for 100 Continue before its body gets it.
        s.sendall(b"POST /echo/c HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
        assert f.readline() == b"HTTP/1.1 100 Continue\r\n" and f.readline() == b"\r\n"
        s.sendall(b"abc")
        assert _response(f)[::2] == (200, b"/echo/c")


def test_a_413_is_read_by_a_client_still_sending_its_body() -> None:
    door = BodyLimit(_app, max_body_bytes=1000, max_admin_body_bytes=1000, body_timeout_s=5, is_admin=_nobody_is_admin)
    with serving(door) as (port, _), socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(_get("/echo/first"))  # a keep-alive answer first: the 413 is not the connection's only write
        f = s.makefile("rb")
        assert _response(f)[2] == b"/echo/first"
        size = 20 << 20
        s.sendall(f"POST /echo/big HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode())
        sender = threading.Thread(target=_send_quietly, args=(s, size), daemon=True)
        sender.start()
        status, headers, body = _response(f)
        assert (status, headers["connection"]) == (413, "close") and b"BODY_TOO_LARGE" in body, body
        sender.join(30)


def _send_quietly(s: socket.socket, size: int) -> None:
    with contextlib.suppress(OSError):
        s.sendall(b"y" * size)


def test_the_header_timeout_counts_from_the_last_answer() -> None:
    with serving() as (port, _):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            f = s.makefile("rb")
            # Requests paced past several header timeouts since the connection opened: each in time, answered.
            start = time.monotonic()
            for i in range(8):
                s.sendall(_get(f"/echo/{i}"))
                assert _response(f)[2] == f"/echo/{i}".encode()
                time.sleep(0.3 * HEAD_TIMEOUT_S)
            assert time.monotonic() - start > 2 * HEAD_TIMEOUT_S
            _closed_after_one_timeout(s, f)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            # One request well into the first wait: the wait then starts over from its answer, and still ends.
            time.sleep(0.3 * HEAD_TIMEOUT_S)
            _closed_after_one_timeout(s, s.makefile("rb"))


def _closed_after_one_timeout(s: socket.socket, f: BinaryIO) -> None:
    """A request answered, then the connection left idle: closed once the next headers are overdue, not before."""
    asked = time.monotonic()  # the server's wait for the next headers starts after this
    s.sendall(_get("/echo/last"))
    assert _response(f)[2] == b"/echo/last"
    assert f.read(1) == b""
    idle_s = time.monotonic() - asked
    assert HEAD_TIMEOUT_S <= idle_s < HEAD_TIMEOUT_S + 5, idle_s
