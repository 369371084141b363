"""A tiny HTTP server in the agent that serves workload logs to the gpupool server, and to nobody else.

``GET /logs/{assignment_id}?stream=&tail=`` gives the last ``tail`` lines; ``?offset=N`` the bytes from offset
N instead (at most ``MAX_BYTES``, never ending inside a UTF-8 character), which is how ``gpupool logs -f``
follows a log. Every answer says in ``X-Log-Next-Offset`` where the next read starts. Only a request signed
by the server with this node's log key (``schemas/logsig.py``, the key from the registration reply) is
served: a job on the node cannot sign, so it cannot read another job's log here. Loopback by default.

It reads the files ``WorkloadRuntime`` writes (``<state_dir>/<assignment_id>/stdout.log``), never the
runtime object itself, so the serving thread shares nothing mutable with the agent loop.
"""

from __future__ import annotations

import re
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from gpupool.schemas import logsig

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")  # the runtime's own rule for assignment ids
STREAMS = ("stdout", "stderr")
MAX_BYTES = 1 << 20  # one reply never carries more than a MiB: a chatty job must not stall the agent
_BLOCK = 64 * 1024
NEXT_OFFSET = "X-Log-Next-Offset"


def tail_bytes(path: Path, lines: int | None, max_bytes: int = MAX_BYTES) -> tuple[bytes, int]:
    """The last ``lines`` lines of ``path`` (all of it when None), at most the last ``max_bytes`` bytes, and
    the file's size when read (where a follower goes on from)."""
    with path.open("rb") as f:
        size = f.seek(0, 2)
        if lines is None:
            f.seek(max(0, size - max_bytes))
            return f.read(size - f.tell()), size
        if lines <= 0:
            return b"", size
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
    return out[-max_bytes:], size


def read_from(path: Path, offset: int, max_bytes: int = MAX_BYTES) -> tuple[bytes, int]:
    """The bytes of ``path`` from ``offset`` (at most ``max_bytes``, cut before a UTF-8 character that is not
    whole yet) and the offset after them; an offset past the end reads nothing and goes back to the end."""
    with path.open("rb") as f:
        size = f.seek(0, 2)
        if offset >= size:
            return b"", size
        f.seek(offset)
        data = f.read(max_bytes)
    cut = len(data)
    for back in range(1, min(4, len(data)) + 1):  # the start of the last character, if it is a lead byte
        byte = data[-back]
        if byte & 0xC0 != 0x80:
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            if need > back:
                cut = len(data) - back
            break
    return data[:cut], offset + cut


class _Handler(BaseHTTPRequestHandler):
    server: _LogHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        return  # the agent's own log says what matters; one line per log fetch would drown it

    def _reply(self, status: HTTPStatus, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _fail(self, status: HTTPStatus, message: str) -> None:
        self._reply(status, (message + "\n").encode())

    def do_GET(self) -> None:
        refused = logsig.problem(self.server.key, self.command, self.path, self.headers.get(logsig.HEADER), time.time())
        if refused is not None:
            self._fail(HTTPStatus.UNAUTHORIZED, refused)
            return
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
        numbers: dict[str, int] = {}
        for name in ("tail", "offset"):
            raw = query.get(name, [""])[-1]
            if name in query and not raw.isdigit():
                self._fail(HTTPStatus.BAD_REQUEST, f"{name} must be a whole number, not {raw!r}")
                return
            if name in query:
                numbers[name] = int(raw)
        if not _ID_RE.match(aid):
            self._fail(HTTPStatus.NOT_FOUND, f"no assignment {aid!r}")
            return
        path = self.server.state_dir / aid / f"{stream}.log"
        try:
            if "offset" in numbers:
                body, after = read_from(path, numbers["offset"])
            else:
                body, after = tail_bytes(path, numbers.get("tail"))
        except FileNotFoundError:
            self._fail(HTTPStatus.NOT_FOUND, f"no assignment {aid!r} on this node")
            return
        except OSError as e:
            self._fail(HTTPStatus.INTERNAL_SERVER_ERROR, f"cannot read the log: {e.strerror}")
            return
        self._reply(HTTPStatus.OK, body, headers={NEXT_OFFSET: str(after)})

    do_HEAD = do_GET


class _LogHTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a slow reader must not keep the agent from exiting

    def __init__(self, address: tuple[str, int], state_dir: Path) -> None:
        self.state_dir = state_dir
        self.key = ""  # the node's log key: "" until the agent registers (and every request is refused)
        super().__init__(address, _Handler)


class LogServer:
    """Serves ``state_dir``'s workload logs on ``bind:port`` (0: any free port) from a background thread."""

    def __init__(self, state_dir: str | Path, bind: str = "127.0.0.1", port: int = 0) -> None:
        self._httpd = _LogHTTPServer((bind, port), Path(state_dir))
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="gpupool-agent-logs", daemon=True)

    def set_key(self, key: str) -> None:
        """The key the server signs with, from the agent's latest registration (a str swap: no lock needed)."""
        self._httpd.key = key

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
