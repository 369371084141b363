"""The agent gateway: the server side of the agent protocol v1 (register, heartbeat with commands, reports).

Commands are derived, not queued: on each heartbeat, and on each pass of the agent's commands long-poll
(``push``), ``commands`` compares the node's stored assignments (the ranks of its placed and running jobs)
with what the agent says it runs. A placed rank it does not run gets a launch
(the agent launches an assignment id at most once, so a repeat after a server restart is harmless); a rank
it runs that is no longer assigned to it (cancelled, preempted, or requeued while the node was lost) gets a
stop. So a restarted server, a standby taking over, or a node coming back all converge without a queue. The
one command the assignments cannot say, a checkpoint signal, is stored (``store.commands``): every replica
sends it, from its host cache, until the agent lists its id as carried out (``executed``); then it is deleted.

Reports of ranks (running, exited with a code, lost) are stored on the rank's allocation row, and the job
moved as its current allocation's ranks say, in one transaction (``Store.record_ranks``, which concurrent
requests' reports share: ``rankbatch``): no replica keeps a gang's progress in memory. A beat's reply
acknowledges (``acked``) each ended rank whose end is stored (or that no live allocation has): the agent
repeats an end until then. Each beat is also judged against the node's stored ranks (``Store.rank_watch``):
a rank never launched, or launched and since vanished without an end, a node-lost timeout after, requeues
or fails its job.
"""

from __future__ import annotations

import logging
import threading
import zlib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import overload
from urllib.parse import urlsplit

from gpupool.domain.containers import container_from_json
from gpupool.domain.errors import GpupoolError
from gpupool.domain.events import HealthGrade, NodeLabelled
from gpupool.domain.states import JobState, NodeState
from gpupool.domain.workload import array_env, hostfile, rank_place, slurm_env, workload_env
from gpupool.fabric.export.nccl import nccl_ib_hca
from gpupool.fabric.fabric import Fabric
from gpupool.fabric.hostlist import compress
from gpupool.schemas.agent import (
    PROTOCOL_VERSION,
    PROTOCOL_WINDOW,
    Command,
    CommandsRequest,
    ContainerSpec,
    HeartbeatReply,
    HeartbeatRequest,
    LaunchCommand,
    MountSpec,
    RegisterReply,
    RegisterRequest,
    ReportRequest,
    SignalCommand,
    StopCommand,
    WorkloadStatus,
    accepts,
    unknown_fields,
)
from gpupool.server.auth import AuthError, actor
from gpupool.server.fabric_cache import FabricCache
from gpupool.server.hostcache import HostCache
from gpupool.server.labels import derived_labels
from gpupool.server.live import LeafMap, LiveInbox, PortCounters, gpu_events, reasons
from gpupool.server.liveness import BeatPace, LastSeen
from gpupool.server.rankbatch import Outcome, RankBatcher, Report
from gpupool.server.settings import Settings
from gpupool.server.telemetry import LiveTelemetry
from gpupool.store import Principal, Store
from gpupool.store.agents import Registrant
from gpupool.store.launches import LaunchInputs
from gpupool.store.ranks import RankReport, parse_assignment_id
from gpupool.store.server_ops import Assignment, ServerOps
from gpupool.store.tokens import split_token

log = logging.getLogger("gpupool.server.gateway")
_GRADE = {"ok": HealthGrade.OK, "degraded": HealthGrade.DEGRADED, "bad": HealthGrade.BAD}


def log_url(announced: str, peer: str) -> str:
    """Where the server reaches an agent's log server: the address its registration came from (``peer``) and
    the scheme and port of the URL it announced; its host name and path are ignored, so no registration can
    point the server at another machine or service. "" (no logs) when nothing usable was announced."""
    try:
        parts = urlsplit(announced)
        port = parts.port
    except ValueError:
        return ""
    if parts.scheme not in ("http", "https") or not peer:
        return ""
    host = f"[{peer}]" if ":" in peer else peer
    return f"{parts.scheme}://{host}" + ("" if port is None else f":{port}")


@dataclass(frozen=True, slots=True)
class Reports:
    """A request's workload states, sorted: the ended ones settled without a write (``acked``) and the reports to
    store, with their assignment ids."""

    host: str
    acked: list[str]
    reports: list[Report]
    aids: list[str]

    def unstored(self, e: GpupoolError) -> list[Outcome]:
        """None stored, none acknowledged (the database away): the agent repeats them."""
        log.info("%d reports of %s not stored: %s", len(self.reports), self.host, e)
        return [e] * len(self.reports)


