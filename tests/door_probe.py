"""Attacks on the server's door and what a legitimate client sees meanwhile: used by tests/e2e/test_door.py and
benchmarks/door.py, against a real ``gpupool server`` process (``procs.ServerProc``).

- ``held_connections``: N connections that send nothing or half a request line and headers (slowloris);
- ``timed_requests``: legitimate requests, each on a new connection, and how long each took;
- ``big_body``: a body of N bytes sent (Content-Length or chunked) to a route, the answer's status read as soon
  as the server gives one (it may answer before the body is sent);
- ``flood``: threads sending requests with wrong tokens as fast as the server answers them;
- ``silent_agent_logs``: log requests for a job on a node whose log server never answers, and what the API
  and that node's heartbeats take meanwhile.
"""

from __future__ import annotations

import contextlib
import resource
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from procs import ServerProc, until


def raise_nofile(wanted: int) -> int:
    """This process's soft RLIMIT_NOFILE raised toward ``wanted`` (at most the hard limit); the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


@contextlib.contextmanager
def held_connections(port: int, idle: int, slow: int) -> Iterator[list[socket.socket]]:
    """``idle`` connections that send nothing and ``slow`` ones that stop in the middle of their headers."""
    socks: list[socket.socket] = []
    try:
        for i in range(idle + slow):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            if i >= idle:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            socks.append(s)
        yield socks
    finally:
        for s in socks:
            s.close()


def closed_by_server(socks: list[socket.socket]) -> int:
    """How many of ``socks`` the server has closed (end of stream or reset; an answer counts as open)."""
    n = 0
    for s in socks:
        s.setblocking(False)
        try:
            n += s.recv(1, socket.MSG_PEEK) == b""
        except BlockingIOError:
            pass
        except OSError:
            n += 1
    return n


def timed_requests(base: str, token: str, n: int, path: str = "/v1/jobs") -> list[float]:
    """``n`` GETs of ``path``, each on a new connection; the seconds each took (inf: failed or not a 200)."""
    out = []
    for _ in range(n):
        start = time.monotonic()
        try:
            with httpx.Client(base_url=base, timeout=10) as c:
                ok = c.get(path, headers={"Authorization": f"Bearer {token}"}).status_code == 200
        except httpx.HTTPError:
            ok = False
        out.append(time.monotonic() - start if ok else float("inf"))
    return out


def big_body(
    port: int, path: str, size: int, *, chunked: bool, token: str = "", method: str = "POST"
) -> tuple[int, int]:
    """(the answer's status, bytes of body sent before it came); status 0: the connection closed unanswered."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += f"Authorization: Bearer {token}\r\n" if token else ""
    head += "Transfer-Encoding: chunked\r\n\r\n" if chunked else f"Content-Length: {size}\r\n\r\n"
    sent, block = 0, b"[" * 65536
    reply = b""
    try:
        s.sendall(head.encode())
        wait_s = (
            0.0 if chunked else 2.0
        )  # a server that answers from the headers alone does so before any of the body is sent
        while sent < size and not reply:
            if select.select([s], [], [], wait_s)[0]:
                reply = s.recv(65536)
                break
            part = block[: size - sent]
            s.sendall(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
            sent += len(part)
            wait_s = 0.0
        if not reply:
            if chunked:
                s.sendall(b"0\r\n\r\n")
            reply = s.recv(65536)
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        s.close()
    status = int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else 0
    return status, sent


@dataclass
class Flood:
    """Wrong-token requests from ``threads`` threads until stopped: the status codes they got."""

    base: str
    threads: int = 4
    statuses: list[int] = field(default_factory=list)
    retry_after: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)

    def _run(self, i: int) -> None:
        with httpx.Client(base_url=self.base, timeout=10) as c:
            n = 0
            while not self._stop.is_set():
                n += 1
                try:
                    r = c.get("/v1/jobs", headers={"Authorization": f"Bearer gpt_wrong{i}x{n % 7}.nope"})
                except httpx.HTTPError:
                    continue
                self.statuses.append(r.status_code)
                if "retry-after" in r.headers:
                    self.retry_after.add(r.headers["retry-after"])

    def __enter__(self) -> Flood:
        self._workers = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(self.threads)]
        for t in self._workers:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._workers:
            t.join(15)


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class SilentRun:
    answers: list[tuple[int, float]]  # (status, seconds) of each log request
    api: list[float]  # seconds of legitimate API requests made meanwhile (new connections)
    beats: list[float]  # seconds of the silent node's heartbeats meanwhile (inf: not a 200)


def silent_agent_logs(srv: ServerProc, token: str, n: int) -> SilentRun:
    """``n`` concurrent log requests for a job placed on a node whose log server accepts and never answers."""
    with socket.socket() as hole:  # listens and never accepts: connections complete, requests go unanswered
        hole.bind(("127.0.0.1", 0))
        hole.listen(512)
        join = srv.admin("POST", "/v1/join-tokens", json={})["token"]
        gpu = {"index": 0, "model": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}
        body = {"host": "silent01", "agent_url": f"http://127.0.0.1:{hole.getsockname()[1]}", "gpus": [gpu],
                "cpu_millicores": 64_000, "memory_mib": 512_000}  # fmt: skip
        url, headers = f"{srv.base}/v1/agents/register", {"Authorization": f"Bearer {join}"}
        # A new token from an address that just failed many times waits for the address's bucket, as an agent
        # would (its backoff): poll until it is let in.
        r = until(lambda: (got := httpx.post(url, json=body, headers=headers)).status_code != 429 and got, 60, "let in")
        assert r.status_code == 200, r.text
        node = {"Authorization": f"Bearer {r.json()['node_token']}"}
        auth = {"Authorization": f"Bearer {token}"}
        job = httpx.post(f"{srv.base}/v1/jobs", json={"command": ["true"]}, headers=auth).json()["job"]["id"]
        until(lambda: srv.admin("GET", f"/v1/jobs/{job}")["state"] == "placed", 30, "the job placed on it")
        answers: list[tuple[int, float]] = []
        # One client for all: a client each costs the test process more than the server's answer.
        shared = httpx.Client(base_url=srv.base, timeout=30, limits=httpx.Limits(max_connections=n))

        def fetch_logs() -> None:
            start = time.monotonic()
            code = shared.get(f"/v1/jobs/{job}/logs", headers=auth).status_code
            answers.append((code, time.monotonic() - start))

        threads = [threading.Thread(target=fetch_logs) for _ in range(n)]
        for t in threads:
            t.start()
        api, beats = timed_requests(srv.base, token, 20), []
        for _ in range(10):
            start = time.monotonic()
            beat = {"seq": 1, "at_s": time.time(), "workloads": []}
            r = httpx.post(f"{srv.base}/v1/agents/silent01/heartbeat", json=beat, headers=node, timeout=10)
            beats.append(time.monotonic() - start if r.status_code == 200 else float("inf"))
        for t in threads:
            t.join(30)
        shared.close()
    return SilentRun(answers, api, beats)
