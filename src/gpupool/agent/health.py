"""One node's sample -> a health grade per GPU and a link state per HCA port, each with its reasons.

Thresholds are the domain's ``HealthRules``, the very ones the cluster state grades with. XID meanings come from ``gpupool.domain.xid``. XIDs
are events, not state: the caller passes every XID seen since the GPU was last reset, so a fault stays on
the grade until someone clears it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpupool.agent.ib import PortRates, PortSample
from gpupool.agent.xid_log import XidEvent
from gpupool.domain.events import HealthGrade, LinkState
from gpupool.domain.health import HealthRules
from gpupool.domain.xid import XidAction, xid_info
from gpupool.fabric.parsers.nvidia_smi import SmiTelemetry


@dataclass(frozen=True, slots=True)
class GpuHealth:
    index: int
    grade: HealthGrade
    reasons: tuple[str, ...] = ()
    action: XidAction = XidAction.NONE  # the strongest action any XID on this GPU asks for

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons) if self.reasons else "ok"


@dataclass(frozen=True, slots=True)
class PortHealth:
    device: str
    port: int
    state: LinkState
    usable_for_ib: bool
    congestion: float | None  # 0..1 from the port_xmit_wait rate; None when unknown
    reasons: tuple[str, ...] = ()

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons) if self.reasons else "ok"


@dataclass(frozen=True, slots=True)
class NodeHealth:
    gpus: tuple[GpuHealth, ...]
    ports: tuple[PortHealth, ...]


def gpu_health(index: int, telemetry: SmiTelemetry, xids: Iterable[XidEvent], rules: HealthRules) -> GpuHealth:
    found: list[tuple[HealthGrade, str]] = []
    action = XidAction.NONE
    t = telemetry
    if t.ecc_volatile_uncorrected:
        found.append((HealthGrade.BAD, f"{t.ecc_volatile_uncorrected} uncorrectable ECC errors since the last reset"))
    if t.remapped_rows_failure:
        found.append((HealthGrade.BAD, "row remapping failed (no spare rows)"))
    if t.remapped_rows_pending:
        found.append((HealthGrade.DEGRADED, "row remapping pending: reset the GPU when idle"))
        action = max(action, XidAction.RESET_GPU)
    if t.retired_pages_pending:
        found.append((HealthGrade.DEGRADED, "page retirement pending: reset the GPU when idle"))
        action = max(action, XidAction.RESET_GPU)
    if t.temperature_c is not None:
        g = rules.grade_for_temperature(t.temperature_c)
        if g > HealthGrade.OK:
            found.append((g, f"temperature {t.temperature_c:g} C"))
    seen: set[int] = set()
    for ev in xids:
        if ev.gpu_index != index or ev.code in seen:
            continue
        seen.add(ev.code)
        info = xid_info(ev.code)
        action = max(action, info.action)
        if info.grade > HealthGrade.OK:
            found.append((info.grade, f"XID {ev.code} ({info.name})"))
    grade = max((g for g, _ in found), default=HealthGrade.OK)
    return GpuHealth(index, grade, tuple(r for _, r in found), action)


def port_health(sample: PortSample, rates: PortRates | None, rules: HealthRules) -> PortHealth:
    reasons: list[str] = []
    state = sample.link_state
    if state is LinkState.DOWN:
        reasons.append(f"link down (state {sample.state or '?'}, phys {sample.phys_state or '?'})")
    congestion = None
    if rates is not None:
        for name, per_s in rates.errors_per_s.items():
            if per_s is not None and per_s >= rules.symbol_errors_per_s_erroring:
                reasons.append(f"{name} {per_s:.3g}/s")
                if state is LinkState.UP:
                    state = LinkState.DEGRADED
        wait = rates.xmit_wait_per_s
        if wait is not None:
            congestion = min(1.0, wait / rules.xmit_wait_saturated_per_s)
    if not sample.usable_for_ib:
        reasons.append(f"{sample.link_layer or 'unknown'} link layer: not used for InfiniBand placement")
    return PortHealth(sample.device, sample.port, state, sample.usable_for_ib, congestion, tuple(reasons))


def assess_node(
    telemetry: Sequence[SmiTelemetry],
    xids: Iterable[XidEvent],
    ports: Sequence[PortSample],
    rates: Iterable[PortRates],
    rules: HealthRules,
) -> NodeHealth:
    """Grades for every GPU (``telemetry`` in index order) and every port (``ports``, rates where known)."""
    events = tuple(xids)
    by_port = {(r.sample.device, r.sample.port): r for r in rates}
    return NodeHealth(
        gpus=tuple(gpu_health(i, t, events, rules) for i, t in enumerate(telemetry)),
        ports=tuple(port_health(p, by_port.get((p.device, p.port)), rules) for p in ports),
    )
