"""Health grades from one node's sample, with the domain's HealthRules thresholds (the cluster state's too) and the XID table."""

from __future__ import annotations

from gpupool.agent.health import assess_node, gpu_health, port_health
from gpupool.agent.ib import PortSample, port_rates
from gpupool.agent.xid_log import XidEvent
from gpupool.domain.events import HealthGrade, LinkState
from gpupool.domain.health import HealthRules
from gpupool.domain.xid import XID_TABLE, XidAction, xid_info
from gpupool.fabric.parsers.nvidia_smi import SmiTelemetry

RULES = HealthRules()
COOL = SmiTelemetry(temperature_c=40.0, ecc_volatile_uncorrected=0)


def xid(code: int, gpu: int = 0) -> XidEvent:
    return XidEvent(code=code, pci_bus_id="0000:18:00", gpu_index=gpu)


def port(
    state: str = "ACTIVE", phys: str = "LinkUp", layer: str = "InfiniBand", at: float = 0.0, **c: int
) -> PortSample:
    return PortSample("mlx5_0", 1, at, state, phys, 400.0, layer, c)


def test_xid_table_classes() -> None:
    for code in (48, 64, 74, 79, 95, 119, 120):
        assert XID_TABLE[code].grade is HealthGrade.BAD, code
    for code in (13, 31, 43, 45):
        assert XID_TABLE[code].grade is HealthGrade.OK and not XID_TABLE[code].hardware, code
    assert XID_TABLE[79].action is XidAction.REBOOT
    assert XID_TABLE[63].grade is HealthGrade.DEGRADED and XID_TABLE[94].grade is HealthGrade.DEGRADED
    unknown = xid_info(999)
    assert unknown.grade is HealthGrade.DEGRADED and unknown.action is XidAction.DRAIN


def test_a_healthy_gpu_is_ok() -> None:
    h = gpu_health(0, COOL, [], RULES)
    assert (h.grade, h.reason, h.action) == (HealthGrade.OK, "ok", XidAction.NONE)


def test_uncorrectable_ecc_is_bad() -> None:
    h = gpu_health(0, SmiTelemetry(ecc_volatile_uncorrected=1), [], RULES)
    assert h.grade is HealthGrade.BAD and "uncorrectable ECC" in h.reason


def test_temperature_uses_the_rules() -> None:
    assert gpu_health(0, SmiTelemetry(temperature_c=86.0), [], RULES).grade is HealthGrade.DEGRADED
    assert gpu_health(0, SmiTelemetry(temperature_c=93.0), [], RULES).grade is HealthGrade.BAD
    hot = HealthRules(temp_degraded_c=60.0)
    assert gpu_health(0, SmiTelemetry(temperature_c=61.0), [], hot).grade is HealthGrade.DEGRADED


def test_xids_grade_their_own_gpu_only_and_application_xids_do_not() -> None:
    events = [xid(13, 0), xid(79, 1), xid(63, 2)]
    assert gpu_health(0, COOL, events, RULES).grade is HealthGrade.OK
    fallen = gpu_health(1, COOL, events, RULES)
    assert (fallen.grade, fallen.action) == (HealthGrade.BAD, XidAction.REBOOT)
    assert fallen.reasons == ("XID 79 (GPU has fallen off the bus)",)
    remap = gpu_health(2, COOL, events, RULES)
    assert (remap.grade, remap.action) == (HealthGrade.DEGRADED, XidAction.RESET_GPU)


def test_worst_reason_wins_and_all_are_kept() -> None:
    h = gpu_health(0, SmiTelemetry(temperature_c=86.0, remapped_rows_pending=True), [xid(94), xid(94)], RULES)
    assert h.grade is HealthGrade.DEGRADED and len(h.reasons) == 3
    assert gpu_health(0, SmiTelemetry(temperature_c=86.0), [xid(48)], RULES).grade is HealthGrade.BAD


def test_link_down_is_down() -> None:
    h = port_health(port("DOWN", "Disabled"), None, RULES)
    assert h.state is LinkState.DOWN and "link down" in h.reason


def test_error_rate_over_threshold_degrades_and_congestion_is_scored() -> None:
    a = port(at=0.0, symbol_error=0, port_xmit_wait=0)
    b = port(at=10.0, symbol_error=5, port_xmit_wait=250_000_000)
    h = port_health(b, port_rates(a, b), RULES)
    assert h.state is LinkState.DEGRADED and "symbol_error 0.5/s" in h.reason
    assert h.congestion == 0.5  # 2.5e7 ticks/s against the 5e7 saturation rate
    quiet = port(at=10.0, symbol_error=0, port_xmit_wait=0)
    assert port_health(quiet, port_rates(a, quiet), RULES).state is LinkState.UP


def test_assess_node_covers_every_gpu_and_flags_ethernet() -> None:
    eth = PortSample("mlx5_bond_0", 1, 0.0, "ACTIVE", "LinkUp", 200.0, "Ethernet", {})
    node = assess_node([COOL, SmiTelemetry(ecc_volatile_uncorrected=3)], [xid(74, 0)], [port(), eth], [], RULES)
    assert [g.grade for g in node.gpus] == [HealthGrade.BAD, HealthGrade.BAD]
    assert [p.usable_for_ib for p in node.ports] == [True, False]
    assert node.ports[1].state is LinkState.UP and "Ethernet" in node.ports[1].reason
