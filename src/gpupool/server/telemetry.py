"""The latest GPU and port samples of every host, kept in memory for the dashboard (one sample per host).

Telemetry is neither durable nor shared between replicas: it is the agents' last word, replaced on every
heartbeat that carries samples, and lost on a restart until the next beat. Bounded by the number of hosts,
never by time. The dashboard reads it through ``gpupool.web.TelemetrySource`` (calling the object); ``/metrics``
reads the agents' samples as they came (``samples``) and the XIDs this replica was told of (``xids``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from gpupool.schemas.agent import GpuSample, HeartbeatRequest, PortSample
from gpupool.web import GpuTelemetry, HostTelemetry, PortTelemetry


class LiveTelemetry:
    """Thread-safe: request threads write, the dashboard's requests read a consistent copy."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_host: dict[str, HostTelemetry] = {}
        self._samples: dict[str, tuple[tuple[GpuSample, ...], tuple[PortSample, ...]]] = {}
        self._xids: dict[tuple[str, int], int] = {}

    def record(self, host: str, req: HeartbeatRequest) -> None:
        """Keep ``req``'s samples as ``host``'s latest; a beat without GPU (or port) samples keeps the last ones."""
        if req.xids:
            with self._lock:
                for x in req.xids:
                    self._xids[(host, x.gpu)] = self._xids.get((host, x.gpu), 0) + 1
        if not req.gpus and not req.ports:
            return
        gpus = {g.index: GpuTelemetry(g.utilization_pct, g.temperature_c) for g in req.gpus}
        ports = tuple(PortTelemetry(p.hca, p.state, p.errors_per_s, p.xmit_wait_per_s) for p in req.ports)
        with self._lock:
            old = self._by_host.get(host)
            if old is not None:
                gpus = gpus or dict(old.gpus)
                ports = ports or old.ports
            self._by_host[host] = HostTelemetry(gpus=gpus, ports=ports)
            old_gpus, old_ports = self._samples.get(host, ((), ()))
            self._samples[host] = (req.gpus or old_gpus, req.ports or old_ports)

    def __call__(self) -> Mapping[str, HostTelemetry]:
        with self._lock:
            return dict(self._by_host)

    def samples(self) -> Mapping[str, tuple[tuple[GpuSample, ...], tuple[PortSample, ...]]]:
        """Each host's latest GPU and port samples, as its agent sent them."""
        with self._lock:
            return dict(self._samples)

    def xids(self) -> Mapping[tuple[str, int], int]:
        """How many XID events this replica was told of per (host, GPU) since it started (a counter)."""
        with self._lock:
            return dict(self._xids)
