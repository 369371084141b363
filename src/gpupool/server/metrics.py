"""Prometheus metrics of one server process, on its own registry (no module-level collectors).

Three sources. The loop hands over its snapshot after each cycle, and the scheduling series (queue, GPUs, jobs
by state, quota use, leaf congestion: the leader's view; a standby reports none of them) are computed from the
latest one when ``/metrics`` is scraped, not every cycle (passes over every host, job and quota cost the loop's
thread several milliseconds a cycle at a thousand hosts, a scrape comes every 15 s or so); the loop counts
placements, preemptions and queue waits. Node states, health grades, heartbeat ages and per-tenant GPU-seconds are read
from the store when ``/metrics`` is scraped, so every replica reports them. GPU and InfiniBand telemetry is the
agents' latest samples this replica received (``LiveTelemetry``), labelled by host and leaf.

Conventions: counters end in ``_total``; states and grades are numbers (0 ok/up, 1 degraded, 2 bad/down).
"""

from __future__ import annotations

import platform
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpupool import __version__
from gpupool.cluster.snapshot import ClusterSnapshot
from gpupool.domain.jobs import MILLI_PER_GPU
from gpupool.domain.sharing import Quota
from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Tier
from gpupool.scheduler.quotas import QuotaBook
from gpupool.server.metrics_telemetry import TelemetryText
from gpupool.server.telemetry import LiveTelemetry
from gpupool.store import NodeRecord, Store

_WAIT_BUCKETS = (1.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 3 * 3600.0, 6 * 3600.0, 24 * 3600.0)
# GPU-seconds of a window that ended this long ago are final: a usage interval is written with the clock of
# the replica that writes it, so a window closer to now may still gain an interval being committed.
_USAGE_SETTLE_S = 120.0


