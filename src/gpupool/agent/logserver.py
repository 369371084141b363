"""A tiny HTTP server in the agent that serves workload logs: ``GET /logs/{assignment_id}?stream=&tail=``.

It reads the files ``WorkloadRuntime`` writes (``<state_dir>/<assignment_id>/stdout.log``), never the
runtime object itself, so the serving thread shares nothing mutable with the agent loop. Loopback by
default: the server (or an operator's tunnel) fetches from it; logs can hold secrets a job printed.
"""

from __future__ import annotations

import re
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")  # the runtime's own rule for assignment ids
STREAMS = ("stdout", "stderr")
MAX_BYTES = 1 << 20  # one reply never carries more than the last MiB: a chatty job must not stall the agent
_BLOCK = 64 * 1024


def tail_bytes(path: Path, lines: int | None, max_bytes: int = MAX_BYTES) -> bytes:
    """The last ``lines`` lines of ``path`` (all of it when None), at most the last ``max_bytes`` bytes."""
    with path.open("rb") as f:
        size = f.seek(0, 2)
        if lines is None:
            f.seek(max(0, size - max_bytes))
            return f.read()
        if lines <= 0:
            return b""
        # Read backwards block by block until enough newlines are in hand; a final unterminated line counts.
        buf = b""
        pos = size
        while pos > 0 and len(buf) < max_bytes:
            step = min(_BLOCK, pos)
            pos -= step
            f.seek(pos)
            buf = f.read(step) + buf
            if buf.count(b"\n", 0, len(buf) - 1) >= lines:
                break
    body = buf[:-1] if buf.endswith(b"\n") else buf
    parts = body.split(b"\n")[-lines:]
    out = b"\n".join(parts) + (b"\n" if buf.endswith(b"\n") else b"")
    return out[-max_bytes:]


class _Handler(BaseHTTPRequestHandler):
    server: _LogHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        return  # the agent's own log says what matters; one line per log fetch would drown it

    def _reply(self, status: HTTPStatus, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _fail(self, status: HTTPStatus, message: str) -> None:
        self._reply(status, (message + "\n").encode())

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        if len(parts) != 2 or parts[0] != "logs":
            self._fail(HTTPStatus.NOT_FOUND, "only /logs/{assignment_id} is served here")
            return
        aid = parts[1]
        query = parse_qs(url.query)
        stream = query.get("stream", ["stdout"])[-1]
        if stream not in STREAMS:
            self._fail(HTTPStatus.BAD_REQUEST, f"stream must be one of {', '.join(STREAMS)}, not {stream!r}")
            return
        tail: int | None = None
        if "tail" in query:
            raw = query["tail"][-1]
            if not raw.isdigit():
                self._fail(HTTPStatus.BAD_REQUEST, f"tail must be a whole number of lines, not {raw!r}")
                return
            tail = int(raw)
        if not _ID_RE.match(aid):
            self._fail(HTTPStatus.NOT_FOUND, f"no assignment {aid!r}")
            return
        path = self.server.state_dir / aid / f"{stream}.log"
        try:
            body = tail_bytes(path, tail)
        except FileNotFoundError:
            self._fail(HTTPStatus.NOT_FOUND, f"no assignment {aid!r} on this node")
            return
        except OSError as e:
            self._fail(HTTPStatus.INTERNAL_SERVER_ERROR, f"cannot read the log: {e.strerror}")
            return
        self._reply(HTTPStatus.OK, body)

    do_HEAD = do_GET


class _LogHTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a slow reader must not keep the agent from exiting

    def __init__(self, address: tuple[str, int], state_dir: Path) -> None:
        self.state_dir = state_dir
        super().__init__(address, _Handler)


class LogServer:
    """Serves ``state_dir``'s workload logs on ``bind:port`` (0: any free port) from a background thread."""

    def __init__(self, state_dir: str | Path, bind: str = "127.0.0.1", port: int = 0) -> None:
        self._httpd = _LogHTTPServer((bind, port), Path(state_dir))
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="gpupool-agent-logs", daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._httpd.server_address[0])
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def start(self) -> LogServer:
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join()
        self._httpd.server_close()
