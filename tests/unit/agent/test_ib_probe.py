"""SysfsIbProbe on a copy of a real H100 node's /sys/class/infiniband (gpud), counters changed between samples."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gpupool.agent.ib import PortSample, SysfsIbProbe, counter_delta, port_rates
from gpupool.domain.errors import ParseError
from gpupool.domain.events import LinkState

TREE = Path(__file__).resolve().parents[2] / "data" / "sysfs-infiniband" / "h100-node-gpud-sys-class-infiniband"
XMIT_DATA = 230442669431839  # the recorded port_xmit_data of every device (64-bit extended counter)
XMIT_WAIT = 2489603687  # the recorded port_xmit_wait: 32-bit, in the upper half of its range


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    dst = tmp_path / "infiniband"
    shutil.copytree(TREE, dst)
    for dirpath, _, files in os.walk(dst):
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o644)
    return dst


def put(tree: Path, dev: str, counter: str, value: int) -> None:
    (tree / dev / "ports" / "1" / "counters" / counter).write_text(f"{value}\n")


def by_dev(rates: tuple[object, ...]) -> dict[str, object]:
    return {r.sample.device: r for r in rates}  # type: ignore[attr-defined]


def test_first_sample_has_state_rate_and_link_layer(tree: Path) -> None:
    probe = SysfsIbProbe(tree)
    samples = probe.sample(0.0)
    assert [s.device for s in samples] == [
        "mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9", "mlx5_bond_0",
    ]  # fmt: skip
    s = samples[0]
    assert (s.port, s.state, s.phys_state, s.rate_gbps, s.link_layer) == (1, "ACTIVE", "LinkUp", 400.0, "InfiniBand")
    assert s.link_state is LinkState.UP and s.usable_for_ib
    assert probe.rates(0.0) == ()  # nothing to compare with yet


def test_ethernet_port_is_reported_and_flagged(tree: Path) -> None:
    bond = SysfsIbProbe(tree).sample(0.0)[-1]
    assert (bond.device, bond.link_layer, bond.rate_gbps) == ("mlx5_bond_0", "Ethernet", 200.0)
    assert not bond.usable_for_ib


def test_rates_from_two_samples_count_data_in_4_byte_words(tree: Path) -> None:
    probe = SysfsIbProbe(tree)
    probe.rates(100.0)
    put(tree, "mlx5_0", "port_xmit_data", XMIT_DATA + 2_500_000_000)  # 10 GB in 4-byte words
    put(tree, "mlx5_0", "port_rcv_data", 230539874932483 + 1_250_000_000)
    put(tree, "mlx5_0", "symbol_error", 3)
    put(tree, "mlx5_0", "port_xmit_wait", XMIT_WAIT + 1_000_000)
    r = by_dev(probe.rates(102.0))["mlx5_0"]
    assert r.interval_s == 2.0
    assert r.xmit_bytes_per_s == pytest.approx(5e9)
    assert r.rcv_bytes_per_s == pytest.approx(2.5e9)
    assert r.xmit_wait_per_s == pytest.approx(5e5)
    assert r.errors_per_s["symbol_error"] == pytest.approx(1.5)
    assert r.errors_per_s["link_downed"] == 0.0
    untouched = by_dev(probe.rates(103.0))["mlx5_1"]
    assert untouched.xmit_bytes_per_s == 0.0


def test_32_bit_counter_wrap_is_a_wrap(tree: Path) -> None:
    probe = SysfsIbProbe(tree)
    probe.rates(0.0)
    put(tree, "mlx5_4", "port_xmit_wait", 1000)  # from 2,489,603,687 past 2^32 to 1,000
    r = by_dev(probe.rates(1.0))["mlx5_4"]
    assert r.xmit_wait_per_s == 2**32 - XMIT_WAIT + 1000


def test_decrease_that_no_wrap_explains_is_a_reset(tree: Path) -> None:
    probe = SysfsIbProbe(tree)
    probe.rates(0.0)
    put(tree, "mlx5_4", "port_xmit_data", 12)  # 64-bit counter going down: the counters were cleared
    put(tree, "mlx5_4", "symbol_error", 0)
    put(tree, "mlx5_5", "port_xmit_wait", XMIT_WAIT - 5)  # a 1-step wrap would be ~2^32 ticks: a reset
    rates = by_dev(probe.rates(1.0))
    assert rates["mlx5_4"].xmit_bytes_per_s is None
    assert rates["mlx5_5"].xmit_wait_per_s is None
    assert all(v is None or v >= 0 for r in rates.values() for v in r.per_s.values())
    put(tree, "mlx5_4", "port_xmit_data", 1012)
    assert by_dev(probe.rates(2.0))["mlx5_4"].xmit_bytes_per_s == 4000.0  # the next interval is fine again


def test_wrap_of_a_32_bit_data_counter_is_bounded_by_the_link_rate() -> None:
    top = 2**32
    # 400 Gb/s moves at most ~1.56e10 words/s (with margin): a 100-word wrap in 1 s is plausible...
    assert counter_delta("port_xmit_data", top - 50, 50, 1.0, 400.0) == 100
    # ...a wrap needing 3e9 words in 0.01 s is not: that decrease was a reset.
    assert counter_delta("port_xmit_data", 3_100_000_000, 100_000_000, 0.01, 400.0) is None


def test_saturated_narrow_counter_has_no_rate(tree: Path) -> None:
    probe = SysfsIbProbe(tree)
    probe.rates(0.0)
    # The recording already shows excessive_buffer_overrun_errors = 15, the all-ones of a 4-bit field.
    r = by_dev(probe.rates(1.0))["mlx5_0"]
    assert r.errors_per_s["excessive_buffer_overrun_errors"] is None
    assert r.errors_per_s["symbol_error"] == 0.0
    assert counter_delta("link_downed", 255, 3, 1.0) is None  # 8-bit counters saturate, so down is a reset


def test_missing_counters_stay_absent(tree: Path) -> None:
    probe = SysfsIbProbe(tree)
    os.remove(tree / "mlx5_6" / "ports" / "1" / "counters" / "port_xmit_wait")
    probe.rates(0.0)
    os.remove(tree / "mlx5_6" / "ports" / "1" / "counters" / "symbol_error")  # gone in the second sample only
    r = by_dev(probe.rates(1.0))["mlx5_6"]
    assert "port_xmit_wait" not in r.per_s and r.xmit_wait_per_s is None
    assert "symbol_error" not in r.errors_per_s
    assert "link_downed" in r.errors_per_s


def test_link_down_and_zero_interval(tree: Path) -> None:
    (tree / "mlx5_7" / "ports" / "1" / "state").write_text("1: DOWN\n")
    (tree / "mlx5_7" / "ports" / "1" / "phys_state").write_text("3: Disabled\n")
    s = {p.device: p for p in SysfsIbProbe(tree).sample(5.0)}["mlx5_7"]
    assert s.link_state is LinkState.DOWN
    same = port_rates(s, s)
    assert same.interval_s == 0 and all(v is None for v in same.per_s.values())


def test_port_rates_for_samples_built_by_hand() -> None:
    a = PortSample("mlx5_0", 1, 0.0, "ACTIVE", "LinkUp", 400.0, "InfiniBand", {"port_rcv_errors": 4})
    b = PortSample("mlx5_0", 1, 10.0, "ACTIVE", "LinkUp", 400.0, "InfiniBand", {"port_rcv_errors": 9, "new": 1})
    r = port_rates(a, b)
    assert dict(r.per_s) == {"port_rcv_errors": 0.5}


def test_later_samples_read_less_but_see_the_same(tree: Path) -> None:
    probe = SysfsIbProbe(tree)
    first = probe.sample(0.0)  # the full reader
    put(tree, "mlx5_8", "port_rcv_data", 7)
    again = probe.sample(1.0)  # the short path
    fresh = SysfsIbProbe(tree).sample(1.0)
    assert again == fresh
    assert {s.device: s.counters["port_rcv_data"] for s in again}["mlx5_8"] == 7
    assert [s.counters for s in first if s.device != "mlx5_8"] == [s.counters for s in again if s.device != "mlx5_8"]


def test_a_device_that_disappears_is_noticed(tree: Path) -> None:
    probe = SysfsIbProbe(tree)
    probe.rates(0.0)
    shutil.rmtree(tree / "mlx5_9")
    assert "mlx5_9" not in {r.sample.device for r in probe.rates(1.0)}
    assert len(probe.latest) == 8


def test_an_unreadable_value_names_its_file(tree: Path) -> None:
    probe = SysfsIbProbe(tree)
    probe.sample(0.0)
    put_text = tree / "mlx5_0" / "ports" / "1" / "counters" / "symbol_error"
    put_text.write_text("lots\n")
    with pytest.raises(ParseError) as e:
        probe.sample(1.0)
    assert e.value.source == str(put_text)
