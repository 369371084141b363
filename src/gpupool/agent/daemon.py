"""The agent process's loop: register, then sample -> grade -> heartbeat -> run the server's commands.

Commands come two ways and are carried out alike: in heartbeat replies, and, when the server offers it
(``command_wait_s`` in its registration reply), from the commands long-poll a ``CommandPoller`` thread keeps
open, which the server answers as soon as a placement, stop or checkpoint signal is committed. The agent's
state has one lock; the loop holds it except around its HTTP calls and naps, so a pushed launch is carried
out at once even while a heartbeat waits for its reply. After any break (the server restarted, the poll cut)
the next poll lists what runs here and holds nothing, so the server answers at once with everything this
node should be doing.

One ``Agent`` per node. It owns the probes (``NodeSources``), a ``WorkloadRuntime`` and a ``ServerClient``,
all handed in so tests can point it at a protocol server on 127.0.0.1 and give it their own clock and
sleep. The loop never blocks for long: a stop sends SIGTERM and the SIGKILL waits for a deadline the loop
checks each tick, so heartbeats keep flowing during a long grace period. When the server is away the loop
keeps watching its children and retries with capped, jittered backoff; when the server answers that it
does not know the node (401/404), the agent registers again and lists what it still runs, so the server
can keep, or stop, each of those assignments; an assignment id is launched at most once, ever.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, ParamSpec, TypeVar

from gpupool import __version__
from gpupool.agent.config import AgentSettings, AgentStats, memory_mib
from gpupool.agent.containers import containerize
from gpupool.agent.health import NodeHealth, assess_node
from gpupool.agent.ib import PortRates
from gpupool.agent.isolation import default_work_root, launch_files
from gpupool.agent.launching import start_failure
from gpupool.agent.nodetoken import KeptToken
from gpupool.agent.push import CommandPoller, PollOutcome, PollRequest
from gpupool.agent.reporter import (
    Backoff,
    NodeUnknownError,
    ProtocolError,
    RegistrationRefusedError,
    ServerClient,
    ServerUnavailableError,
)
from gpupool.agent.runtime import WorkloadRuntime, WorkloadState
from gpupool.agent.sources import NodeSources
from gpupool.agent.xid_log import XidEvent
from gpupool.domain.errors import GpupoolError, InputError
from gpupool.domain.events import HealthGrade, LinkState
from gpupool.domain.workload import check_command
from gpupool.fabric.parsers.sysfs import read_sysfs_infiniband
from gpupool.schemas import agent as wire

_P = ParamSpec("_P")
_T = TypeVar("_T")
ASSIGNMENT_FILE = "assignment.json"  # job id and GPUs of an assignment, beside the runtime's launch.json
DELIVERED_FILE = "delivered"  # marks a finished assignment whose end the server has acknowledged
SIGNALLED_PREFIX = "signalled-"  # + a stored command's id: that checkpoint signal was sent to the assignment
_XID_MEMORY = 1024  # XIDs kept for grading: they are rare, and a GPU with a thousand needs no more evidence
_GRADES: dict[HealthGrade, Literal["ok", "degraded", "bad"]] = {
    HealthGrade.OK: "ok",
    HealthGrade.DEGRADED: "degraded",
    HealthGrade.BAD: "bad",
}
_LINKS: dict[LinkState, Literal["up", "degraded", "down"]] = {
    LinkState.UP: "up",
    LinkState.DEGRADED: "degraded",
    LinkState.DOWN: "down",
}
_STATES: dict[WorkloadState, wire.WorkloadState] = {
    WorkloadState.STARTING: "starting",
    WorkloadState.RUNNING: "running",
    WorkloadState.EXITED: "exited",
    WorkloadState.LOST: "lost",
}


@dataclass(frozen=True, slots=True)
class _Meta:
    job_id: str
    gpus: tuple[int, ...]
    launch_error: str = ""
    program: str = "python"  # argv[0]'s name, for the emulated node's process list (not kept on disk)


def _launch_failure(argv: Sequence[str], e: Exception) -> str:
    """Why a command did not start, for the job's reason (a launcher's own refusal comes from the runtime)."""
    if isinstance(e, OSError):
        return start_failure(argv, str(e.strerror or e))
    if isinstance(e, GpupoolError):
        return str(e)[:500]
    return start_failure(argv, f"{type(e).__name__}: {str(e)[:300]}")


def _stderr(msg: str) -> None:
    print(f"gpupool-agent: {msg}", file=sys.stderr, flush=True)


class Agent:
    """One node's agent. ``run(stop)`` until ``stop`` is set; ``step()`` is one pass for tests."""

    def __init__(
        self,
        settings: AgentSettings,
        sources: NodeSources,
        client: ServerClient,
        *,
        log_url: str = "",
        log_key: Callable[[str], None] = lambda _key: None,  # hands each registration's log key to the log server
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        log: Callable[[str], None] = _stderr,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.sources = sources
        self.client = client
        self.log_url = log_url
        self._log_key = log_key
        self.clock = clock
        self.wall = wall
        self.log = log
        env = os.environ if base_env is None else base_env
        self._base_env = {k: env[k] for k in settings.inherit_env if k in env}
        self.runtime = WorkloadRuntime(
            settings.state_dir / "workloads", cgroups=settings.isolation.cgroups, warm_launcher=True
        )
        self.work_root = settings.isolation.work_root or default_work_root(settings.state_dir)
        self.backoff = Backoff(settings.backoff, settings.seed)
        self.stats = AgentStats()
        self.node_token: str | None = None
        self._kept = KeptToken(settings.state_dir)
        self.interval_s = settings.interval_s
        self.seq = 0
        self._next_beat = 0.0
        self._retry_at = 0.0
        self._last_advance = clock()
        self._xids: deque[XidEvent] = deque(maxlen=_XID_MEMORY)
        self._new_xids: list[tuple[XidEvent, float]] = []
        self._meta: dict[str, _Meta] = {}
        self._state: dict[str, str] = {}  # last state this agent has seen (and so reported) per assignment
        self._changed_at: dict[str, float] = {}
        self._undelivered: dict[str, wire.WorkloadStatus] = {}  # finished, not yet acknowledged by a beat
        self._seen_server_s: float | None = None  # the latest server_time_s of a reply whose commands were carried out
        self._kill_at: dict[str, float] = {}  # stopping: SIGKILL at this clock() time if still alive
        # The agent's state (children, reports, token): held by ``run``'s loop except around HTTP calls and
        # naps, and by the command poller's callbacks; every other method is called with it held.
        self._mu = threading.Lock()
        self._closing = False
        self._poller: CommandPoller | None = None  # started once the server offers the long-poll
        self._command_wait_s = 0.0
        self._held: tuple[str, ...] = ()  # command keys of the last poll's answer (see ``wire.CommandsRequest``)
        # Ids of stored commands (signals) carried out, reported as ``executed`` until a reply no longer carries
        # them; the assignment's directory remembers each one (SIGNALLED_PREFIX), so none is done twice.
        self._executed: set[str] = set()
        self._push_retry_at = 0.0
        self._push_backoff = Backoff(settings.backoff, settings.seed + 1)
        self._recover()

    # --- restart: what the state directory remembers ------------------------------------------------------
    def _recover(self) -> None:
        for d in sorted(p for p in self.runtime.state_dir.iterdir() if (p / ASSIGNMENT_FILE).is_file()):
            try:
                raw = json.loads((d / ASSIGNMENT_FILE).read_text(encoding="utf-8"))
                self._meta[d.name] = _Meta(str(raw["job_id"]), tuple(int(g) for g in raw["gpus"]), raw.get("error", ""))
            except (ValueError, KeyError, TypeError) as e:
                self.log(f"ignoring unreadable {d / ASSIGNMENT_FILE}: {e}")
                continue
            if (d / DELIVERED_FILE).exists():
                self._state[d.name] = "delivered"
        for aid, st in self.runtime.poll().items():
            if st.state is WorkloadState.RUNNING:
                self._state[aid] = "running"  # reattached: registration lists it, no report needed
                h = self.runtime.handle(aid)
                meta = self._meta.get(aid)
                if self.sources.emulated is not None and meta is not None and h is not None:
                    self.sources.emulated.place(meta.gpus, pid=h.pid)

    def _write_meta(self, aid: str, meta: _Meta) -> None:
        d = self.runtime.state_dir / aid
        d.mkdir(parents=True, exist_ok=True)
        body = {"job_id": meta.job_id, "gpus": list(meta.gpus), "error": meta.launch_error}
        tmp = d / (ASSIGNMENT_FILE + ".tmp")
        tmp.write_text(json.dumps(body), encoding="utf-8")
        os.replace(tmp, d / ASSIGNMENT_FILE)
        self._meta[aid] = meta

    # --- inventory ---------------------------------------------------------------------------------------------
    def inventory(self) -> wire.RegisterRequest:
        host = self.sources.host
        gpus: list[wire.GpuInfo] = []
        for g in self.sources.gpus.inventory() if self.sources.gpus is not None else ():
            fabric_gpu = host.gpus[g.index] if host is not None and g.index < len(host.gpus) else None
            gpus.append(
                wire.GpuInfo(
                    index=g.index,
                    uuid=g.uuid,
                    model=g.name,
                    memory_mib=g.memory_total_mib,
                    pci_bus_id=g.pci_bus_id,
                    mig_mode=bool(g.mig_mode),
                    nvlink_island=fabric_gpu.nvlink_island if fabric_gpu else 0,
                    numa_node=fabric_gpu.numa_node if fabric_gpu else -1,
                )
            )
        hcas: list[wire.HcaInfo] = []
        if self.sources.ib is not None:
            for d in read_sysfs_infiniband(self.sources.ib.root):
                for p in d.ports:
                    hcas.append(
                        wire.HcaInfo(
                            name=d.name,
                            guid=d.node_guid,
                            port=p.port,
                            state=p.state,
                            rate_gbps=p.rate_gbps,
                            link_layer=p.link_layer,
                        )
                    )
        running = tuple(a for a, s in self.runtime.poll().items() if s.state is WorkloadState.RUNNING)
        return wire.RegisterRequest(
            host=self.settings.host,
            agent_version=__version__,
            agent_url=self.log_url,
            cpu_millicores=host.cpu_millicores if host is not None else (os.cpu_count() or 0) * 1000,
            memory_mib=host.memory_mib if host is not None else memory_mib(),
            gpus=tuple(gpus),
            hcas=tuple(hcas),
            running=running,
            labels=dict(self.settings.labels),
            container_runtime=self.settings.containers.kind.value if self.settings.containers else "",
        )

    def _unlocked(self, call: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """``call`` without the agent lock: an HTTP call or a nap, during which the poller may work."""
        self._mu.release()
        try:
            return call(*args, **kwargs)
        finally:
            self._mu.acquire()

    def register(self) -> None:
        kept = self._kept.read()  # the node's own token from before a restart: it may take a live node's name
        try:
            reply = self._unlocked(self.client.register, kept or self.settings.join_token, self.inventory())
        except RegistrationRefusedError as e:
            if not kept:
                raise
            self.log(f"the kept node token was refused ({e}); registering with the join token")
            reply = self._unlocked(self.client.register, self.settings.join_token, self.inventory())
        self._kept.write(reply.node_token)
        self.node_token = reply.node_token
        self._log_key(reply.log_key)
        if reply.heartbeat_interval_s > 0:
            self.interval_s = reply.heartbeat_interval_s
        self._command_wait_s = reply.command_wait_s
        self._held = ()  # a new registration holds nothing: the first poll gets every current command
        self._push_retry_at = 0.0
        if self._poller is not None:
            self._poller.kick()
        elif reply.command_wait_s > 0:
            self._poller = CommandPoller(self.client, self._next_poll, self._pushed)
        self.stats.registrations += 1
        self.backoff.reset()
        self._next_beat = self.clock()  # tell the server how the node is doing at once
        self.log(f"registered as {self.settings.host}; heartbeat every {self.interval_s:g} s")

    # --- one sample ---------------------------------------------------------------------------------------------
    def sample(self) -> tuple[NodeHealth, tuple[wire.GpuSample, ...], tuple[wire.PortSample, ...]]:
        now = self.clock()
        src = self.sources
        if src.emulated is not None and now > self._last_advance:
            src.emulated.advance(now - self._last_advance)
        self._last_advance = now
        telemetry = src.gpus.telemetry() if src.gpus is not None else ()
        rates: tuple[PortRates, ...] = src.ib.rates(now) if src.ib is not None else ()
        fresh = src.gpus.xid_events() if src.gpus is not None else ()
        at = self.wall()
        self._xids.extend(fresh)
        self._new_xids.extend((x, at) for x in fresh)
        ports = src.ib.latest if src.ib is not None else ()
        health = assess_node(telemetry, self._xids, ports, rates, self.settings.thresholds)
        gpus = tuple(
            wire.GpuSample(
                index=h.index,
                utilization_pct=t.gpu_util_pct,
                memory_used_mib=t.memory_used_mib,
                temperature_c=t.temperature_c,
                power_w=t.power_draw_w,
                ecc_uncorrected=t.ecc_volatile_uncorrected,
                health=_GRADES[h.grade],
                reasons=h.reasons,
            )
            for h, t in zip(health.gpus, telemetry, strict=True)
        )
        by_port = {(r.sample.device, r.sample.port): r for r in rates}
        out_ports = []
        for p in health.ports:
            r = by_port.get((p.device, p.port))
            errs = [v for v in r.errors_per_s.values() if v is not None] if r is not None else []
            xmit = r.xmit_bytes_per_s if r is not None else None
            rcv = r.rcv_bytes_per_s if r is not None else None
            out_ports.append(
                wire.PortSample(
                    hca=p.device,
                    port=p.port,
                    state=_LINKS[p.state],
                    xmit_gbps=None if xmit is None else xmit * 8 / 1e9,
                    rcv_gbps=None if rcv is None else rcv * 8 / 1e9,
                    xmit_wait_per_s=r.xmit_wait_per_s if r is not None else None,
                    errors_per_s=sum(errs) if errs else None,
                    reasons=p.reasons,
                )
            )
        return health, gpus, tuple(out_ports)

    # --- workloads ----------------------------------------------------------------------------------------------
    def _status(self, aid: str, state: wire.WorkloadState, code: int | None, reason: str = "") -> wire.WorkloadStatus:
        meta = self._meta.get(aid)
        at = self._changed_at.setdefault(aid, self.wall())
        return wire.WorkloadStatus(
            assignment_id=aid, job_id=meta.job_id if meta else "", state=state, exit_code=code, at_s=at, reason=reason
        )

    def workload_statuses(self) -> dict[str, wire.WorkloadStatus]:
        out = {a: self._status(a, _STATES[s.state], s.exit_code, s.reason) for a, s in self.runtime.poll().items()}
        for aid, meta in self._meta.items():
            if meta.launch_error and aid not in out:
                # never started: as a shell says "not found", with the reason for the job's failure
                out[aid] = self._status(aid, "exited", 127, meta.launch_error)
        return out

    def tick(self) -> None:
        """Check the children: report what changed, escalate overdue stops. No server call is required."""
        changed: list[wire.WorkloadStatus] = []
        for aid, st in self.workload_statuses().items():
            if self._state.get(aid) in (st.state, "delivered") or st.state == "starting":
                continue  # unchanged, or its launcher has not answered: reported once it has
            self._changed_at[aid] = self.wall()
            st = self._status(aid, st.state, st.exit_code, st.reason)
            self._state[aid] = st.state
            changed.append(st)
            meta = self._meta.get(aid)
            if st.state == "running" and self.sources.emulated is not None and meta is not None:
                # Busy once the workload runs, as a real GPU would be: never before a beat can list it.
                h = self.runtime.handle(aid)
                self.sources.emulated.place(meta.gpus, pid=h.pid if h else None, process=meta.program)
            if st.state in ("exited", "lost"):
                self._undelivered[aid] = st
                if self.sources.emulated is not None and meta is not None:
                    self.sources.emulated.release(meta.gpus)
        now = self.clock()
        for aid, deadline in list(self._kill_at.items()):
            if not self.runtime.group_alive(aid):
                del self._kill_at[aid]
            elif now >= deadline:
                self.log(f"{aid}: grace period over, SIGKILL")
                self.runtime.send_signal(aid, signal.SIGKILL)
                del self._kill_at[aid]
        if changed and self.node_token is not None and now >= self._retry_at:
            try:
                req = wire.ReportRequest(workloads=tuple(changed))
                self._unlocked(self.client.report, self.settings.host, self.node_token, req)
                self.stats.reports += 1
            except (ServerUnavailableError, ProtocolError) as e:
                self.log(f"report not delivered ({e}); the next heartbeat carries it")
            except NodeUnknownError:
                self.node_token = None

    def launch(self, cmd: wire.LaunchCommand) -> None:
        aid = cmd.assignment_id
        if self.runtime.handle(aid) is not None or aid in self._meta:
            return  # launched before (perhaps by an earlier agent on this state dir): never twice
        meta = _Meta(cmd.job_id, tuple(cmd.gpus), program=Path(cmd.argv[0]).name if cmd.argv else "?")
        self._write_meta(aid, meta)  # before the child exists, so a crash right after still knows its job
        # A container gets the job's variables only: the node's PATH, LANG, ... are not the image's.
        env = {**(self._base_env if cmd.container is None else {}), **cmd.env, "GPUPOOL_ASSIGNMENT_ID": aid}
        try:
            check_command(cmd.argv, env)  # the API checked it too; a node does not rely on that
            gpus = self.sources.gpus.inventory() if self.sources.gpus is not None else ()
            env, confine = self.settings.isolation.plan(cmd, env, gpus, self.work_root)
            argv: Sequence[str] = cmd.argv
            if cmd.container is not None:
                argv, env, confine = containerize(
                    self.settings.containers,
                    cmd,
                    env,
                    confine,
                    gpus,
                    self.runtime.state_dir,
                    self.log,
                    self.settings.isolation.dev_dir,
                )
            # Not waiting for the exec: the next launch of this reply starts meanwhile, and a launcher that
            # refuses comes back from the runtime's poll as exited 127 with its reason.
            self.runtime.start(aid, argv, env, confine=confine, files=launch_files(cmd))
        except Exception as e:  # whatever a tenant sent, the job fails with a reason and the agent stays up
            why = _launch_failure(cmd.argv, e)
            self.log(f"{aid}: not started: {why}")
            self._write_meta(aid, _Meta(cmd.job_id, tuple(cmd.gpus), why))
            return
        self.stats.launches += 1

    def stop(self, cmd: wire.StopCommand) -> None:
        aid = cmd.assignment_id
        if self.runtime.handle(aid) is None or aid in self._kill_at:
            return  # never launched here, or already stopping: a repeated stop changes nothing
        if self.runtime.send_signal(aid, signal.SIGTERM):
            self.log(f"{aid}: SIGTERM ({cmd.reason or 'stop'}), SIGKILL in {cmd.grace_s:g} s")
            self._kill_at[aid] = self.clock() + cmd.grace_s

    def execute(self, commands: tuple[wire.LaunchCommand | wire.StopCommand | wire.SignalCommand, ...]) -> None:
        for cmd in commands:
            try:
                if isinstance(cmd, wire.LaunchCommand):
                    self.launch(cmd)
                elif isinstance(cmd, wire.StopCommand):
                    self.stop(cmd)
                else:
                    self.checkpoint(cmd)
            except InputError as e:  # an assignment id that is not a safe directory name, an empty argv
                self.log(f"command refused: {e}")

    def checkpoint(self, cmd: wire.SignalCommand) -> None:
        """SIGUSR1 to the workload, once per stored command id (an id-less one, from an older server, each time
        it comes: such a server sends it once). A rank not running here has nothing to signal: done too."""
        aid = cmd.assignment_id
        if self.runtime.handle(aid) is None:
            if cmd.command_id:
                self._executed.add(cmd.command_id)
            return
        if not cmd.command_id:
            self.runtime.send_signal(aid, signal.SIGUSR1)
            return
        mark = self.runtime.state_dir / aid / f"{SIGNALLED_PREFIX}{cmd.command_id}"
        if cmd.command_id not in self._executed and not mark.exists():
            # Marked before the signal: a crash in between loses one checkpoint request, never doubles it.
            with contextlib.suppress(OSError):
                mark.touch()
            self.runtime.send_signal(aid, signal.SIGUSR1)  # the checkpoint request
            self.log(f"{aid}: checkpoint signal (command {cmd.command_id})")
        self._executed.add(cmd.command_id)

    def _carried_out(self, server_time_s: float) -> None:
        """A reply's commands are carried out: later beats say so (``seen_server_s``), whichever reply came last."""
        self._seen_server_s = max(self._seen_server_s or server_time_s, server_time_s)

    def _settle(self, commands: tuple[wire.LaunchCommand | wire.StopCommand | wire.SignalCommand, ...]) -> None:
        """Stop reporting as executed the commands a reply no longer carries: the server has deleted them."""
        self._executed &= {c.command_id for c in commands if isinstance(c, wire.SignalCommand)}

    # --- the server ----------------------------------------------------------------------------------------------
    def _reported(self) -> list[wire.WorkloadStatus]:
        """What this node runs and what ended unacknowledged: the workloads of a beat and of a commands poll."""
        running = [
            self._status(a, "running", None) for a, s in self._state.items() if s == "running" and a in self._meta
        ]
        # Launched, its launcher's answer not read yet: listed, so a stop for it (a cancel) is not held back.
        starting = [self._status(a, "starting", None) for a in self.runtime.starting if a in self._meta]
        return [*starting, *running, *self._undelivered.values()]

    def beat(self) -> None:
        start = self.clock()
        _, gpus, ports = self.sample()
        sent = dict(self._undelivered)
        xids = tuple(
            wire.XidSample(gpu=x.gpu_index, code=x.code, at_s=at, message=x.message)
            for x, at in self._new_xids
            if x.gpu_index is not None
        )
        req = wire.HeartbeatRequest(
            seq=self.seq,
            at_s=self.wall(),
            gpus=gpus,
            ports=ports,
            xids=xids,
            workloads=tuple(self._reported()),
            executed=tuple(sorted(self._executed)),
            seen_server_s=self._seen_server_s,
            held=self._held,  # the poll's commands, carried out: the reply brings only what is new
        )
        assert self.node_token is not None
        reply = self._unlocked(self.client.heartbeat, self.settings.host, self.node_token, req)
        self.seq += 1
        self.stats.heartbeats += 1
        self.backoff.reset()
        self._new_xids.clear()
        # Only an end the server acknowledged stops being repeated: one it could not store comes again next beat.
        for aid in sent if reply.acked is None else sorted(set(sent) & set(reply.acked)):
            self._undelivered.pop(aid, None)
            self._state[aid] = "delivered"
            with contextlib.suppress(OSError):
                (self.runtime.state_dir / aid / DELIVERED_FILE).touch()
        if reply.heartbeat_interval_s > 0:
            self.interval_s = reply.heartbeat_interval_s
        self._next_beat = max(start + self.interval_s, self.clock())
        self._settle(reply.commands)
        self.execute(reply.commands)
        self._carried_out(reply.server_time_s)
        self.tick()  # report the launches and fast exits at once rather than at the next beat

    def step(self) -> None:
        """One pass: check children; when due and allowed, (re-)register and beat."""
        self.tick()
        now = self.clock()
        if now < self._retry_at:
            return
        try:
            if self.node_token is None:
                self.register()
            if self.clock() >= self._next_beat:
                self.beat()
        except (ServerUnavailableError, ProtocolError) as e:
            delay = self.backoff.next_delay()
            self.stats.server_failures += 1
            self.stats.retry_delays.append(delay)
            self._retry_at = self.clock() + delay
            self.log(f"server unavailable ({e}); retry in {delay:.2f} s")
        except NodeUnknownError as e:
            self.log(f"server does not know this node ({e}); registering again")
            self.node_token = None

    def next_wake_s(self) -> float:
        now = self.clock()
        due = [now + self.settings.poll_s, max(self._next_beat, self._retry_at), *self._kill_at.values()]
        return max(0.001, min(due) - now)

    # --- the commands long-poll (called on the poller's thread) ----------------------------------------------------
    def _next_poll(self) -> PollRequest | float:
        """The next poll, or how long to wait before asking again (``register`` ends that wait)."""
        with self._mu:
            if self._closing or self._command_wait_s <= 0 or self.node_token is None:
                return 60.0
            if (wait := self._push_retry_at - self.clock()) > 0:
                return wait
            body = wire.CommandsRequest(
                workloads=tuple(self._reported()), held=self._held, executed=tuple(sorted(self._executed))
            )
            return PollRequest(self.settings.host, self.node_token, body, self._command_wait_s)

    def _pushed(self, out: PollOutcome) -> None:
        with self._mu:
            if self._closing:
                return
            if out.reply is not None:
                self.stats.pushes += 1
                self._push_backoff.reset()
                self._held = tuple(wire.command_key(c) for c in out.reply.commands if c.kind != "signal")
                self._settle(out.reply.commands)
                self.execute(out.reply.commands)  # the loop's next tick reports them: the next poll opens now
                self._carried_out(out.reply.server_time_s)
                return
            self._held = ()  # whatever answers next (a restarted server, another replica) is asked for everything
            if isinstance(out.error, NodeUnknownError):
                if out.token == self.node_token:  # not a token a re-registration has replaced meanwhile
                    self.log(f"commands: the server does not know this node ({out.error}); registering again")
                    self.node_token = None
                return
            delay = self._push_backoff.next_delay()
            self._push_retry_at = self.clock() + delay
            self.log(f"commands poll failed ({out.error}); again in {delay:.2f} s")

    def shutdown(self) -> None:
        self._closing = True
        if self._poller is not None:
            self._poller.close()
        if self.settings.stop_workloads_on_exit:
            for aid, st in self.runtime.poll().items():
                if st.state is WorkloadState.RUNNING or self.runtime.group_alive(aid):
                    self.runtime.stop(aid, self.settings.exit_grace_s)
            with contextlib.suppress(GpupoolError):
                self.tick()
        self.runtime.close()

    def run(self, stop: threading.Event, sleep: Callable[[float], object] | None = None) -> None:
        """Loop until ``stop`` is set; ``sleep`` defaults to waiting on ``stop`` (so a signal wakes it)."""
        wait = sleep if sleep is not None else stop.wait
        with self._mu:
            try:
                while not stop.is_set():
                    self.step()
                    self._unlocked(wait, self.next_wake_s())
            finally:
                self.shutdown()


def default_host() -> str:
    return socket.gethostname().split(".")[0]