class TenantUsage:
    """GPU-seconds per (tenant, pool, GPU model) since the epoch, as a counter, without re-reading all history
    at each scrape: the total up to a watermark is kept, and only intervals open or ended after it are read.
    A closed window's sum never changes (intervals start and end at their writer's ``now``), so the sum
    grows monotonically. Thread-safe: two scrapes at once (two Prometheus servers) each see the watermark moved
    once; the registry does not serialise collectors."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._mark = 0.0
        self._base: dict[tuple[str, str, str], float] = {}

    def totals(self, now: float) -> dict[tuple[str, str, str], float]:
        settled = now - _USAGE_SETTLE_S
        with self._lock:
            if settled > self._mark:
                for u in self._store.usage(self._mark, settled):
                    key = (u.tenant, u.pool, u.gpu_model)
                    self._base[key] = self._base.get(key, 0.0) + u.gpu_seconds
                self._mark = settled
            mark, out = self._mark, dict(self._base)
        for u in self._store.usage(mark, max(now, mark)):
            key = (u.tenant, u.pool, u.gpu_model)
            out[key] = out.get(key, 0.0) + u.gpu_seconds
        return out


class _StoreCollector(Collector):
    def __init__(
        self, store: Store, clock: Callable[[], float], unflushed: Callable[[], Mapping[str, float]] | None
    ) -> None:
        self._store = store
        self._clock = clock
        self._unflushed = unflushed
        self._usage = TenantUsage(store)

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        usage = CounterMetricFamily(
            "gpupool_tenant_gpu_seconds", "GPU-seconds used since the epoch", labels=["tenant", "pool", "gpu_model"]
        )
        for (tenant, pool, model), s in sorted(self._usage.totals(now).items()):
            usage.add_metric([tenant, pool, model], s)
        yield usage
        age = GaugeMetricFamily(
            "gpupool_agent_heartbeat_age_seconds", "Seconds since each node's last heartbeat", labels=["node"]
        )
        nodes = GaugeMetricFamily("gpupool_nodes", "Registered nodes by state", labels=["state"])
        grade = GaugeMetricFamily(
            "gpupool_gpu_health", "Each GPU's stored health grade (0 ok, 1 degraded, 2 bad)", labels=["node", "gpu"]
        )
        # Steady beats are persisted in batches: this replica's newer, unflushed times win.
        fresh = {} if self._unflushed is None else self._unflushed()
        states: dict[str, int] = {"up": 0, "drained": 0, "lost": 0}
        for n in self._store.list_nodes():
            states[n.state.value] = states.get(n.state.value, 0) + 1
            last = max(n.last_heartbeat_s or 0.0, fresh.get(n.name, 0.0)) or None
            if last is not None:
                age.add_metric([n.name], max(0.0, now - last))
            for g, h in enumerate(n.health):
                grade.add_metric([n.name, str(g)], int(h))
        for state, count in states.items():
            nodes.add_metric([state], count)
        yield from (age, nodes, grade)


class ServerMetrics:
    def __init__(
        self, store: Store, clock: Callable[[], float], unflushed: Callable[[], Mapping[str, float]] | None = None
    ) -> None:
        self.registry = CollectorRegistry()
        self._telemetry: TelemetryText | None = None
        self._shown: dict[Gauge, tuple[tuple[tuple[str, ...], float], ...]] = {}  # what ``_reset`` set last
        # The loop's latest cycle, not yet shown: (snapshot, nodes, quotas), taken by the next scrape.
        self._offered: tuple[ClusterSnapshot, Sequence[NodeRecord], Sequence[Quota]] | None = None
        self._offer_lock = threading.Lock()
        self._shown_lock = threading.Lock()  # held while the leader's series change (a scrape, a lost lease)
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        Gauge("gpupool_build_info", "The server's version", ["version", "python"], registry=r).labels(
            __version__, platform.python_version()
        ).set(1)
        self.queue_depth = Gauge(
            "gpupool_queue_depth", "Pending jobs per pool and priority class", ["pool", "priority"], registry=r
        )
        self.cycle_seconds = Histogram(
            "gpupool_schedule_cycle_seconds",
            "Scheduling cycle latency",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=r,
        )
        self.queue_wait = Histogram(
            "gpupool_queue_wait_seconds", "From submit to placement, per placed job", buckets=_WAIT_BUCKETS, registry=r
        )
        self.placements = Counter("gpupool_placements", "Jobs placed (rate() gives placements/s)", registry=r)
        self.preemptions = Counter("gpupool_preemptions", "Jobs preempted", registry=r)
        self.gpus_allocated = Gauge(
            "gpupool_gpus_allocated", "GPUs allocated (shares count their fraction)", ["pool", "gpu_model"], registry=r
        )
        self.gpus_free = Gauge("gpupool_gpus_free", "GPUs nobody holds, on up nodes", ["pool", "gpu_model"], registry=r)
        self.leader = Gauge("gpupool_leader", "1 while this replica runs the scheduling loop", registry=r)
        self.submits = Counter("gpupool_job_submits", "Jobs accepted by this replica", registry=r)
        self.jobs = Gauge("gpupool_jobs", "Pending and running jobs", ["state", "tenant", "pool"], registry=r)
        qk = ["tenant", "pool", "gpu_model"]
        self.quota_used = Gauge("gpupool_quota_used_gpus", "GPUs running against each quota", qk, registry=r)
        self.quota_nominal = Gauge("gpupool_quota_nominal_gpus", "Each quota's nominal GPUs", qk, registry=r)
        self.quota_borrowed = Gauge("gpupool_quota_borrowed_gpus", "GPUs used beyond nominal quota", qk, registry=r)
        self.leaf_congestion = Gauge(
            "gpupool_leaf_congestion_ratio", "Each leaf's congestion score, 0 to 1", ["leaf"], registry=r
        )
        self.leaf_link = Gauge(
            "gpupool_leaf_link_state", "Each leaf's link state (0 up, 1 degraded, 2 down)", ["leaf"], registry=r
        )
        self._leader_only = (
            self.queue_depth,
            self.gpus_allocated,
            self.gpus_free,
            self.jobs,
            self.quota_used,
            self.quota_nominal,
            self.quota_borrowed,
            self.leaf_congestion,
            self.leaf_link,
        )
        r.register(_StoreCollector(store, clock, unflushed))

    def watch_telemetry(self, telemetry: LiveTelemetry, fabric: Callable[[], Fabric | None]) -> None:
        """Export the agents' samples (built after the metrics: the gateway owns ``telemetry``)."""
        self._telemetry = TelemetryText(telemetry, fabric)

    def observe_state(self, snap: ClusterSnapshot, nodes: Sequence[NodeRecord], quotas: Sequence[Quota] = ()) -> None:
        """After a cycle: its snapshot (immutable), the nodes it read and the quotas, shown at the next scrape
        (the queue, GPUs allocated and free per (pool, model), jobs, quota use, leaves). Kept, not computed:
        only the latest cycle's is ever shown."""
        with self._offer_lock:
            self._offered = (snap, nodes, quotas)

    def _settle(self) -> None:
        """Set the leader's series from the latest cycle offered, if one came since the last scrape."""
        with self._shown_lock:
            with self._offer_lock:
                offered, self._offered = self._offered, None
            if offered is not None:
                snap, nodes, quotas = offered
                self._show_state(snap, {n.name: dict(n.labels).get("pool", "default") for n in nodes}, quotas)

    def _show_state(self, snap: ClusterSnapshot, node_pool: Mapping[str, str], quotas: Sequence[Quota]) -> None:
        depth: dict[tuple[str, str], int] = defaultdict(int)
        jobs: dict[tuple[str, str, str], int] = defaultdict(int)
        for j in snap.pending:
            depth[(j.pool, j.priority.name.lower())] += 1
            jobs[("pending", j.tenant, j.pool)] += 1
        for run in snap.running.values():
            jobs[("running", run.spec.tenant, run.spec.pool)] += 1
        self._reset(self.queue_depth, depth.items())
        self._reset(self.jobs, jobs.items())
        ix = snap.index
        hosts = ix.fabric.hosts
        # Per host at once (numpy), then summed per (pool, model): a loop of array calls per host cost ~15 ms a
        # cycle at a thousand hosts.
        counts = np.fromiter((len(h.gpus) for h in hosts), dtype=np.int64, count=len(hosts))
        used = snap.gpu_used_milli
        valid = np.arange(used.shape[1]) < counts[:, None]
        allocated = np.where(valid, used, 0).sum(axis=1) / MILLI_PER_GPU
        free = np.count_nonzero((used == 0) & valid, axis=1) * (snap.node_state == 0)
        gpus: dict[tuple[str, str], tuple[float, int]] = {}
        for h in np.flatnonzero(counts).tolist():
            host = hosts[h]
            key = (node_pool.get(host.name, "default"), host.gpus[0].model)
            a, f = gpus.get(key, (0.0, 0))
            gpus[key] = (a + float(allocated[h]), f + int(free[h]))
        self._set_gpus(gpus)
        self._observe_quotas(snap, quotas)
        switches = ix.fabric.switches
        leaves = [s for s, sw in enumerate(switches) if sw.tier == Tier.LEAF]
        self._reset(self.leaf_congestion, (((switches[s].name,), float(snap.switch_congestion[s])) for s in leaves))
        self._reset(self.leaf_link, (((switches[s].name,), int(snap.switch_link_state[s])) for s in leaves))

    def _observe_quotas(self, snap: ClusterSnapshot, quotas: Sequence[Quota]) -> None:
        book = QuotaBook(quotas, snap.running, require=False)
        keys = list(book.quotas)
        self._reset(self.quota_used, ((k, book.usage[k] / MILLI_PER_GPU) for k in keys))
        self._reset(self.quota_nominal, ((k, book.quotas[k].nominal_gpus) for k in keys))
        self._reset(self.quota_borrowed, ((k, book.borrowed(k) / MILLI_PER_GPU) for k in keys))

    def set_leader(self, led: bool) -> None:
        """A replica that is not the leader reports none of the leader's series: one that lost the lease keeps
        no stale queue, jobs or quota use for a sum over replicas to count twice."""
        self.leader.set(1 if led else 0)
        if not led:
            with self._shown_lock:
                with self._offer_lock:
                    self._offered = None
                self._shown.clear()
                for g in self._leader_only:
                    g.clear()

    def observe_waits(self, waits: Iterable[float]) -> None:
        for w in waits:
            self.queue_wait.observe(max(0.0, w))

    def _set_gpus(self, gpus: Mapping[tuple[str, str], tuple[float, int]]) -> None:
        self._reset(self.gpus_allocated, ((k, a) for k, (a, _) in gpus.items()))
        self._reset(self.gpus_free, ((k, f) for k, (_, f) in gpus.items()))

    def _reset(self, gauge: Gauge, values: Iterable[tuple[tuple[str, ...], float]]) -> None:
        """Replace every series of ``gauge``: a label set that is gone (a finished tenant's jobs) disappears.
        Values the same as last time are left as they are: each series set costs a ``labels`` lookup, and the
        leaves' series (hundreds, seldom changing) were most of the metrics' time. Under ``_shown_lock``."""
        shown = tuple(values)
        if self._shown.get(gauge) == shown:
            return
        self._shown[gauge] = shown
        gauge.clear()
        for labels, v in shown:
            gauge.labels(*labels).set(v)

    def render(self) -> bytes:
        self._settle()
        text = generate_latest(self.registry)
        return text if self._telemetry is None else text + self._telemetry.render().encode()
