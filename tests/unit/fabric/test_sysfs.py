"""/sys/class/infiniband reader and writer against a real H100 node's tree (gpud test data) and its flat dump."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest

from gpupool.domain.errors import InputError, ParseError
from gpupool.fabric.parsers.ibstat import parse_ibstat
from gpupool.fabric.parsers.sysfs import (
    SysfsDevice,
    hcas_from_sysfs,
    parse_sysfs_dump,
    read_sysfs_infiniband,
    write_sysfs_infiniband,
)

DATA = Path(__file__).resolve().parents[2] / "data"
TREE = DATA / "sysfs-infiniband" / "h100-node-gpud-sys-class-infiniband"
DUMP = DATA / "sysfs-infiniband" / "h100-node-gpud-flat-dump.txt"
IBSTAT = DATA / "ibstat" / "h100-8x-cx7-ndr400-ib-plus-bluefield-eth-gpud.txt"
NAMES = ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9", "mlx5_bond_0"]


def copy_tree(tmp_path: Path) -> Path:
    dst = tmp_path / "infiniband"
    shutil.copytree(TREE, dst)
    for dirpath, _, files in os.walk(dst):
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o644)
    return dst


def test_reads_the_h100_tree() -> None:
    devices = read_sysfs_infiniband(TREE)
    assert [d.name for d in devices] == NAMES
    d = devices[0]
    assert (d.hca_type, d.fw_ver, d.board_id, d.node_guid, d.numa_node) == (
        "MT4129",
        "28.41.1000",
        "MT_0000000838",
        "",
        None,
    )
    (p,) = d.ports
    assert (p.port, p.state, p.state_code, p.phys_state, p.phys_state_code) == (1, "ACTIVE", 4, "LinkUp", 5)
    assert (p.rate_gbps, p.width, p.speed, p.link_layer, p.lid) == (400.0, 4, "NDR", "InfiniBand", None)
    assert p.counters["port_xmit_wait"] == 2489603687
    assert p.counters["excessive_buffer_overrun_errors"] == 15
    assert p.counters["port_rcv_data"] == 230539874932483
    assert len(p.counters) == 21 and len(p.hw_counters) == 26
    assert p.hw_counters["rx_write_requests"] == 3809045607


def test_bond_reports_its_ethernet_link_layer() -> None:
    bond = read_sysfs_infiniband(TREE)[-1]
    assert (bond.name, bond.link_layer, bond.hca_type) == ("mlx5_bond_0", "Ethernet", "MT41692")
    p = bond.ports[0]
    assert (p.rate_gbps, p.width, p.speed, p.infiniband) == (200.0, 2, "NDR", False)


def test_flat_dump_reads_the_same_as_the_tree() -> None:
    assert parse_sysfs_dump(DUMP.read_text(encoding="utf-8"), source=str(DUMP)) == read_sysfs_infiniband(TREE)


def test_missing_counter_is_absent_not_zero(tmp_path: Path) -> None:
    root = copy_tree(tmp_path)
    (root / "mlx5_4" / "ports" / "1" / "counters" / "symbol_error").unlink()
    devices = {d.name: d for d in read_sysfs_infiniband(root)}
    assert "symbol_error" not in devices["mlx5_4"].ports[0].counters
    assert devices["mlx5_0"].ports[0].counters["symbol_error"] == 0


def test_round_trip_writes_the_kernel_files(tmp_path: Path) -> None:
    devices = read_sysfs_infiniband(TREE)
    out = tmp_path / "written"
    write_sysfs_infiniband(out, devices)
    assert read_sysfs_infiniband(out) == devices
    fixture = {os.path.relpath(os.path.join(d, f), TREE) for d, _, fs in os.walk(TREE) for f in fs}
    written = {os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs}
    assert written == fixture
    for rel in fixture:
        # The kernel ends every value with a newline; the fixture's copies were saved without it.
        assert (out / rel).read_bytes() == (TREE / rel).read_bytes().rstrip(b"\n") + b"\n", rel


def test_a_tree_written_again_renames_only_the_files_whose_value_changed(tmp_path: Path) -> None:
    devices = read_sysfs_infiniband(TREE)
    written: dict[str, str] = {}
    write_sysfs_infiniband(tmp_path, devices, written)
    inodes = {p: p.stat().st_ino for p in tmp_path.rglob("*") if p.is_file()}
    port = devices[0].ports[0]
    counters = {**port.counters, "port_xmit_data": port.counters["port_xmit_data"] + 4096}
    grown = dataclasses.replace(devices[0], ports=(dataclasses.replace(port, counters=counters),))
    write_sysfs_infiniband(tmp_path, (grown, *devices[1:]), written)
    renamed = {p for p, ino in inodes.items() if p.stat().st_ino != ino}  # a rename gives the path a new inode
    assert renamed == {tmp_path / devices[0].name / "ports" / "1" / "counters" / "port_xmit_data"}
    assert read_sysfs_infiniband(tmp_path) == (grown, *devices[1:])


def test_round_trip_of_identity_lid_and_numa(tmp_path: Path) -> None:
    d = read_sysfs_infiniband(TREE)[0]
    port = dataclasses.replace(d.ports[0], lid=0x80, sm_lid=1)
    full = dataclasses.replace(d, node_guid="58a2e10300a7820e", node_desc="h100-a mlx5_0", numa_node=1, ports=(port,))
    write_sysfs_infiniband(tmp_path, [full])
    assert (tmp_path / "mlx5_0" / "node_guid").read_text() == "58a2:e103:00a7:820e\n"
    assert (tmp_path / "mlx5_0" / "ports" / "1" / "lid").read_text() == "0x80\n"
    assert (tmp_path / "mlx5_0" / "ports" / "1" / "rate").read_text() == "400 Gb/sec (4X NDR)\n"
    assert read_sysfs_infiniband(tmp_path) == (full,)


def _with_guids(devices: tuple[SysfsDevice, ...]) -> list[SysfsDevice]:
    """The tree was copied without node_guid; the ibstat capture of the same node supplies it."""
    guids = {ca.name: ca.node_guid for ca in parse_ibstat(IBSTAT.read_text(encoding="utf-8"))}
    return [dataclasses.replace(d, node_guid=guids[d.name]) for d in devices]


def test_hcas_from_sysfs_are_the_infiniband_devices() -> None:
    devices = read_sysfs_infiniband(TREE)
    with pytest.raises(ParseError, match="mlx5_0 has no node_guid"):
        hcas_from_sysfs(devices)
    hcas = hcas_from_sysfs(_with_guids(devices), host="h100-a")
    assert [h.name for h in hcas] == NAMES[:-1]
    assert hcas[0].guid == "58a2e10300a7820e"
    assert {(h.rate_gbps, h.link_layer, h.host, h.numa_node) for h in hcas} == {(400.0, "InfiniBand", "h100-a", -1)}


def _dump_lines() -> list[str]:
    return DUMP.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize(
    ("target", "replacement", "message"),
    [
        ("./mlx5_0/ports/1/state:", "./mlx5_0/ports/1/sta", "not a './device/file:value' line"),
        ("./mlx5_0/ports/1/state:", "CA 'mlx5_0'", "not a './device/file:value' line"),
        ("./mlx5_0/ports/1/state:", "./mlx5_0/ports/1/state:ACTIVE", "state 'ACTIVE' is not like '4: ACTIVE'"),
        ("./mlx5_0/ports/1/rate:", "./mlx5_0/ports/1/rate:400 Gb/sec (4X QNDR)", "unknown link speed 'QNDR'"),
        ("./mlx5_0/ports/1/counters/symbol_error:", "./mlx5_0/ports/1/counters/symbol_error:lots", "not a number"),
    ],
)
def test_dump_malformed_lines(target: str, replacement: str, message: str) -> None:
    lines = _dump_lines()
    idx = next(i for i, ln in enumerate(lines) if ln.startswith(target))
    lines[idx] = replacement
    with pytest.raises(ParseError, match=message) as e:
        parse_sysfs_dump("\n".join(lines), source="dump.txt")
    assert (e.value.source, e.value.line) == ("dump.txt", idx + 1)


def test_dump_truncated() -> None:
    lines = _dump_lines()
    with pytest.raises(ParseError, match=r"mlx5_7/ports/1 has no 'state' file \(truncated") as e:
        parse_sysfs_dump("\n".join(lines[:300]), source="dump.txt")
    assert e.value.line == 300  # the last line that still described that port
    with pytest.raises(ParseError, match="empty sysfs dump"):
        parse_sysfs_dump("")


def test_tree_bad_values_name_the_file(tmp_path: Path) -> None:
    root = copy_tree(tmp_path)
    bad = root / "mlx5_5" / "ports" / "1" / "counters" / "link_downed"
    bad.write_bytes(b"12\xff\n")
    with pytest.raises(ParseError, match="not UTF-8") as e:
        read_sysfs_infiniband(root)
    assert (e.value.source, e.value.line) == (str(bad), 1)
    bad.write_text("N/A\n")
    with pytest.raises(ParseError, match="'N/A' is not a number") as e:
        read_sysfs_infiniband(root)
    state = root / "mlx5_5" / "ports" / "1" / "phys_state"
    bad.write_text("0\n")
    state.write_text("LinkUp\n")
    with pytest.raises(ParseError, match="phys_state 'LinkUp'") as e:
        read_sysfs_infiniband(root)
    assert e.value.source == str(state)


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a directory"):
        read_sysfs_infiniband(tmp_path / "missing")
