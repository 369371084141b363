"""Prometheus metrics of one server process, on its own registry (no module-level collectors).

The loop sets the scheduling series after each cycle; per-tenant usage and heartbeat ages are read from the
store when ``/metrics`` is scraped, so every replica reports them, leader or not.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpupool.cluster.snapshot import ClusterSnapshot
from gpupool.domain.jobs import MILLI_PER_GPU
from gpupool.store import Store


class _StoreCollector(Collector):
    def __init__(
        self, store: Store, clock: Callable[[], float], unflushed: Callable[[], Mapping[str, float]] | None
    ) -> None:
        self._store = store
        self._clock = clock
        self._unflushed = unflushed

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self._clock()
        usage = GaugeMetricFamily(
            "gpupool_tenant_gpu_seconds", "GPU-seconds used since the epoch", labels=["tenant", "pool", "gpu_model"]
        )
        for u in self._store.usage(0.0, now):
            usage.add_metric([u.tenant, u.pool, u.gpu_model], u.gpu_seconds)
        yield usage
        age = GaugeMetricFamily(
            "gpupool_agent_heartbeat_age_seconds", "Seconds since each node's last heartbeat", labels=["node"]
        )
        # Steady beats are persisted in batches: this replica's newer, unflushed times win.
        fresh = {} if self._unflushed is None else self._unflushed()
        for n in self._store.list_nodes():
            last = max(n.last_heartbeat_s or 0.0, fresh.get(n.name, 0.0)) or None
            if last is not None:
                age.add_metric([n.name], max(0.0, now - last))
        yield age


class ServerMetrics:
    def __init__(
        self, store: Store, clock: Callable[[], float], unflushed: Callable[[], Mapping[str, float]] | None = None
    ) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.queue_depth = Gauge(
            "gpupool_queue_depth", "Pending jobs per pool and priority class", ["pool", "priority"], registry=r
        )
        self.cycle_seconds = Histogram(
            "gpupool_schedule_cycle_seconds",
            "Scheduling cycle latency",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=r,
        )
        self.placements = Counter("gpupool_placements", "Jobs placed (rate() gives placements/s)", registry=r)
        self.preemptions = Counter("gpupool_preemptions", "Jobs preempted", registry=r)
        self.gpus_allocated = Gauge(
            "gpupool_gpus_allocated", "GPUs allocated (shares count their fraction)", ["pool", "gpu_model"], registry=r
        )
        self.gpus_free = Gauge("gpupool_gpus_free", "GPUs nobody holds, on up nodes", ["pool", "gpu_model"], registry=r)
        self.leader = Gauge("gpupool_leader", "1 while this replica runs the scheduling loop", registry=r)
        self.submits = Counter("gpupool_job_submits", "Jobs accepted by this replica", registry=r)
        r.register(_StoreCollector(store, clock, unflushed))

    def observe_state(self, snap: ClusterSnapshot, node_pool: Mapping[str, str]) -> None:
        """The queue per (pool, priority) and GPUs allocated and free per (pool, GPU model), after a cycle."""
        depth: dict[tuple[str, str], int] = defaultdict(int)
        for j in snap.pending:
            depth[(j.pool, j.priority.name.lower())] += 1
        self.set_queue(depth)
        ix = snap.index
        gpus: dict[tuple[str, str], tuple[float, int]] = {}
        for h, host in enumerate(ix.fabric.hosts):
            if not host.gpus:
                continue
            key = (node_pool.get(host.name, "default"), host.gpus[0].model)
            used = snap.gpu_used_milli[h, : len(host.gpus)]
            allocated = float(used.sum()) / MILLI_PER_GPU
            free = int(np.count_nonzero(used == 0)) if snap.node_state[h] == 0 else 0
            a, f = gpus.get(key, (0.0, 0))
            gpus[key] = (a + allocated, f + free)
        self.set_gpus(gpus)

    def set_queue(self, depth: Mapping[tuple[str, str], int]) -> None:
        self.queue_depth.clear()
        for (pool, prio), n in depth.items():
            self.queue_depth.labels(pool, prio).set(n)

    def set_gpus(self, gpus: Mapping[tuple[str, str], tuple[float, int]]) -> None:
        self.gpus_allocated.clear()
        self.gpus_free.clear()
        for (pool, model), (allocated, free) in gpus.items():
            self.gpus_allocated.labels(pool, model).set(allocated)
            self.gpus_free.labels(pool, model).set(free)

    def render(self) -> bytes:
        return generate_latest(self.registry)
