"""The agent loop against a real HTTP server on 127.0.0.1 that speaks protocol v1 minimally (in this file).

Real child processes, a real emulated node read by the real probes, real sockets. Waits poll a condition
with a deadline; the one test about time (backoff) runs on a fake clock whose sleep only advances it.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from pydantic import BaseModel

from gpupool.agent.config import AgentSettings
from gpupool.agent.daemon import Agent
from gpupool.agent.logserver import LogServer
from gpupool.agent.reporter import Backoff, BackoffPolicy, RegistrationRefusedError, ServerClient
from gpupool.agent.sources import emulated_sources
from gpupool.fabric import jsonio
from gpupool.fabric.generators import superpod
from gpupool.schemas import agent as wire
from gpupool.schemas import logsig
from procs import until as poll_until

PY = sys.executable
JOIN = "join-secret"
LOG_KEY = "test-log-key"
HOST = "dgx001"


class ProtocolServer(ThreadingHTTPServer):
    """Just enough of the server side: tokens, recorded requests, queued commands, and a switch to fail."""

    daemon_threads = True

    def __init__(self, interval_s: float = 0.05, *, listen: bool = True) -> None:
        super().__init__(("127.0.0.1", 0), _Handler, bind_and_activate=False)
        self.server_bind()
        self.interval_s = interval_s
        self.lock = threading.Lock()
        self.tokens: dict[str, str] = {}
        self.registrations: list[wire.RegisterRequest] = []
        self.heartbeats: list[wire.HeartbeatRequest] = []
        self.reports: list[wire.WorkloadStatus] = []
        self.queued: list[wire.LaunchCommand | wire.StopCommand | wire.SignalCommand] = []
        self.register_tokens: list[str] = []  # what each registration presented
        self.name_taken = 0  # answer this many registrations 409 (the name is a live node's), as the server does
        self.failing = False
        self._thread: threading.Thread | None = None
        if listen:
            self.open()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def open(self) -> None:
        self.server_activate()  # listen(): until now a connection is refused, as with a server that is down
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self.shutdown()
        self.server_close()

    def queue(self, *cmds: wire.LaunchCommand | wire.StopCommand | wire.SignalCommand) -> None:
        with self.lock:
            self.queued.extend(cmds)

    def forget(self, host: str) -> None:
        with self.lock:
            self.tokens.pop(host, None)

    def states(self, aid: str) -> list[tuple[str, int | None]]:
        with self.lock:
            return [(w.state, w.exit_code) for w in self.reports if w.assignment_id == aid]


class _Handler(BaseHTTPRequestHandler):
    server: ProtocolServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        return

    def _send(self, status: int, body: BaseModel | None = None) -> None:
        data = body.model_dump_json().encode() if body is not None else b"{}"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        token = self.headers.get("Authorization", "").removeprefix("Bearer ")
        srv = self.server
        if srv.failing:
            self._send(503)
            return
        now = time.time()
        if self.path == "/v1/agents/register":
            reg = wire.RegisterRequest.model_validate_json(raw)
            with srv.lock:
                srv.register_tokens.append(token)
                taken, srv.name_taken = srv.name_taken > 0, max(0, srv.name_taken - 1)
            if token != JOIN and token != srv.tokens.get(reg.host):  # the join token, or the node's own token
                self._send(401)
                return
            if taken:
                self._send(409)
                return
            with srv.lock:
                srv.registrations.append(reg)
                srv.tokens[reg.host] = f"node-{len(srv.registrations)}"
                reply = wire.RegisterReply(
                    node_token=srv.tokens[reg.host], heartbeat_interval_s=srv.interval_s, server_time_s=now
                )
            self._send(200, reply)
            return
        m = re.fullmatch(r"/v1/agents/([^/]+)/(heartbeat|reports)", self.path)
        if m is None:
            self._send(404)
            return
        with srv.lock:
            if srv.tokens.get(m.group(1)) != token:
                self._send(401)
                return
            if m.group(2) == "reports":
                srv.reports.extend(wire.ReportRequest.model_validate_json(raw).workloads)
                self._send(200)
                return
            srv.heartbeats.append(wire.HeartbeatRequest.model_validate_json(raw))
            cmds, srv.queued = tuple(srv.queued), []
        self._send(200, wire.HeartbeatReply(commands=cmds, heartbeat_interval_s=srv.interval_s, server_time_s=now))


def until(cond: Callable[[], object], timeout_s: float = 10.0, what: str = "condition") -> None:
    poll_until(cond, timeout_s, what, every_s=0.01)


@pytest.fixture
def server() -> Iterator[ProtocolServer]:
    s = ProtocolServer()
    yield s
    s.close()


@pytest.fixture
def fabric_json(tmp_path: Path) -> Path:
    path = tmp_path / "fabric.json"
    jsonio.save(superpod(1), path)
    return path


@dataclass
class Running:
    agent: Agent
    stop: threading.Event
    thread: threading.Thread
    logs: LogServer

    def halt(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()
        self.logs.close()
        self.agent.client.close()


def make_agent(url: str, state: Path, fabric_json: Path, **kw: object) -> tuple[Agent, LogServer]:
    settings = AgentSettings(server_url=url, join_token=JOIN, host=HOST, state_dir=state, poll_s=0.02, **kw)  # type: ignore[arg-type]
    logs = LogServer(state / "workloads").start()
    logs.set_key(LOG_KEY)  # the protocol test server gives no key: the tests sign with this one
    sources = emulated_sources(fabric_json, HOST, state / "node")
    return Agent(settings, sources, ServerClient(url), log_url=logs.url, log=lambda _m: None), logs


@pytest.fixture
def start(tmp_path: Path, fabric_json: Path) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def _start(url: str, state: Path | None = None, **kw: object) -> Running:
        state = state or tmp_path / "agent"
        state.mkdir(parents=True, exist_ok=True)
        (state / "workloads").mkdir(exist_ok=True)
        agent, logs = make_agent(url, state, fabric_json, **kw)
        stop = threading.Event()
        t = threading.Thread(target=agent.run, args=(stop,), daemon=True)
        t.start()
        r = Running(agent, stop, t, logs)
        started.append(r)
        return r

    yield _start
    for r in started:
        if r.thread.is_alive():
            r.halt()
        for aid, st in r.agent.runtime.poll().items():
            if st.state.value == "running":
                r.agent.runtime.stop(aid, 0.0)


def launch(
    aid: str, code: str, *, gpus: tuple[int, ...] = (0, 1), env: dict[str, str] | None = None
) -> wire.LaunchCommand:
    return wire.LaunchCommand(assignment_id=aid, job_id=f"job-{aid}", argv=(PY, "-c", code), env=env or {}, gpus=gpus)


TERM_HANDLER = (
    "import signal, sys, time\n"
    "def bye(*_):\n"
    "    print('got SIGTERM', flush=True); sys.exit(3)\n"
    "def ckpt(*_):\n"
    "    print('checkpoint', flush=True)\n"
    "signal.signal(signal.SIGTERM, bye)\n"
    "signal.signal(signal.SIGUSR1, ckpt)\n"
    "print('ready', flush=True)\n"
    "while True: time.sleep(0.01)\n"
)
IGNORE_TERM = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "while True: time.sleep(0.01)\n"
)


def log_text(r: Running, aid: str, query: str = "") -> str:
    target = f"/logs/{aid}{query}"
    return httpx.get(
        r.logs.url + target, headers={logsig.HEADER: logsig.sign(LOG_KEY, "GET", target, time.time())}
    ).text


def test_registers_the_emulated_inventory_and_beats_with_telemetry(
    server: ProtocolServer, start: Callable[..., Running]
) -> None:
    r = start(server.url)
    until(lambda: len(server.heartbeats) >= 3)
    reg = server.registrations[0]
    fabric = superpod(1)
    host = fabric.host(HOST)
    assert reg.host == HOST and reg.agent_url == r.logs.url and reg.running == ()
    assert [g.model for g in reg.gpus] == [g.model for g in host.gpus] and len(reg.gpus) == 8
    assert len({g.uuid for g in reg.gpus}) == 8 and reg.gpus[0].pci_bus_id == "00000000:18:00.0"
    assert [h.guid for h in reg.hcas] == list(host.hcas)
    assert [h.name for h in reg.hcas] == [fabric.hcas[fabric.hca_index(g)].name for g in host.hcas]
    assert {(h.state, h.rate_gbps, h.link_layer) for h in reg.hcas} == {("ACTIVE", 400.0, "InfiniBand")}
    assert reg.cpu_millicores == host.cpu_millicores and reg.memory_mib == host.memory_mib
    beats = server.heartbeats
    assert [b.seq for b in beats[:3]] == [0, 1, 2]
    last = beats[-1]
    assert len(last.gpus) == 8 and {g.health for g in last.gpus} == {"ok"}
    assert {g.utilization_pct for g in last.gpus} == {0.0}
    assert len(last.ports) == 8 and {p.state for p in last.ports} == {"up"}
    assert last.ports[0].xmit_gbps == 0.0  # rates exist from the second sample on, and nothing runs


def test_a_refused_join_token_stops_the_agent(server: ProtocolServer, tmp_path: Path, fabric_json: Path) -> None:
    agent, logs = make_agent(server.url, tmp_path / "a", fabric_json)
    agent.settings = AgentSettings(server.url, "wrong", HOST, tmp_path / "a")
    try:
        with pytest.raises(RegistrationRefusedError, match="token refused"):
            agent.run(threading.Event())
    finally:
        logs.close()


def test_launches_once_with_env_reports_and_stops_with_sigterm(
    server: ProtocolServer, start: Callable[..., Running], tmp_path: Path
) -> None:
    out = tmp_path / "env.json"
    code = f"import json, os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))\n" + TERM_HANDLER
    env = {"RANK": "1", "WORLD_SIZE": "2", "NCCL_IB_HCA": "mlx5_2,mlx5_3", "CUDA_VISIBLE_DEVICES": "2,3"}
    cmd = launch("a1", code, gpus=(2, 3), env=env)
    server.queue(cmd)
    r = start(server.url)
    until(lambda: ("running", None) in server.states("a1"))
    until(lambda: "ready" in log_text(r, "a1"))
    server.queue(cmd, cmd)  # the server repeating itself must not start a second copy
    child_env = json.loads(out.read_text())
    # The agent names the GPUs by UUID (the server's indices could be renumbered), in PCI bus order.
    uuids = [server.registrations[0].gpus[i].uuid for i in (2, 3)]
    assert {k: child_env[k] for k in env} == {**env, "CUDA_VISIBLE_DEVICES": ",".join(uuids)}
    assert child_env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and all(u.startswith("GPU-") for u in uuids)
    assert child_env["GPUPOOL_ASSIGNMENT_ID"] == "a1" and child_env["PATH"] == os.environ["PATH"]
    # The emulated node shows the workload on its GPUs: the next beats carry the load.
    until(lambda: [g.utilization_pct for g in server.heartbeats[-1].gpus][2:4] == [95.0, 95.0])
    assert server.heartbeats[-1].gpus[0].utilization_pct == 0.0
    running = [w for w in server.heartbeats[-1].workloads if w.assignment_id == "a1"]
    assert running and running[0].state == "running" and running[0].job_id == "job-a1"
    server.queue(wire.StopCommand(assignment_id="a1", grace_s=5.0, reason="cancelled"))
    until(lambda: ("exited", 3) in server.states("a1"))
    assert r.agent.stats.launches == 1
    assert "got SIGTERM" in log_text(r, "a1", "?stream=stdout&tail=1")
    until(lambda: server.heartbeats[-1].gpus[2].utilization_pct == 0.0)  # released when it ended


def test_stop_escalates_to_sigkill_after_the_grace_while_beats_go_on(
    server: ProtocolServer, start: Callable[..., Running]
) -> None:
    server.queue(launch("stubborn", IGNORE_TERM))
    r = start(server.url)
    until(lambda: "ready" in log_text(r, "stubborn"))
    server.queue(wire.StopCommand(assignment_id="stubborn", grace_s=0.5))
    until(lambda: r.agent._kill_at)
    beats_at_term = len(server.heartbeats)
    t0 = time.monotonic()
    until(lambda: ("exited", -9) in server.states("stubborn"))
    assert time.monotonic() - t0 >= 0.4  # SIGKILL waited for the grace period
    assert len(server.heartbeats) > beats_at_term  # and the agent kept beating meanwhile


def test_checkpoint_signal_reaches_the_workload(server: ProtocolServer, start: Callable[..., Running]) -> None:
    server.queue(launch("ck", TERM_HANDLER))
    r = start(server.url)
    until(lambda: "ready" in log_text(r, "ck"))
    server.queue(wire.SignalCommand(assignment_id="ck"))
    until(lambda: log_text(r, "ck", "?tail=1") == "checkpoint\n")
    assert server.states("ck") == [("running", None)]


def test_a_stored_signal_is_carried_out_once_however_often_it_comes_even_across_a_restart(
    server: ProtocolServer, start: Callable[..., Running], tmp_path: Path
) -> None:
    """A server repeats a stored signal until the agent lists its id as executed; replicas may repeat it after
    that too. The workload gets SIGUSR1 once per id, and a restarted agent (same state dir) remembers it."""
    state = tmp_path / "agent"
    server.queue(launch("ck", TERM_HANDLER))
    r = start(server.url, state)
    until(lambda: "ready" in log_text(r, "ck"))
    sig = wire.SignalCommand(assignment_id="ck", command_id="7")

    def delivered_and_reported() -> bool:
        with server.lock:
            return not server.queued and any(b.executed == ("7",) for b in server.heartbeats)

    for _ in range(3):
        server.queue(sig)
        until(delivered_and_reported)
    until(lambda: "checkpoint" in log_text(r, "ck"))
    r.halt()  # the workload keeps running: the next agent reattaches to it
    with server.lock:
        server.heartbeats.clear()
    again = start(server.url, state)
    server.queue(sig)
    until(delivered_and_reported)
    assert log_text(again, "ck").count("checkpoint") == 1
    # An unknown rank's signal is settled too: nothing to signal there, so it is reported executed.
    server.queue(wire.SignalCommand(assignment_id="elsewhere", command_id="8"))
    until(lambda: any(b.executed and "8" in b.executed for b in server.heartbeats))


def test_launch_of_a_missing_program_is_reported_exited_127(
    server: ProtocolServer, start: Callable[..., Running]
) -> None:
    server.queue(wire.LaunchCommand(assignment_id="nope", job_id="j", argv=("/no/such/program",)))
    start(server.url)
    until(lambda: ("exited", 127) in server.states("nope"))
    with server.lock:
        assert [w.reason for w in server.reports if w.assignment_id == "nope"] == [
            "cannot start '/no/such/program': No such file or directory"
        ]


@pytest.mark.parametrize(
    ("argv", "env", "why"),
    [
        ((PY, "-c", "pass\x00"), {}, "command[2]: contains a NUL byte"),
        ((PY,), {"A=B": "1"}, "env: 'A=B' is not a variable name"),
        ((PY,), {"A": "\x00"}, "env.A: contains a NUL byte"),
        (("",), {}, "command[0]: the program name is empty"),
    ],
)
def test_a_command_popen_would_refuse_fails_its_job_and_the_agent_stays_up(
    server: ProtocolServer, start: Callable[..., Running], argv: tuple[str, ...], env: dict[str, str], why: str
) -> None:
    """Defence in depth: the API refuses these at the door; an agent handed one anyway (an older server, a
    forged reply) reports the job failed with the reason, keeps beating and runs the next job."""
    server.queue(wire.LaunchCommand(assignment_id="bad", job_id="j", argv=argv, env=env))
    r = start(server.url)
    until(lambda: ("exited", 127) in server.states("bad"))
    with server.lock:
        reasons = [w.reason for w in server.reports if w.assignment_id == "bad"]
    assert len(reasons) == 1 and reasons[0].startswith(why), reasons
    server.queue(launch("next", "print('fine')"))
    until(lambda: ("exited", 0) in server.states("next"))
    assert r.thread.is_alive()


def test_reregisters_when_the_server_forgets_the_node_and_lists_what_runs(
    server: ProtocolServer, start: Callable[..., Running]
) -> None:
    server.queue(launch("keep", TERM_HANDLER))
    r = start(server.url)
    until(lambda: ("running", None) in server.states("keep"))
    server.forget(HOST)
    until(lambda: len(server.registrations) == 2)
    assert server.registrations[1].running == ("keep",)
    n = len(server.heartbeats)
    until(lambda: len(server.heartbeats) > n)
    assert r.agent.stats.registrations == 2 and r.agent.stats.launches == 1


def test_a_restarted_agent_registers_with_the_node_token_it_kept(
    server: ProtocolServer, start: Callable[..., Running], tmp_path: Path
) -> None:
    first = start(server.url)
    until(lambda: len(server.heartbeats) > 0)
    first.halt()
    kept = tmp_path / "agent" / "node-token"
    assert kept.read_text() == server.tokens[HOST] == "node-1"
    assert kept.stat().st_mode & 0o777 == 0o600
    start(server.url, tmp_path / "agent")
    until(lambda: len(server.registrations) == 2)
    assert server.register_tokens == [JOIN, "node-1"]
    until(lambda: kept.read_text() == "node-2")


def test_a_refused_kept_token_falls_back_to_the_join_token(
    server: ProtocolServer, start: Callable[..., Running], tmp_path: Path
) -> None:
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "node-token").write_text("gpn_replaced_long_ago")
    r = start(server.url)
    until(lambda: len(server.heartbeats) > 0)
    assert server.register_tokens == ["gpn_replaced_long_ago", JOIN]
    assert (tmp_path / "agent" / "node-token").read_text() == "node-1" and r.thread.is_alive()


def test_a_name_taken_for_now_is_retried_with_backoff(server: ProtocolServer, start: Callable[..., Running]) -> None:
    server.name_taken = 2
    r = start(server.url, backoff=BackoffPolicy(base_s=0.05, cap_s=0.1))
    until(lambda: len(server.heartbeats) > 0)
    assert server.register_tokens == [JOIN, JOIN, JOIN] and r.thread.is_alive()
    assert r.agent.stats.server_failures == 2


def test_a_restarted_agent_reattaches_and_never_launches_twice(
    server: ProtocolServer, start: Callable[..., Running], tmp_path: Path
) -> None:
    cmd = launch("long", TERM_HANDLER)
    server.queue(cmd)
    first = start(server.url)
    until(lambda: "ready" in log_text(first, "long"))
    pid = first.agent.runtime.handle("long").pid  # type: ignore[union-attr]
    first.halt()  # the agent stops; its workload does not
    assert os.path.exists(f"/proc/{pid}")
    server.queue(cmd)  # the server, not yet told, repeats the launch
    second = start(server.url, tmp_path / "agent")
    until(lambda: len(server.registrations) == 2)
    assert server.registrations[1].running == ("long",)
    until(lambda: len(server.heartbeats) > 3 and server.queued == [])
    assert second.agent.stats.launches == 0
    assert second.agent.runtime.handle("long").pid == pid  # type: ignore[union-attr]
    # GPUs of the reattached workload show busy again on the fresh emulated node.
    until(lambda: server.heartbeats[-1].gpus[0].utilization_pct == 95.0)
    server.queue(wire.StopCommand(assignment_id="long", grace_s=2.0))
    until(lambda: any(s in ("exited", "lost") for s, _ in server.states("long")))


def test_backs_off_with_seeded_jitter_while_the_server_is_down(tmp_path: Path, fabric_json: Path) -> None:
    server = ProtocolServer(listen=False)  # bound, not listening: every connection is refused
    policy = BackoffPolicy(base_s=0.5, factor=2.0, cap_s=8.0, jitter=0.5)
    now = [0.0]
    stop = threading.Event()
    agent, logs = make_agent(server.url, tmp_path / "a", fabric_json, backoff=policy, seed=7)
    agent.clock = lambda: now[0]

    def fake_sleep(dt: float) -> None:
        now[0] += dt
        if now[0] >= 60.0 and server._thread is None:
            server.open()  # the server comes back after a minute
        if agent.stats.heartbeats >= 2:
            stop.set()

    try:
        t0 = time.monotonic()
        agent.run(stop, sleep=fake_sleep)
        assert time.monotonic() - t0 < 10  # a minute of outage on the fake clock, not in real time
    finally:
        logs.close()
        server.close()
    expected = Backoff(policy, seed=7)
    delays = agent.stats.retry_delays
    assert delays == [expected.next_delay() for _ in delays]
    assert all(d <= 8.0 for d in delays) and max(delays) > 4.0  # it grew to the cap's band, never past it
    assert 60.0 <= sum(delays) < 60.0 + 8.0  # it kept trying and came back within one capped delay
    assert agent.stats.registrations == 1 and agent.stats.heartbeats >= 2


def test_a_server_error_is_retried_like_an_outage(server: ProtocolServer, start: Callable[..., Running]) -> None:
    server.failing = True
    r = start(server.url, backoff=BackoffPolicy(base_s=0.05, cap_s=0.1))
    until(lambda: r.agent.stats.server_failures >= 2)
    server.failing = False
    until(lambda: len(server.heartbeats) >= 1)
    assert r.agent.stats.registrations == 1
