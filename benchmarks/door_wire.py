"""The server's CPU per keep-alive request in the layers every agent request crosses before its handler:
uvicorn with ``DoorHttp`` (httptools, uvloop where installed, as ``gpupool server`` runs) and the door's
middlewares as app.py stacks them (``RequestIds``, ``AuthFailures``, ``BodyLimit``), around a stand-in
application that reads the body and answers a small JSON document. Client threads send a heartbeat-sized
POST with a bearer token on their own keep-alive connection, each as soon as its last answer is in. One JSON
line: requests, requests/s, the server process's CPU per request (user + system, from /proc), the 1-minute
load average. The handlers' own cost is benchmarks/agent_overhead.py's.

    .venv/bin/python benchmarks/door_wire.py [--seconds 8] [--clients 8]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from procs import cpu_s

BODY = b'{"node": "n1", "gpus": [' + b",".join(b'{"i": %d, "util": 90.0, "temp": 60}' % i for i in range(8)) + b"]}"
ANSWER = b'{"ok": true, "commands": []}'


def serve(port: int) -> None:
    import uvicorn

    from gpupool.server.door import AuthFailures, BodyLimit
    from gpupool.server.logs import RequestIds
    from gpupool.server.serve import DoorHttp

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body", False):
            pass
        head = [(b"content-type", b"application/json"), (b"content-length", str(len(ANSWER)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": ANSWER})

    async def is_admin(authorization: str) -> bool:
        return False

    limited = BodyLimit(app, max_body_bytes=1 << 20, max_admin_body_bytes=1 << 20, body_timeout_s=10, is_admin=is_admin)
    top = RequestIds(AuthFailures(limited, burst=20, per_s=1.0))
    uvicorn.run(top, host="127.0.0.1", port=port, http=DoorHttp, log_level="warning", access_log=False, lifespan="off")


def load(port: int, clients: int, seconds: float) -> int:
    """Requests answered by ``clients`` keep-alive connections in ``seconds``."""
    head = "POST /v1/agents/heartbeat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += f"Authorization: Bearer gpn_bench.0123456789abcdef0123456789\r\nContent-Length: {len(BODY)}\r\n\r\n"
    request = head.encode() + BODY
    stop = threading.Event()
    counts: list[int] = []

    def client() -> None:
        n = 0
        with socket.create_connection(("127.0.0.1", port)) as conn:
            while not stop.is_set():
                conn.sendall(request)
                buf = b""
                while not buf.endswith(ANSWER):
                    buf += conn.recv(65536)
                n += 1
        counts.append(n)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    time.sleep(seconds)  # the measurement's length, not a wait for a condition
    stop.set()
    for t in threads:
        t.join()
    return sum(counts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--clients", type=int, default=8)
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = multiprocessing.get_context("spawn").Process(target=serve, args=(port,))
    proc.start()
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        load(port, args.clients, 2.0)  # warm-up
        cpu0, wall0 = cpu_s(proc.pid), time.monotonic()
        n = load(port, args.clients, args.seconds)
        used_s, wall_s = cpu_s(proc.pid) - cpu0, time.monotonic() - wall0
    finally:
        proc.terminate()
        proc.join()
    out = {
        "benchmark": "door_wire",
        "requests": n,
        "requests_per_s": round(n / wall_s, 1),
        "server_cpu_us_per_request": round(used_s / n * 1e6, 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
