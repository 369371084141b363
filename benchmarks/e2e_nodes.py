"""The client side of ``e2e_throughput.py``: emulated nodes and the job submitter, one asyncio loop per process.

``nodes``: registers its hosts through ``/v1/agents/register`` (a join token), then each node speaks the agent
protocol v1 as ``agent/daemon.py`` does, without a process per node or per workload: a commands long-poll
kept open (``/v1/agents/{host}/commands``); each launch it is told "runs" at once (a report of ``running``
sent, its answer noted as the launch acknowledged) and ends ``E2E_DURATION_S`` later (a report of
``exited 0``, repeated on heartbeats until one acknowledges it); a stop ends it with -15; a heartbeat every
``heartbeat_interval_s`` (as the latest registration or beat reply told it, as the agent adopts it) with 8
GPU samples, what it runs and the commands it holds from its poll (``held``, as the agent sends it: the reply
then brings only what is new). Prints ``ready`` once every host is registered,
runs until its stdin closes (or ``--max-s``), then writes one JSON line per launched rank to ``--out``.

``submit``: an open-loop stream of job arrays (the bulk submit: one ``POST /v1/jobs`` with ``array`` per shape
per tick), ``--rate`` jobs per second for ``--seconds``; writes each array's id, send time and size.

HTTP/1.1 keep-alive over raw asyncio streams with JSON built by hand: httpx costs about as much CPU per
request as the server spends (``agent_overhead.py``), and on the same small machine the clients would
otherwise be measured instead of the server. Only 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import uvloop

Shape = tuple[int, int, float]  # tasks, GPUs per task, weight in the mix
SHAPES: tuple[Shape, ...] = ((1, 1, 0.70), (1, 8, 0.20), (2, 8, 0.07), (4, 8, 0.03))
AGENT_TIMEOUT_S = 5.0  # the agent's HTTP timeout for beats and reports (agent/reporter.py)


class Conn:
    """One keep-alive HTTP/1.1 connection to the server; reopened when the server has closed it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.rw: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def call(self, path: str, token: str, body: bytes, extra: str = "") -> tuple[int, bytes]:
        for attempt in range(2):
            if self.rw is not None and self.rw[1].is_closing():
                self.close()  # the server closed it while idle (its keep-alive timeout): a new one
            fresh = self.rw is None
            if self.rw is None:
                self.rw = await asyncio.open_connection("127.0.0.1", self.port)
            reader, writer = self.rw
            head = (
                f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n{extra}"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            try:
                writer.write(head.encode() + body)
                raw = await reader.readuntil(b"\r\n\r\n")
                lower = raw.lower()
                at = lower.find(b"content-length:")
                length = int(lower[at + 15 : lower.index(b"\r\n", at)]) if at >= 0 else 0
                data = await reader.readexactly(length)
            except (ConnectionError, asyncio.IncompleteReadError, RuntimeError):
                self.close()  # RuntimeError: uvloop's write on a transport closed under it
                if fresh or attempt:  # a request on a connection the server had closed while idle: once more
                    raise
                continue
            if b"connection: close" in lower:
                self.close()
            return int(raw[9:12]), data
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.rw is not None:
            self.rw[1].close()
            self.rw = None


class Pool:
    """Keep-alive connections shared by requests; a request unanswered within ``timeout_s`` (the agent's HTTP
    timeout, 5 s) raises ``TimeoutError`` and its connection is dropped, as httpx drops it."""

    def __init__(self, port: int, size: int, timeout_s: float | None = None) -> None:
        self._free: asyncio.Queue[Conn] = asyncio.Queue()
        self._timeout_s = timeout_s
        for _ in range(size):
            self._free.put_nowait(Conn(port))

    async def call(
        self, path: str, token: str, body: bytes, extra: str = "", *, limited: bool = True
    ) -> tuple[int, bytes]:
        """``limited`` False: no timeout (a registration, which the setup waits for: one whose answer was cut off
        would find its name taken until the node is lost)."""
        conn = await self._free.get()
        try:
            return await asyncio.wait_for(conn.call(path, token, body, extra), self._timeout_s if limited else None)
        except TimeoutError:
            conn.close()
            raise
        finally:
            self._free.put_nowait(conn)


@dataclass
class Stats:
    polls: int = 0
    beats: int = 0
    reports: int = 0
    errors: int = 0
    timeouts: int = 0  # beats and reports unanswered within the agent's HTTP timeout (also in errors)
    launched: int = 0
    acked: int = 0
    launches: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Node:
    host: str
    token: str = ""
    running: dict[str, dict[str, Any]] = field(default_factory=dict)  # assignment id -> workload status
    ended: dict[str, dict[str, Any]] = field(default_factory=dict)  # ends not yet acknowledged by a beat
    seen: set[str] = field(default_factory=set)  # every assignment ever launched here: never twice
    held: list[str] = field(default_factory=list)
    outbox: list[dict[str, Any]] = field(default_factory=list)
    seen_server_s: float | None = None
    interval_s: float = 5.0  # as the server last told it

    def listed(self) -> list[dict[str, Any]]:
        return [*self.running.values(), *self.ended.values()]


class Fleet:
    """The nodes of one process, their long-polls, beats and reports."""

    def __init__(self, port: int, hosts: list[str], pool: int, rng: np.random.Generator) -> None:
        self.port, self.rng = port, rng
        self.nodes = [Node(h) for h in hosts]
        # As many connections as nodes: each agent beats and reports on its own keep-alive connection, so a
        # report waits for the server, never for another node's request (a smaller pool queues them here).
        self.pool = Pool(port, pool or len(hosts), timeout_s=AGENT_TIMEOUT_S)
        self.stats = Stats()
        self.stop = asyncio.Event()
        self.by_aid: dict[str, dict[str, Any]] = {}  # launch records, filled in as reports are answered
        gpus = [{"index": i, "health": "ok", "utilization_pct": 90.0, "temperature_c": 60.0} for i in range(8)]
        self.gpus = json.dumps(gpus)

    async def register(self, join: str, parallel: int = 8) -> list[asyncio.Future[None]]:
        """Register every node; each starts its commands poll and its beats as soon as it is registered (the
        server counts a node's silence from its registration). The nodes' tasks."""
        gate = asyncio.Semaphore(parallel)
        tasks: list[asyncio.Future[None]] = []
        gpus = [{"index": i, "model": "H100", "memory_mib": 81559} for i in range(8)]

        async def one(node: Node) -> None:
            body = json.dumps({"host": node.host, "gpus": gpus, "agent_version": "e2e-bench"}).encode()
            for attempt in range(10):  # as the agent does: a refused registration (a 503) is tried again
                async with gate:
                    status, data = await self.pool.call("/v1/agents/register", join, body, limited=False)
                if status == 200:
                    break
                print(f"register {node.host}: {status} {data[:200]!r}", file=sys.stderr)
                await asyncio.sleep(2.0 * (attempt + 1))
            else:
                raise RuntimeError(f"register {node.host}: {status} {data[:200]!r}")
            reply = json.loads(data)
            node.token = reply["node_token"]
            node.interval_s = float(reply["heartbeat_interval_s"])
            tasks.extend((asyncio.ensure_future(self.poll(node)), asyncio.ensure_future(self.beats(node))))

        await asyncio.gather(*(one(n) for n in self.nodes))
        return tasks

    # -- commands ------------------------------------------------------------------------------------------
    async def poll(self, node: Node) -> None:
        conn = Conn(self.port)
        path = f"/v1/agents/{node.host}/commands"
        try:
            while not self.stop.is_set():
                body = json.dumps({"workloads": node.listed(), "held": node.held, "executed": []}).encode()
                try:
                    status, data = await conn.call(path, node.token, body)
                except (ConnectionError, asyncio.IncompleteReadError):
                    status, data = 0, b""
                self.stats.polls += 1
                if status != 200:
                    self.stats.errors += 1
                    await asyncio.sleep(0.5)  # as the agent backs off: a refused poll is not retried in a loop
                    continue
                reply = json.loads(data)
                node.held = [f"{c['kind']}:{c['assignment_id']}" for c in reply["commands"] if c["kind"] != "signal"]
                for c in reply["commands"]:
                    self.execute(node, c)
                node.seen_server_s = float(reply["server_time_s"])
        finally:
            conn.close()  # the server ends a poll whose agent hung up

    def execute(self, node: Node, c: dict[str, Any]) -> None:
        aid = c["assignment_id"]
        if c["kind"] == "launch" and aid not in node.seen:
            node.seen.add(aid)
            now = time.time()
            env = c["env"]
            self.by_aid[aid] = {
                "job": c["job_id"],
                "array": env.get("GPUPOOL_ARRAY_ID", ""),
                "ranks": int(env.get("WORLD_SIZE", "1")),
                "received": now,
            }
            self.stats.launched += 1
            status = {"assignment_id": aid, "job_id": c["job_id"], "state": "running", "at_s": now}
            node.running[aid] = status
            self.send(node, status)
            asyncio.get_running_loop().call_later(float(env.get("E2E_DURATION_S", "1")), self.end, node, aid, 0)
        elif c["kind"] == "stop" and aid in node.running:
            self.end(node, aid, -15)

    def end(self, node: Node, aid: str, code: int) -> None:
        status = node.running.pop(aid, None)
        if status is None:
            return
        ended = {**status, "state": "exited", "exit_code": code, "at_s": time.time()}
        node.ended[aid] = ended
        if (rec := self.by_aid.get(aid)) is not None:
            rec["ended"] = ended["at_s"]
        self.send(node, ended)

    # -- reports -------------------------------------------------------------------------------------------
    def send(self, node: Node, status: dict[str, Any]) -> None:
        """Queue a report; what one node queues in the same loop pass goes in one request, as the agent's tick."""
        node.outbox.append(status)
        if len(node.outbox) == 1:
            asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(self.flush(node)))

    async def flush(self, node: Node) -> None:
        batch, node.outbox = node.outbox, []
        body = json.dumps({"workloads": batch}).encode()
        try:
            status, _ = await self.pool.call(f"/v1/agents/{node.host}/reports", node.token, body)
        except (ConnectionError, asyncio.IncompleteReadError):
            status = 0
        except TimeoutError:
            status = 0
            self.stats.timeouts += 1
        self.stats.reports += 1
        if status != 204:
            self.stats.errors += 1  # the next beat carries the states (it lists what runs and what ended)
            return
        now = time.time()
        for w in batch:
            rec = self.by_aid.get(w["assignment_id"])
            if w["state"] == "running" and rec is not None and "acked" not in rec:
                rec["acked"] = now
                self.stats.acked += 1
            elif w["state"] == "exited" and rec is not None:
                rec.setdefault("end_acked", now)

    # -- heartbeats ----------------------------------------------------------------------------------------
    async def beats(self, node: Node) -> None:
        await asyncio.sleep(float(self.rng.uniform(0, node.interval_s)))  # spread the fleet's beats over the interval
        seq = 0
        while not self.stop.is_set():
            started = time.monotonic()
            sent = list(node.ended)
            workloads = json.dumps(node.listed())
            seen = "null" if node.seen_server_s is None else repr(node.seen_server_s)
            body = (
                f'{{"seq":{seq},"at_s":{time.time()!r},"gpus":{self.gpus},"workloads":{workloads},'
                f'"executed":[],"seen_server_s":{seen},"held":{json.dumps(node.held)}}}'
            ).encode()
            try:
                status, data = await self.pool.call(f"/v1/agents/{node.host}/heartbeat", node.token, body)
            except (ConnectionError, asyncio.IncompleteReadError):
                status, data = 0, b""
            except TimeoutError:
                status, data = 0, b""
                self.stats.timeouts += 1
            self.stats.beats += 1
            seq += 1
            if status == 200:
                reply = json.loads(data)
                for aid in set(sent) & set(reply.get("acked") or ()):
                    node.ended.pop(aid, None)
                for c in reply["commands"]:
                    self.execute(node, c)
                if reply["heartbeat_interval_s"] > 0:
                    node.interval_s = float(reply["heartbeat_interval_s"])
            else:
                self.stats.errors += 1
            left = node.interval_s - (time.monotonic() - started)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), max(0.0, left))


