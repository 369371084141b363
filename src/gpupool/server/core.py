"""The server's parts, built once from the settings and passed to the routes: no module-level state."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpupool.domain.errors import ParseError
from gpupool.scheduler.settings import problems
from gpupool.server.auth import Authenticator
from gpupool.server.eta import StartProjector
from gpupool.server.fabric_cache import FabricCache
from gpupool.server.feasible import SubmitCheck
from gpupool.server.gateway import AgentGateway
from gpupool.server.hostcache import HostCache
from gpupool.server.leader import LeaderLease
from gpupool.server.liveness import BeatPace, BeatWorkers, IntakeWatch, LastSeen
from gpupool.server.loop import SchedulingLoop
from gpupool.server.metrics import ServerMetrics
from gpupool.server.push import CommandPush, Doorbell, Refresher
from gpupool.server.queueorder import QueueOrder
from gpupool.server.settings import Settings
from gpupool.server.submits import SubmitWriter
from gpupool.store import Store
from gpupool.store.server_ops import ServerOps

log = logging.getLogger("gpupool.server")


@dataclass(frozen=True, slots=True)
class Server:
    settings: Settings
    store: Store
    ops: ServerOps
    fabrics: FabricCache
    loop: SchedulingLoop
    gateway: AgentGateway
    auth: Authenticator
    metrics: ServerMetrics
    clock: Callable[[], float]
    submits: SubmitWriter
    fits: SubmitCheck  # the submit-time check: a job that can never run is refused
    push: CommandPush
    beats: BeatWorkers  # the agents' beats and reports, on threads of their own, and the watch of their progress
    queue: QueueOrder  # the pending jobs in the configured policy's order, as of the leader's last cycle
    hosts: HostCache  # nodes and their ranks as the agents are told them (the dashboard's fabric reads them too)
    eta: StartProjector  # expected starts of pending jobs, projected off the loop's path

    def close(self) -> None:
        self.eta.stop()
        self.push.refresher.stop()
        self.loop.stop()
        self.submits.close()
        self.beats.close()
        self.gateway.close()  # the rank reports queued are stored before the store closes
        self.store.close()


def build_server(settings: Settings, *, clock: Callable[[], float] = time.time) -> Server:
    """Open and migrate the store and wire the parts; the loop is started by the app's lifespan. Scheduler
    settings the scheduler cannot use (an unknown policy) stop it before the store is opened."""
    for name, problem in problems(settings.scheduler):
        raise ParseError(f"setting 'scheduler.{name}': {problem}", source="settings")
    store = Store(settings.url, clock=clock)
    before, after = store.migrate()
    if before != after:
        log.info("migrated the store from %s to %s", before or "an empty database", after)
    ops = ServerOps(store)
    fabrics = FabricCache(store, ops)
    # Steady heartbeats' times are persisted in batches, three per lost-timeout (see ``liveness``).
    seen = LastSeen(store, settings.node_lost_after_s / 3)
    # The intake's progress, ticked ~20 times per lost-timeout (at most every 0.25 s): its stalls do not count
    # against a node's silence (see ``liveness``).
    lost_after = settings.node_lost_after_s
    intake = IntakeWatch(min(0.25, lost_after / 20), 4 * lost_after, clock)
    metrics = ServerMetrics(store, clock, seen.unflushed)
    # Agents waiting on the commands long-poll are woken per host, by each reload of the host cache that finds
    # the host's assignments or stored signals changed (see ``push``).
    bell = Doorbell()
    # What heartbeats read (nodes, assignments, verified node tokens), in memory; every local write drops it.
    hosts = HostCache(store, ops, settings.host_cache_s, settings.auth_cache_s, clock)
    refresher = Refresher(hosts.refresh, bell, settings.host_cache_s)
    # How often agents beat and when a silent node is lost, by the fleet's size (see ``liveness``).
    pace = BeatPace(
        settings.heartbeat_interval_s, settings.heartbeat_max_per_s, settings.node_lost_after_s, hosts.count, clock
    )
    hosts.watch(refresher.kick, bell.ring)
    eta = StartProjector(store, fabrics, settings, clock)
    loop = SchedulingLoop(
        store,
        ops,
        fabrics,
        settings,
        metrics,
        LeaderLease(store, settings.cluster_name, settings.lease_ttl_s, settings.lease_renew_s),
        pace=pace,
        clock=clock,
        seen=seen,
        hosts=hosts,
        intake=intake,
        eta=eta.offer,
    )
    gateway = AgentGateway(store, ops, fabrics, settings, loop.nudge, clock, seen, hosts, loop.live, pace)
    metrics.watch_telemetry(gateway.telemetry, lambda: fabrics.current()[0])
    auth = Authenticator(store, settings.admin_token, settings.metrics_token)
    # The loop folds new jobs in without reading them back; two writers where transactions can overlap.
    submits = SubmitWriter(
        ops,
        on_stored=loop.submitted,
        writers=2 if store.concurrent_writes else 1,
        max_queued=settings.submit_queue_max,
        max_pending_per_tenant=settings.max_pending_per_tenant,
        retry_s=settings.store_retry_s,
    )
    fits = SubmitCheck(hosts.nodes, store.list_nodes, lambda: defined_pools(store), settings.host_cache_s, clock)
    beats = BeatWorkers(settings.heartbeat_workers, intake)
    push = CommandPush(gateway.commands, bell, refresher, beats, settings.command_wait_s, clock)
    queue = QueueOrder(lambda: loop.last_run, settings.scheduler.policy)
    return Server(
        settings,
        store,
        ops,
        fabrics,
        loop,
        gateway,
        auth,
        metrics,
        clock,
        submits,
        fits,
        push,
        beats,
        queue,
        hosts,
        eta,
    )


def defined_pools(store: Store) -> set[str]:
    """The pools in use: stored pools, the pools their calendars name, and the pools quotas are set in."""
    out: set[str] = set()
    for p in store.list_pools():
        out.add(p.name)
        out.update(p.calendar.pools)
    out.update(q.pool for q in store.list_quotas())
    return out
