"""The server under uvicorn, with the door's connection limits: the one way ``gpupool server`` runs it.

uvicorn (with httptools) closes an idle keep-alive connection after ``keep_alive_s`` but waits forever for
the first request of a new connection, and for headers sent a byte at a time; httptools bounds neither their
time nor their size. ``DoorHttp`` adds both: a connection whose next request line and headers are not in
within ``header_timeout_s`` is closed, and one whose headers pass ``max_header_bytes`` gets a 431 and is
closed. Idle and slow connections then cost a file descriptor for seconds, and the process raises its soft
``RLIMIT_NOFILE`` to ``max_open_files`` at start, so a thousand of them do not stop it accepting more.
A response goes out in one write (one send), its status line and headers with its body (see ``_Lingering``).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import resource
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gpupool.server.settings import Settings

log = logging.getLogger("gpupool.server")
SHUTDOWN_GRACE_S = 3  # seconds in-flight requests get to finish once the server is told to stop


LINGER_S = 2.0  # a refused body's sender gets this long to read the answer before the connection is reset
HOLD_BYTES = 64 << 10  # written bytes held for one event-loop pass at most; past this they go out at once


class _Lingering:
    """The connection's transport as uvicorn's request cycles see it, with one send per response and a
    lingering close.

    One send: uvicorn writes a response's status line and headers, then its body, each with its own
    ``transport.write`` (a send system call each). What is written in one pass of the event loop is held and
    handed to the transport as one write: when the response is complete (``flush`` from the protocol), at the
    end of the pass otherwise (a streamed body's chunks, a 100 Continue), and before a close or an end of
    stream. A write that would take what is held past ``HOLD_BYTES`` goes out at once, after what is held:
    a large body is never held or copied. The transport's own flow control (``pause_writing`` past its
    high-water mark) sees every byte within the same pass.

    Lingering close: closed while the client is still sending a body the server refused (a 413 from the
    headers alone), a socket resets and the client may never read the answer. Instead the answer is followed
    by a FIN, what the client still sends is read and dropped for up to ``LINGER_S``, and only then is the
    connection closed."""

    def __init__(self, inner: asyncio.Transport, protocol: DoorHttp) -> None:
        self._inner = inner
        self._protocol = protocol
        self.lingering = False
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._flush_due = False
        self._open = True  # False once closed, ended or lost: then writes go straight to the transport

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._open:
            self._inner.write(data)  # whatever the transport makes of a write after its end
            return
        if not data:
            return
        if self._held_bytes + len(data) > HOLD_BYTES:
            self.flush()  # what is held goes first, then this, uncopied
            self._inner.write(data)
            return
        self._held.append(bytes(data))  # bytes as they are now (a no-op for bytes)
        self._held_bytes += len(data)
        if not self._flush_due:
            self._flush_due = True
            self._protocol.loop.call_soon(self._end_of_pass)

    def writelines(self, data: Any) -> None:
        for chunk in data:
            self.write(chunk)

    def _end_of_pass(self) -> None:
        self._flush_due = False
        if self._inner.is_closing():
            self.lost()  # closed under us (the peer went away): there is no one to send it to
        else:
            self.flush()

    def flush(self) -> None:
        """Hand what is held to the transport, as one write."""
        held = self._held
        if held:
            self._held = []
            self._held_bytes = 0
            self._inner.write(held[0] if len(held) == 1 else b"".join(held))

    def lost(self) -> None:
        """The connection is gone: what is held has nowhere to go."""
        self._open = False
        self._held = []
        self._held_bytes = 0

    def get_write_buffer_size(self) -> int:
        return self._inner.get_write_buffer_size() + self._held_bytes

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._inner.get_extra_info(name, default)

    def is_closing(self) -> bool:
        return self.lingering or self._inner.is_closing()

    def write_eof(self) -> None:
        if self._open:
            self.flush()
            self._open = False
        self._inner.write_eof()

    def abort(self) -> None:
        self.lost()
        self._inner.abort()

    def close(self) -> None:
        if self.lingering or self._inner.is_closing():
            return
        self.flush()
        self._open = False
        if not self._protocol.body_pending or not self._inner.can_write_eof():
            self._inner.close()
            return
        self.lingering = True
        self._inner.write_eof()
        self._inner.resume_reading()  # uvicorn may have paused it on a large body
        self._protocol.loop.call_later(LINGER_S, self._inner.close)


class DoorHttp(HttpToolsProtocol):
    header_timeout_s = 10.0
    max_header_bytes = 64 << 10

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The next request's line and headers are due by _head_due (None: not waited for). One timer serves
        # many requests: when it fires early (the deadline moved on since), it is set again for the new one.
        self._head_due: float | None = None
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0  # bytes received while the current request's headers are incomplete
        self.body_pending = False  # a request's headers are in and its body is not

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = _Lingering(transport, self)  # type: ignore[assignment]
        self._arm()

    def _arm(self) -> None:
        self._head_bytes = 0
        self._head_due = self.loop.time() + self.header_timeout_s
        if self._head_timer is None:
            self._head_timer = self.loop.call_at(self._head_due, self._head_timeout)

    def _disarm(self) -> None:
        self._head_due = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        due = self._head_due
        if due is None:
            return
        if due > self.loop.time():
            self._head_timer = self.loop.call_at(due, self._head_timeout)
            return
        self._head_due = None
        if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
            self.transport.close()  # no request in flight: an idle or slow connection

    def data_received(self, data: bytes) -> None:
        if isinstance(self.transport, _Lingering) and self.transport.lingering:
            return  # the rest of a refused body: dropped unread
        waiting = self._head_due is not None
        super().data_received(data)
        if waiting and self._head_due is not None and not self.transport.is_closing():
            self._head_bytes += len(data)  # the headers are still incomplete: all of it was head
            if self._head_bytes > self.max_header_bytes:
                self._disarm()
                self._send_431()

    def _send_431(self) -> None:
        msg = f"request line and headers over {self.max_header_bytes} bytes".encode()
        head = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
        self.transport.write(head + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(msg) + msg)
        self.transport.close()

    def on_headers_complete(self) -> None:
        self._disarm()
        self.body_pending = True
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self.body_pending = False
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self.transport.flush()  # type: ignore[attr-defined]  # the whole response, as one write
        idle = not self.pipeline  # else the next request's headers are in already
        super().on_response_complete()
        if idle and not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if isinstance(self.transport, _Lingering):
            self.transport.lost()
        super().connection_lost(exc)


def raise_open_files(wanted: int) -> int:
    """Raise the soft RLIMIT_NOFILE to ``wanted`` (never above the hard limit, never lower); the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def serve(app: Any, settings: Settings) -> None:
    """Run ``app`` on ``settings.host:port`` until told to stop (SIGINT, SIGTERM)."""
    gc.set_threshold(*settings.gc_thresholds)
    files = raise_open_files(settings.max_open_files)
    if files < settings.max_open_files:
        log.warning("open files limited to %d (hard limit), below max_open_files %d", files, settings.max_open_files)
    protocol = type(
        "DoorHttp",
        (DoorHttp,),
        {"header_timeout_s": settings.header_timeout_s, "max_header_bytes": settings.max_header_bytes},
    )
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        http=protocol,
        log_level=settings.log_level,
        log_config=None,
        access_log=settings.access_log,
        ssl_certfile=settings.tls_cert or None,
        ssl_keyfile=settings.tls_key or None,
        # A bounded graceful shutdown: agents' commands long-polls stay open up to command_wait_s, and uvicorn
        # would otherwise wait for every one of them; cut off, an agent reconnects (to this server restarted,
        # or a standby).
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        timeout_keep_alive=settings.keep_alive_s,
        limit_concurrency=settings.limit_concurrency or None,
        backlog=settings.backlog,
    )
