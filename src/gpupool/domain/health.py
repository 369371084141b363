"""Health rules: how raw telemetry (temperatures, port counters) becomes grades and congestion scores.

Pure thresholds and arithmetic, shared by the agent (local grades) and the cluster state (the server's).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.events import HealthGrade


@dataclass(frozen=True, slots=True)
class HealthRules:
    """Thresholds; one object per process, passed to ``ClusterState`` and to the agent's ``assess_node``.

    H100 SXM slows its clocks near 87 C (HBM near 95 C), so a GPU at 85 C is degraded and at 92 C bad.
    ``PortXmitWait`` counts ticks in which a port had data but no credits: a rising rate means congestion
    downstream. The saturation rate is a calibration knob: at that rate a leaf's congestion score is 1.
    """

    temp_degraded_c: float = 85.0
    temp_bad_c: float = 92.0
    xmit_wait_saturated_per_s: float = 5.0e7
    symbol_errors_per_s_erroring: float = 0.01

    def grade_for_temperature(self, temperature_c: float) -> HealthGrade:
        if temperature_c != temperature_c:  # NaN: no reading, no verdict
            return HealthGrade.OK
        if temperature_c >= self.temp_bad_c:
            return HealthGrade.BAD
        if temperature_c >= self.temp_degraded_c:
            return HealthGrade.DEGRADED
        return HealthGrade.OK

    def congestion(self, xmit_wait_delta: int, dt_s: float) -> float:
        """Congestion score in [0, 1] from the growth of the summed uplink ``PortXmitWait`` over ``dt_s``."""
        if dt_s <= 0 or xmit_wait_delta <= 0:
            return 0.0  # a counter reset (negative delta) or a repeated sample says nothing
        return min(1.0, xmit_wait_delta / dt_s / self.xmit_wait_saturated_per_s)

    def erroring(self, symbol_error_delta: int, dt_s: float) -> bool:
        return dt_s > 0 and symbol_error_delta > 0 and symbol_error_delta / dt_s >= self.symbol_errors_per_s_erroring