async def run_nodes(args: argparse.Namespace) -> None:
    hosts = [line for line in Path(args.hosts).read_text().split() if line]
    fleet = Fleet(args.port, hosts, args.pool, np.random.default_rng(len(hosts)))
    tasks = await fleet.register(args.join)
    print("ready", flush=True)
    progress = Path(args.out + ".progress")
    loop = asyncio.get_running_loop()
    closed = loop.run_in_executor(None, sys.stdin.read)  # the orchestrator closes our stdin: stop
    deadline = time.monotonic() + args.max_s
    while not closed.done() and time.monotonic() < deadline:
        progress.write_text(f"{fleet.stats.acked}\n")
        await asyncio.wait([closed], timeout=0.5)
    fleet.stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    with Path(args.out).open("w") as f:
        for aid, rec in fleet.by_aid.items():
            f.write(json.dumps({"aid": aid, **rec}) + "\n")
    s = fleet.stats
    summary = {"polls": s.polls, "beats": s.beats, "reports": s.reports, "errors": s.errors, "launched": s.launched}
    summary["timeouts"] = s.timeouts
    print(json.dumps({**summary, "acked": s.acked, "cpu_s": round(time.process_time(), 2)}), flush=True)


async def run_submit(args: argparse.Namespace) -> None:
    """Every ``--tick-s``, one array per shape holding the jobs that shape is owed at ``--rate``; each request
    is sent at its due time whatever the answers before it (open loop)."""
    pool = Pool(args.port, 8)
    rng = np.random.default_rng(args.seed)
    owed = [0.0] * len(SHAPES)
    arrays: list[dict[str, Any]] = []
    errors = 0
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.05

    async def send(i: int, due: float, shape: Shape, n: int) -> None:
        nonlocal errors
        await asyncio.sleep(max(0.0, due - loop.time()))
        tasks, gpus, _ = shape
        duration = float(rng.uniform(args.min_duration_s, args.max_duration_s))
        body = {
            "command": ["true"],
            "name": f"e2e-{i}",
            "tasks": tasks,
            "gpus_per_task": gpus,
            "array": f"0-{n - 1}",
            "env": {"E2E_DURATION_S": f"{duration:.3f}"},
        }
        sent = time.time()
        status, data = await pool.call(
            "/v1/jobs", args.token, json.dumps(body).encode(), f"Idempotency-Key: e2e-{i}\r\n"
        )
        if status != 201:
            errors += 1
            if errors <= 3:
                print(f"submit {i}: {status} {data[:200]!r}", file=sys.stderr)
            return
        out = json.loads(data)
        arrays.append({"array": out["array_id"], "sent": sent, "answered": time.time(), "jobs": n, "ranks": tasks})

    pending: list[asyncio.Future[None]] = []
    for t in range(int(args.seconds / args.tick_s)):
        for k, shape in enumerate(SHAPES):
            owed[k] += args.rate * shape[2] * args.tick_s
            n = int(owed[k])
            if n:
                owed[k] -= n
                pending.append(asyncio.ensure_future(send(len(pending), start + t * args.tick_s, shape, n)))
    await asyncio.gather(*pending)
    with Path(args.out).open("w") as f:
        for a in arrays:
            f.write(json.dumps(a) + "\n")
    print(json.dumps({"arrays": len(arrays), "errors": errors, "cpu_s": round(time.process_time(), 2)}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="role", required=True)
    nodes = sub.add_parser("nodes")
    nodes.add_argument("--hosts", required=True, help="a file of host names, one a line")
    nodes.add_argument("--join", required=True)
    nodes.add_argument("--pool", type=int, default=0, help="connections for beats and reports (0: one per node)")
    nodes.add_argument("--max-s", type=float, default=900.0)
    submit = sub.add_parser("submit")
    submit.add_argument("--token", required=True)
    submit.add_argument("--rate", type=float, required=True)
    submit.add_argument("--seconds", type=float, required=True)
    submit.add_argument("--tick-s", type=float, default=0.1)
    submit.add_argument("--min-duration-s", type=float, default=0.5)
    submit.add_argument("--max-duration-s", type=float, default=1.5)
    submit.add_argument("--seed", type=int, default=1)
    for p in (nodes, submit):
        p.add_argument("--port", type=int, required=True)
        p.add_argument("--out", required=True)
    args = ap.parse_args()
    # uvloop, as the server runs: the emulated fleet shares the server's machine, and every CPU second it spends
    # on asyncio's pure-Python loop is one the server under test does not get.
    uvloop.run(run_nodes(args) if args.role == "nodes" else run_submit(args))


if __name__ == "__main__":
    main()
