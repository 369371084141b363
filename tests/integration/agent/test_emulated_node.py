"""The emulated node writes files; the agent's real probes read them back."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.agent import EmulatedNode, FileGpuProbe, SysfsIbProbe, assess_node
from gpupool.agent.emulated import write_faults
from gpupool.domain.events import HealthGrade, LinkState
from gpupool.domain.health import HealthRules
from gpupool.fabric.generators import superpod
from gpupool.fabric.parsers.nvidia_smi import parse_query_xml
from gpupool.fabric.parsers.sysfs import hcas_from_sysfs, read_sysfs_infiniband


@pytest.fixture
def node(tmp_path: Path) -> EmulatedNode:
    fabric = superpod(1)
    host = fabric.hosts[0]
    return EmulatedNode(tmp_path / host.name, host, [fabric.hcas[fabric.hca_index(g)] for g in host.hcas])


def test_files_read_back_as_the_host_and_its_hcas(node: EmulatedNode) -> None:
    report = parse_query_xml(node.smi_xml_path.read_text(), source="emulated")
    assert len(report.gpus) == 8 and report.driver_version == "535.161.08"
    inv = FileGpuProbe(node.smi_xml_path).inventory()
    assert [g.name for g in inv] == [g.model for g in node.host.gpus]
    assert [g.memory_total_mib for g in inv] == [81559] * 8
    assert len({g.uuid for g in inv}) == 8 and inv[0].pci_bus_id == "00000000:18:00.0"
    devices = read_sysfs_infiniband(node.sysfs_root)
    assert [d.name for d in devices] == [f"mlx5_{i}" for i in range(8)]
    assert [h.guid for h in hcas_from_sysfs(devices)] == list(node.host.hcas)
    samples = SysfsIbProbe(node.sysfs_root).sample(node.now_s)
    assert {(s.state, s.rate_gbps, s.link_layer) for s in samples} == {("ACTIVE", 400.0, "InfiniBand")}


def test_same_calls_give_the_same_files(tmp_path: Path, node: EmulatedNode) -> None:
    twin = EmulatedNode(tmp_path / "twin", node.host, node.hcas)
    for n in (node, twin):
        n.place([0, 1], 80.0)
        n.advance(10.0)
    assert twin.smi_xml_path.read_text() == node.smi_xml_path.read_text()


def test_workload_drives_traffic_and_temperature(node: EmulatedNode) -> None:
    gpus = FileGpuProbe(node.smi_xml_path)
    ib = SysfsIbProbe(node.sysfs_root)
    ib.rates(node.now_s)
    idle = gpus.telemetry()[0]
    node.place([0], util_pct=100.0, pid=4242)
    node.advance(120.0)
    busy = gpus.telemetry()
    assert busy[0].gpu_util_pct == 100.0 and busy[1].gpu_util_pct == 0.0
    assert idle.temperature_c is not None and busy[0].temperature_c is not None
    assert busy[0].temperature_c > idle.temperature_c + 30
    assert busy[0].power_draw_w == 700.0 and busy[0].memory_used_mib == int(81559 * 0.8)
    rates = {r.sample.device: r for r in ib.rates(node.now_s)}
    # GPU 0's rail HCA carries 80 % of 400 Gb/s = 40 GB/s each way; the others are idle.
    assert rates["mlx5_0"].xmit_bytes_per_s == pytest.approx(40e9, rel=1e-6)
    assert rates["mlx5_0"].rcv_bytes_per_s == pytest.approx(40e9, rel=1e-6)
    assert rates["mlx5_1"].xmit_bytes_per_s == 0.0
    node.release([0])
    node.advance(600.0)
    assert gpus.telemetry()[0].temperature_c == pytest.approx(32.0, abs=1.0)


def test_injected_faults_reach_the_health_grades(node: EmulatedNode) -> None:
    gpus = FileGpuProbe(node.smi_xml_path, node.kernel_log_path)
    ib = SysfsIbProbe(node.sysfs_root)
    ib.rates(node.now_s)
    node.place([3], pid=777)
    line = node.inject_xid(3, 79)
    assert "NVRM: Xid (PCI:0000:5d:00): 79, pid=777, name=python, GPU has fallen off the bus." in line
    node.inject_xid(5, 13)
    node.inject_ecc(6, uncorrectable=2)
    node.cooling_fault(2, extra_c=70.0)
    node.set_link(4, up=False)
    node.advance(600.0)
    xids = gpus.xid_events()
    assert [(e.code, e.gpu_index, e.pid) for e in xids] == [(79, 3, 777), (13, 5, None)]
    assert gpus.xid_events() == ()
    health = assess_node(gpus.telemetry(), xids, ib.sample(node.now_s), ib.rates(node.now_s + 1), HealthRules())
    grades = {g.index: g.grade for g in health.gpus}
    assert grades == {0: 0, 1: 0, 2: HealthGrade.BAD, 3: HealthGrade.BAD, 4: 0, 5: 0, 6: HealthGrade.BAD, 7: 0}
    ports = {p.device: p for p in health.ports}
    assert ports["mlx5_4"].state is LinkState.DOWN
    assert ports["mlx5_0"].state is LinkState.UP


def test_port_errors_and_congestion_show_as_rates(node: EmulatedNode) -> None:
    ib = SysfsIbProbe(node.sysfs_root)
    ib.rates(node.now_s)
    node.add_port_errors(1, "symbol_error", 50)
    node.set_congestion(7, 2.5e7)
    node.advance(10.0)
    rates = {r.sample.device: r for r in ib.rates(node.now_s)}
    assert rates["mlx5_1"].errors_per_s["symbol_error"] == 5.0
    assert rates["mlx5_7"].xmit_wait_per_s == 2.5e7
    health = assess_node([], [], [r.sample for r in rates.values()], rates.values(), HealthRules())
    by = {p.device: p for p in health.ports}
    assert by["mlx5_1"].state is LinkState.DEGRADED and by["mlx5_7"].congestion == 0.5


def test_faults_written_from_outside_reach_the_probes_and_go_when_removed(node: EmulatedNode) -> None:
    """How a test drives an agent it runs as a process: ``faults.json`` beside the files the probes read."""
    gpus = FileGpuProbe(node.smi_xml_path)
    ib = SysfsIbProbe(node.sysfs_root)
    ib.rates(node.now_s)
    write_faults(node.root, xmit_wait_per_s={"mlx5_2": 5e7}, temperature_c={5: 88.0})
    node.advance(2.0)
    rates = {r.sample.device: r for r in ib.rates(node.now_s)}
    assert rates["mlx5_2"].xmit_wait_per_s == pytest.approx(5e7) and rates["mlx5_1"].xmit_wait_per_s == 0.0
    temps = [g.temperature_c for g in gpus.telemetry()]
    assert temps[5] == 88.0 and temps[4] == pytest.approx(32.0, abs=1.0)  # held at once, not over minutes
    node.advance(600.0)
    assert gpus.telemetry()[5].temperature_c == 88.0  # still held
    ib.rates(node.now_s)
    (node.root / "faults.json").unlink()
    node.advance(2.0)
    assert {r.sample.device: r for r in ib.rates(node.now_s)}["mlx5_2"].xmit_wait_per_s == 0.0
    node.advance(600.0)
    assert gpus.telemetry()[5].temperature_c == pytest.approx(32.0, abs=1.0)  # cooled back to idle


def test_a_faults_file_that_is_not_json_changes_nothing(node: EmulatedNode) -> None:
    ib = SysfsIbProbe(node.sysfs_root)
    ib.rates(node.now_s)
    write_faults(node.root, xmit_wait_per_s={"mlx5_0": 1e6})
    node.advance(1.0)
    (node.root / "faults.json").write_text("{not json")
    node.advance(1.0)
    assert {r.sample.device: r for r in ib.rates(node.now_s)}["mlx5_0"].xmit_wait_per_s == pytest.approx(1e6)
