"""The agents' latest GPU and InfiniBand samples as Prometheus text: ``gpupool_gpu_*{node,gpu}`` and
``gpupool_ib_port_*{node,port,leaf}``, with each port's leaf from the current fabric (``""``: unknown).

Written here rather than through ``prometheus_client``'s metric families: at 1,023 hosts these are ~82,000
samples, and building a family object per sample and formatting it with ``generate_latest`` cost ~0.6 s of CPU
per scrape (measured with ``benchmarks/metrics_scrape.py``); the text format of a gauge line is one f-string.
Each host's label text is escaped once per scrape. ``tests/integration/server/test_server_metrics.py`` parses
the result with ``prometheus_client``'s parser and runs ``promtool check metrics`` on it.
"""

from __future__ import annotations

from collections.abc import Callable

from gpupool.fabric.fabric import Fabric
from gpupool.schemas.agent import GpuSample, PortSample
from gpupool.server.telemetry import LiveTelemetry

_PORT_STATE = {"up": 0, "degraded": 1, "down": 2}
_MIB = 1048576.0
_GBPS_TO_BYTES = 1e9 / 8

# (name, type, help, value of a sample or None: no series)
_GPU: tuple[tuple[str, str, Callable[[GpuSample], float | None]], ...] = (
    ("gpupool_gpu_utilization_ratio", "GPU utilisation, 0 to 1", lambda g: _mul(g.utilization_pct, 0.01)),
    ("gpupool_gpu_memory_used_bytes", "GPU memory in use", lambda g: _mul(g.memory_used_mib, _MIB)),
    ("gpupool_gpu_temperature_celsius", "GPU temperature", lambda g: g.temperature_c),
    ("gpupool_gpu_power_watts", "GPU power draw", lambda g: g.power_w),
)
_PORT: tuple[tuple[str, str, Callable[[PortSample], float | None]], ...] = (
    ("gpupool_ib_port_state", "Port state (0 up, 1 degraded, 2 down)", lambda p: _PORT_STATE[p.state]),
    ("gpupool_ib_port_xmit_bytes_per_second", "Port transmit rate", lambda p: _mul(p.xmit_gbps, _GBPS_TO_BYTES)),
    ("gpupool_ib_port_rcv_bytes_per_second", "Port receive rate", lambda p: _mul(p.rcv_gbps, _GBPS_TO_BYTES)),
    ("gpupool_ib_port_xmit_wait_per_second", "PortXmitWait ticks per second", lambda p: p.xmit_wait_per_s),
    ("gpupool_ib_port_errors_per_second", "Port error counters' growth per second", lambda p: p.errors_per_s),
)


def _mul(v: float | None, k: float) -> float | None:
    return None if v is None else v * k


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(v: float) -> str:
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _head(name: str, kind: str, help_: str) -> list[str]:
    return [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]


class TelemetryText:
    def __init__(self, telemetry: LiveTelemetry, fabric: Callable[[], Fabric | None]) -> None:
        self._telemetry, self._fabric = telemetry, fabric
        self._leaves: tuple[int, dict[tuple[str, str], str]] = (0, {})

    def _leaf_of(self) -> dict[tuple[str, str], str]:
        fab = self._fabric()
        if fab is None:
            return {}
        if self._leaves[0] != id(fab):
            names = [s.name for s in fab.switches]
            leaf = {
                (h.host, h.name): names[int(s)] if s >= 0 else ""
                for h, s in zip(fab.hcas, fab.hca_leaf, strict=True)
                if h.host is not None
            }
            self._leaves = (id(fab), leaf)
        return self._leaves[1]

    def render(self) -> str:
        leaf_of = self._leaf_of()
        gpu_lines: list[list[str]] = [_head(n, "gauge", h) for n, h, _ in _GPU]
        port_lines: list[list[str]] = [_head(n, "gauge", h) for n, h, _ in _PORT]
        for host, (gpus, ports) in sorted(self._telemetry.samples().items()):
            node = _esc(host)
            for g in gpus:
                labels = f'{{node="{node}",gpu="{g.index}"}} '
                for (name, _, value), out in zip(_GPU, gpu_lines, strict=True):
                    v = value(g)
                    if v is not None:
                        out.append(f"{name}{labels}{_num(v)}")
            for p in ports:
                leaf = _esc(leaf_of.get((host, p.hca), ""))
                labels = f'{{node="{node}",port="{_esc(p.hca)}/{p.port}",leaf="{leaf}"}} '
                for (name, _, of_port), out in zip(_PORT, port_lines, strict=True):
                    v = of_port(p)
                    if v is not None:
                        out.append(f"{name}{labels}{_num(v)}")
        xid = _head("gpupool_gpu_xid_total", "counter", "XID events reported to this replica since it started")
        for (host, gpu), n in sorted(self._telemetry.xids().items()):
            xid.append(f'gpupool_gpu_xid_total{{node="{_esc(host)}",gpu="{gpu}"}} {_num(n)}')
        return "\n".join(line for block in (*gpu_lines, *port_lines, xid) for line in block) + "\n"