class ProtocolUnsupportedError(GpupoolError):
    """An agent further from this server's protocol than the compatibility window: one side must upgrade."""

    code = "PROTOCOL_UNSUPPORTED"


class AgentGateway:
    def __init__(
        self,
        store: Store,
        ops: ServerOps,
        fabrics: FabricCache,
        settings: Settings,
        wake: Callable[[], None],
        clock: Callable[[], float],
        seen: LastSeen,
        hosts: HostCache,
        live: LiveInbox,
        pace: BeatPace,
    ) -> None:
        self._store, self._ops, self._fabrics, self._seen, self._hosts = store, ops, fabrics, seen, hosts
        self._settings, self._wake, self._clock, self._pace = settings, wake, clock, pace
        self.telemetry = LiveTelemetry()  # the dashboard's live samples: one per host, in memory only
        # Heartbeats become the scheduler's events (``live``): per-leaf counters, and each host's HCA -> leaf.
        self._live = live
        self._ports = PortCounters(stale_s=pace.lost_after_s)
        self._leaves = LeafMap(fabrics.imported, self._inventory, settings.host_cache_s, clock)
        self._ignored: set[tuple[str, tuple[str, ...]]] = set()  # (host, unknown fields) already logged
        self._ranks = RankBatcher(store.record_ranks)  # rank reports of concurrent requests: one transaction
        self._fabric_lock = threading.Lock()
        self._fabric_at: tuple[Fabric | None, float] | None = None  # the launches' fabric and when it was read
        self._fabric_reading = False  # a thread is reading it again (``_fabric``)

    # -- protocol versions -------------------------------------------------------------------------------------
    def check_protocol(
        self, host: str, msg: RegisterRequest | HeartbeatRequest | ReportRequest | CommandsRequest
    ) -> None:
        """Refuse an agent too far from this server's protocol; log, once per host, the fields ignored.

        Only a peer of another version sends fields this server does not know, so a same-version heartbeat
        (the steady state) is not walked for them."""
        if msg.protocol == PROTOCOL_VERSION:
            return
        if not accepts(msg.protocol):
            lo, hi = PROTOCOL_VERSION - PROTOCOL_WINDOW, PROTOCOL_VERSION + PROTOCOL_WINDOW
            raise ProtocolUnsupportedError(
                f"agent {host} speaks protocol {msg.protocol}; this server speaks {PROTOCOL_VERSION} and works "
                f"with agents of {lo} to {hi}: upgrade the older side (one release at a time)"
            )
        names = unknown_fields(msg)
        if names and (host, names) not in self._ignored:
            self._ignored.add((host, names))
            log.warning(
                "agent %s (protocol %d): ignored fields this server does not know: %s",
                host,
                msg.protocol,
                ", ".join(names),
            )

    # -- register ----------------------------------------------------------------------------------------------
    def register(self, req: RegisterRequest, token: str, peer: str, admin: Principal | None = None) -> RegisterReply:
        """Register (or re-register) ``req.host``. ``token``: a join token (a new name, or one whose node is not
        live), the host's own node token, or, with ``admin`` the principal it was found to be, an admin token.
        ``peer``: the address the request came from; the server reaches the agent's log server there only,
        at the port the agent announced (``log_url``), never at a URL the agent chose."""
        by = self._registrant(req.host, token, admin)
        by_whom = f"agent:{req.host}" if admin is None else actor(admin)
        model = req.gpus[0].model if req.gpus else ""
        # Derived from the imported fabric only (parsed once per version): no fabric is built per registration.
        fabric, _ = self._fabrics.imported()
        labels = {**derived_labels(fabric, req), **req.labels}  # the node's configuration wins over derivation
        # The registration (and the right to the name) first: a refused one changes nothing of the node.
        node_token = self._ops.register_agent(
            req.host,
            by=by,
            log_url=log_url(req.agent_url, peer),
            address=req.address or peer,
            inventory=req.model_dump(mode="json"),
            actor=by_whom,
            live_within_s=self._pace.lost_after_s(),
        )
        self._store.upsert_node(req.host, gpu_model=model, gpu_count=len(req.gpus), labels=labels, actor=by_whom)
        node = self._store.heartbeat(req.host, actor=by_whom)
        self._hosts.forget_token(req.host)  # the old token stops working here at once
        self._leaves.forget(req.host)  # its HCAs may have changed
        with self._fabric_lock:
            self._fabric_at = None  # a synthetic fabric changes with the agents: read again for the next launch
        self._hosts.put_node(node)  # a new node, or a changed GPU count
        self._live.put([NodeLabelled(node.name, node.labels, self._clock())])  # its own, and admins' over them
        self._wake()
        now = self._clock()
        return RegisterReply(
            node_token=node_token,
            heartbeat_interval_s=self._pace.interval_s(),
            server_time_s=now,
            command_wait_s=self._settings.command_wait_s,
        )

    def _registrant(self, host: str, token: str, admin: Principal | None) -> Registrant:
        if admin is not None:
            return Registrant("admin", admin.token_id)
        if token.startswith("gpn_"):
            parts = split_token(token, "gpn")
            if parts is None or self._ops.check_node_token(host, token) is None:
                raise AuthError(f"not the node token of {host}")
            return Registrant("node", parts[0])
        join = self._store.check_join_token(token)
        if join is None:
            raise AuthError("the join token is unknown, revoked or expired")
        return Registrant("join", join.id)

    def node_token_held(self, host: str, token: str) -> bool:
        """True when memory alone shows ``token`` to be ``host``'s (``check_node`` would pass without reading the
        store): asked on the event loop, so a poll's check costs no hand-off. False proves nothing: ``check_node``
        (on a beat worker) decides, and refuses a wrong or replaced token as ever."""
        return self._hosts.token_check(host, token, read=False)[0]

    def check_node(self, host: str, token: str) -> None:
        fresh, known = self._hosts.token_check(host, token)
        if fresh:
            return
        if known is not None:
            current = self._ops.node_token_hash(host)
            if current is not None and current[1] == known:
                self._hosts.token_verified(host, token, known)  # still the host's token: no PBKDF2 again
                return
        verified = self._ops.check_node_token(host, token)
        if verified is None:
            raise AuthError(f"not a valid node token for {host}")
        self._hosts.token_verified(host, token, verified)

    # -- heartbeat ---------------------------------------------------------------------------------------------
    def heartbeat(self, host: str, req: HeartbeatRequest, received_s: float | None = None) -> Reports:
        """A beat's first half, on a beat worker: the node's time, grades and XIDs, the live events, and what of
        its workload states must be stored. The caller awaits ``reported`` (the commit, on the event loop, when
        there is anything to store), then ``answer``. ``received_s``: when the server took the beat in (before
        it waited for a beat worker): its time."""
        actor = f"agent:{host}"
        now = self._clock() if received_s is None else received_s
        self.telemetry.record(host, req)
        before = self._hosts.node(host)
        grades = [_GRADE[g.health] for g in sorted(req.gpus, key=lambda g: g.index)]
        # A partial sample (fewer GPUs than registered) says nothing about the missing ones: keep the stored grades.
        health = grades if req.gpus and len(grades) == before.gpu_count else None
        if health is not None and tuple(health) != before.health:
            self._live.note_reasons(host, reasons(req.gpus))
        if before.state is not NodeState.LOST and (health is None or tuple(health) == before.health) and not req.xids:
            # Nothing durable changed: the time is noted in memory and persisted in a batch (no transaction).
            self._seen.note(host, now)
        else:
            xids = [x.model_dump(mode="json") for x in req.xids]
            node = self._store.heartbeat(host, health=health, xids=xids, actor=actor)
            self._hosts.put_node(node)
            if node.state is not before.state or node.health != before.health:
                self._wake()
        # After the commit above: the loop may act on a grade only once the store holds it.
        events = gpu_events(host, req.gpus, before.health, health, now)
        if req.ports:
            events += self._ports.events(host, req.ports, self._leaves.of(host), now)
        self._live.put(events)
        return self._reports(host, req.workloads)

    def answer(self, host: str, req: HeartbeatRequest, acked: Sequence[str]) -> HeartbeatReply:
        """A beat's second half, on a beat worker, after its states were stored (``acked``: the ends settled):
        the watchdog, the releasing ranks its agent confirms gone, and the reply's commands."""
        self._watch(host, req.workloads)
        self._released(host, req.workloads, req.seen_server_s)
        held = None if req.held is None else frozenset(req.held)
        return HeartbeatReply(
            commands=tuple(self.commands(host, req.workloads, req.executed, held) or ()),  # None: all held
            heartbeat_interval_s=self._pace.interval_s(),
            server_time_s=self._clock(),
            acked=tuple(acked),
        )

    @overload
    def commands(
        self, host: str, workloads: Sequence[WorkloadStatus], executed: Sequence[str] | None = None
    ) -> list[Command]: ...
    @overload
    def commands(
        self,
        host: str,
        workloads: Sequence[WorkloadStatus],
        executed: Sequence[str] | None,
        held: Collection[str] | None,
    ) -> list[Command] | None: ...
    def commands(
        self,
        host: str,
        workloads: Sequence[WorkloadStatus],
        executed: Sequence[str] | None = None,
        held: Collection[str] | None = None,
    ) -> list[Command] | None:
        """What ``host`` must do, given what its agent says it runs and which stored commands it has carried out
        (``executed``; None from an older agent): the one derivation behind heartbeat replies and the pushed
        commands (``push``). With ``held`` (the command keys the agent holds, a long poll's): None when every
        command would be one it holds, found before any launch is built, so a poll woken for another change
        of its host reads nothing from the store; else every command, as without it."""
        desired = {a.assignment_id: a for a in self._hosts.assignments(host) if not a.releasing}
        reported = {w.assignment_id: w for w in workloads}
        # Checkpoint signals first: a rank stopped in this same reply (its GPU turned bad) is asked to save
        # its work before its SIGTERM.
        signals = self._signals(host, executed)
        launches = [a for aid, a in desired.items() if aid not in reported and a.state is JobState.PLACED]
        stops = [aid for aid, w in reported.items() if w.state in ("starting", "running") and aid not in desired]
        if (
            held is not None
            and not signals
            and all(f"launch:{a.assignment_id}" in held for a in launches)
            and all(f"stop:{aid}" in held for aid in stops)
        ):
            return None
        commands: list[Command] = [*signals, *self._launches(launches)]
        grace_s = self._settings.stop_grace_s
        commands += [
            StopCommand(assignment_id=aid, grace_s=grace_s, reason="no longer assigned to this node") for aid in stops
        ]
        return commands

    def _signals(self, host: str, executed: Sequence[str] | None) -> list[SignalCommand]:
        """The stored signals for ``host`` its agent has not carried out; those it has are marked done. An older
        agent, which reports nothing carried out, gets each once: marked done as it is sent."""
        stored = self._hosts.commands(host)
        if not stored:
            return []
        done = set(executed or ())
        out = [
            SignalCommand(assignment_id=c.assignment_id, command_id=c.command_id)
            for c in stored
            if c.kind == "signal" and c.command_id not in done
        ]
        settled = [c.command_id for c in stored if c.command_id in done or executed is None]
        if settled:
            try:
                self._store.ack_commands(host, settled)
                self._hosts.invalidate()
            except GpupoolError as e:  # kept: the agent lists them again, and a repeat is harmless
                log.info("signals of %s not marked done: %s", host, e)
        return out

    # -- reports -----------------------------------------------------------------------------------------------
    def report(self, host: str, workloads: Sequence[WorkloadStatus]) -> Reports:
        """A report request's first half, on a beat worker (the host cache may read the store): what to store.
        The second half, ``reported``, waits for the commit on the event loop, holding no worker: a batch then
        holds every report waiting (of reports and beats alike), not at most one per worker."""
        return self._reports(host, workloads)

    def close(self) -> None:
        """Store the reports queued; later ones are refused (the server is shutting down)."""
        self._ranks.close()

    async def reported(self, p: Reports) -> list[str]:
        """Returns once ``p``'s reports are stored (or refused: the agent repeats them), with the assignment ids
        of the ended ranks now settled: stored, or of no live allocation (nothing to store)."""
        if not p.reports:
            return p.acked
        try:
            outcomes = await self._ranks.stored(p.reports)  # with other requests' reports, in one transaction
        except GpupoolError as e:
            outcomes = p.unstored(e)
        return self._settle(p, outcomes)

    def _inventory(self, host: str) -> RegisterRequest:
        """What ``host`` registered (its HCAs, for the leaf map)."""
        return RegisterRequest.model_validate(self._ops.agent(host).inventory)

    # -- workload states -> rank rows -> job states ----------------------------------------------------------
    def _reports(self, host: str, workloads: Sequence[WorkloadStatus]) -> Reports:
        """What of ``workloads`` must be stored (each rank's row; the job moves with it in the same transaction,
        ``Store.record_ranks``), and the ended ones settled without a write."""
        cached = {a.assignment_id: a for a in self._hosts.assignments(host)}
        p = Reports(host, [], [], [])
        for w in workloads:
            ended = w.state in ("exited", "lost")
            a = cached.get(w.assignment_id)
            if a is not None and (a.ended or (not ended and a.started)):
                if ended:
                    p.acked.append(w.assignment_id)
                continue  # already stored: the steady state (every beat lists every running rank) writes nothing
            parsed = parse_assignment_id(w.assignment_id)
            if parsed is None or parsed[0] != w.job_id:
                p.acked.extend([w.assignment_id] if ended else [])
                continue
            report = RankReport(parsed[0], parsed[1], parsed[2], host, w.state, w.exit_code, w.reason)
            p.reports.append((report, f"agent:{host}"))
            p.aids.append(w.assignment_id)
        return p

    def _settle(self, p: Reports, outcomes: Sequence[Outcome]) -> list[str]:
        """After the commit that held ``p``'s reports: the ended ones it stored join ``p.acked``, and the jobs they
        moved are dropped from the host cache and the loop nudged."""
        acked = list(p.acked)
        changed: set[str] = set()  # jobs whose ranks (or state) the reports moved
        for aid, (report, _), out in zip(p.aids, p.reports, outcomes, strict=True):
            if isinstance(out, GpupoolError):
                log.info("report for %s not stored: %s", aid, out)
                continue
            if out.changed:
                changed.add(report.job_id)
            if report.state in ("exited", "lost"):
                acked.append(aid)
        if changed:
            self._hosts.invalidate(changed)  # the job's ranks changed state (or ended): this beat's reply must see it
            self._wake()
        return acked

    def _released(self, host: str, workloads: Sequence[WorkloadStatus], seen_server_s: float | None) -> None:
        """Free the GPUs of ``host``'s releasing ranks whose processes its agent confirms gone: reported ended,
        or no longer listed (an agent lists every process it runs) by a beat built after the rank's stop.

        Absence proves nothing about a launch the agent had not received when it built the beat: a launch sent
        just before a cancel may still be on its way, or carried out after this beat left. So a beat counts
        only once it was built ``settle`` (two beats, at the longest interval an agent may still beat at) after
        the stop, by the server's clock: the agent says which reply it had carried out (``seen_server_s``); for
        an older agent, the beat's arrival stands in."""
        listed = {w.assignment_id: w for w in workloads}
        now, settle = self._clock(), 2 * self._pace.beating_s()
        built_after = now if seen_server_s is None else seen_server_s
        gone = []
        for a in self._hosts.assignments(host):
            if not a.releasing:
                continue
            w = listed.get(a.assignment_id)
            ended = w is not None and w.state in ("exited", "lost")
            since = max(a.launched_s or 0.0, a.placed_s or 0.0, a.releasing_s or 0.0)
            absent = w is None and built_after - since > settle
            if ended or absent:
                gone.append(a)
        if gone and self._store.release_ranks(host, [a.assignment_id for a in gone]):
            self._hosts.invalidate({a.job_id for a in gone})
            self._wake()

    def _watch(self, host: str, workloads: Sequence[WorkloadStatus]) -> None:
        """The watchdog: requeue or fail jobs whose ranks on ``host`` its agent never ran or no longer runs.

        A rank is judged a node-lost timeout after its placement (or launch), so a beat in flight while the
        agent launched it is never taken for its absence; the cached assignments filter first, so a beat of
        a node whose agent runs all its ranks reads nothing."""
        listed = {w.assignment_id for w in workloads}
        now, after = self._clock(), self._pace.lost_after_s()
        overdue = [
            a
            for a in self._hosts.assignments(host)
            if a.assignment_id not in listed
            and not (a.ended or a.releasing)
            and a.placed_s is not None
            and now - a.placed_s > after
        ]
        if not overdue:
            return
        moved = self._store.rank_watch(host, listed, after, f"agent:{host}")
        for job_id in moved:
            log.warning("job %s: a rank on %s is gone (watchdog)", job_id, host)
        if moved:
            self._hosts.invalidate(moved)  # only these jobs' ranks changed: a patch, not a reload of every host
            self._wake()

    # -- launch commands ---------------------------------------------------------------------------------------
    def _launches(self, wanted: Sequence[Assignment]) -> list[LaunchCommand]:
        """The launches of ``wanted`` (ranks of one host), built from one read of their jobs (``store.launches``).

        A rank the store no longer holds gets none: the host cache is up to ``host_cache_s`` old, and meanwhile
        another replica (or this one's loop) may have requeued, cancelled or moved the job; the cache's next
        reload drops it."""
        if not wanted:
            return []
        try:
            inputs = self._ops.launch_inputs(sorted({a.job_id for a in wanted}))
        except GpupoolError as e:  # the store cannot answer: the next poll or beat derives them again
            log.warning("cannot read the launches of %d ranks: %s", len(wanted), e)
            return []
        out = []
        fabric = self._fabric()
        for a in wanted:
            got = inputs.get(a.job_id)
            try:
                if isinstance(got, GpupoolError):
                    raise got
                launch = None if got is None else self._launch(a, got, fabric)
            except GpupoolError as e:
                log.warning("cannot build the launch of %s: %s", a.assignment_id, e)
                continue
            if launch is not None:
                out.append(launch)
        return out

    def _fabric(self) -> Fabric | None:
        """The fabric the launches name HCAs from: ``FabricCache.current``, whose key is a read of every agent,
        asked at most once per ``host_cache_s`` (the age the launches' assignments may have too), not per launch
        (at a thousand nodes that read was most of a poll's derivation). One thread reads it again at a time:
        the others, meanwhile, take the one it replaces (dozens of threads derive at once under load)."""
        now = self._clock()
        with self._fabric_lock:
            got = self._fabric_at
            if got is not None and (0 <= now - got[1] < self._settings.host_cache_s or self._fabric_reading):
                return got[0]
            self._fabric_reading = True
        try:
            fabric = self._fabrics.current()[0]
        finally:
            with self._fabric_lock:
                self._fabric_reading = False
        with self._fabric_lock:
            self._fabric_at = (fabric, now)
        return fabric

    def _launch(self, a: Assignment, job: LaunchInputs, fabric: Fabric | None) -> LaunchCommand | None:
        """The launch of ``a`` from its job's stored inputs, or None when its live allocation lacks ``a``."""
        ranks = job.ranks
        if a.assignment_id not in {r.assignment_id for r in ranks}:
            return None
        spec = job.spec
        master = job.master_address or ranks[0].host
        hosts = [r.host for r in ranks]
        place = rank_place(hosts, a.rank)
        try:
            hca = "" if fabric is None else nccl_ib_hca(fabric, a.host, a.gpus)
        except ValueError:
            hca = ""  # no HCA known for these GPUs: let NCCL pick
        port = self._settings.master_port_base + zlib.crc32(a.job_id.encode()) % 10_000
        env = dict(job.env)
        env.update(array_env(spec.array_id, spec.array_index))
        env.update(
            workload_env(
                a.job_id,
                a.rank,
                len(ranks),
                place.local_rank,
                a.gpus,
                hca,
                master,
                port,
                self._settings.socket_ifname,
                local_world_size=place.local_world_size,
                node_rank=place.node_rank,
                nnodes=place.nnodes,
                attempt=job.attempt,
            )
        )
        if job.launch.get("slurm"):
            here = sum(len(r.gpus) for r in ranks if r.host == a.host)
            try:
                nodelist = compress(place.hosts)
            except ValueError:  # a host name a hostlist cannot hold: listed as it is
                nodelist = ",".join(place.hosts)
            env.update(
                slurm_env(a.job_id, spec.name, place, nodelist, here, spec.pool, spec.array_id, spec.array_index)
            )
        return LaunchCommand(
            assignment_id=a.assignment_id,
            job_id=a.job_id,
            argv=job.argv,
            env=env,
            gpus=a.gpus,
            tenant=spec.tenant,
            cpu_millicores=spec.cpu_millicores,
            memory_mib=spec.memory_mib,
            hostfile=hostfile(hosts, [len(r.gpus) if spec.share is None else 0 for r in ranks]),
            container=container_spec(job.launch.get("container"), a.job_id),
        )


def container_spec(raw: object, job_id: str) -> ContainerSpec | None:
    """The stored container of a job's launch options as the agent protocol carries it (None: none)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise GpupoolError(f"job {job_id}: the stored container is not an object")
    c = container_from_json(raw, f"launch of job {job_id}")
    mounts = tuple(MountSpec(source=m.source, target=m.target, read_only=m.read_only) for m in c.mounts)
    return ContainerSpec(image=c.image, mounts=mounts, workdir=c.workdir)
