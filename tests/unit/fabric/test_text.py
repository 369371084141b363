"""The text helpers every fabric parser shares, and the inputs that used to slip past them."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from gpupool.domain.errors import ParseError
from gpupool.fabric.parsers._text import (
    decode_tool_output,
    is_decimal,
    natural_key,
    normalise_guid,
    read_tool_output,
    sysfs_guid,
)
from gpupool.fabric.parsers.ibnetdiscover import read_ibnetdiscover
from gpupool.fabric.parsers.nodemap import read_host_map, read_node_name_map
from gpupool.fabric.parsers.nvidia_smi import parse_topo_matrix
from gpupool.fabric.parsers.slurm import parse_block_conf, read_topology_conf
from gpupool.fabric.parsers.sysfs import parse_sysfs_dump

DATA = Path(__file__).resolve().parents[2] / "data"
TOPO = DATA / "nvidia-smi-topo" / "sglang-issue-30401-8x-h100-nv18-8nic.txt"


def test_natural_key_orders_numbers_by_value_and_ignores_case() -> None:
    names = ["mlx5_10", "mlx5_bond_0", "MLX5_3", "mlx5_2", "mlx5_", "c10", "C2"]
    assert sorted(names, key=natural_key) == ["C2", "c10", "mlx5_", "mlx5_2", "MLX5_3", "mlx5_10", "mlx5_bond_0"]


def test_natural_key_is_a_total_order() -> None:
    # Equal ignoring case or zero padding: the name decides, so input order (os.listdir) never shows through.
    assert sorted(["n8", "n08", "a", "A"], key=natural_key) == sorted(["A", "a", "n08", "n8"], key=natural_key)
    assert sorted(["n8", "n08", "a", "A"], key=natural_key) == ["A", "a", "n08", "n8"]
    assert sorted(["a", "1a"], key=natural_key) == ["1a", "a"]  # a number before text, as in string order


def test_only_ascii_digits_are_numbers() -> None:
    # "²".isdigit() is True but int("²") raises: such names must sort as text, never crash.
    assert sorted(["x²", "x2", "²"], key=natural_key) == ["x2", "x²", "²"]
    assert is_decimal("0042") and not is_decimal("²") and not is_decimal("") and not is_decimal("٣")


@pytest.mark.parametrize(
    ("text", "guid"),
    [
        ("0x58a2e10300a7820e", "58a2e10300a7820e"),
        (" 0X2C9 ", "00000000000002c9"),
        ("2c9", "00000000000002c9"),
        ("58a2:e103:00a7:820e", "58a2e10300a7820e"),
        ("0x", None),
        ("0x58a2e10300a7820e0", None),
        ("58a2:e103:00a7", None),
        ("mlx5_0", None),
    ],
)
def test_normalise_guid(text: str, guid: str | None) -> None:
    assert normalise_guid(text) == guid
    if guid is not None:
        assert normalise_guid(sysfs_guid(guid)) == guid


def test_decode_drops_a_byte_order_mark_and_counts_lines_from_the_file_start() -> None:
    assert decode_tool_output(codecs.BOM_UTF8 + b"a\nb\n", source="x") == "a\nb\n"
    data = codecs.BOM_UTF8 + b"a\nb\n\xffc\n"
    with pytest.raises(ParseError, match=r"not UTF-8 text \(byte 0xff at offset 7\)") as e:
        decode_tool_output(data, source="x.txt")
    assert (e.value.source, e.value.line) == ("x.txt", 3)


def test_unreadable_files_are_parse_errors_in_every_reader(tmp_path: Path) -> None:
    missing = tmp_path / "absent.txt"
    for reader in (read_tool_output, read_node_name_map, read_ibnetdiscover, read_topology_conf):
        with pytest.raises(ParseError, match="cannot read") as e:
            reader(missing)
        assert e.value.source == str(missing)
    with pytest.raises(ParseError, match="cannot read"):
        read_host_map(missing)


def test_slurm_reads_a_file_with_a_byte_order_mark(tmp_path: Path) -> None:
    p = tmp_path / "topology.conf"
    p.write_bytes(codecs.BOM_UTF8 + b"SwitchName=s1 Nodes=a[1-2]\n")
    assert [h.name for h in read_topology_conf(p).hosts] == ["a1", "a2"]


def test_non_ascii_digits_are_parse_errors_not_tracebacks() -> None:
    with pytest.raises(ParseError, match="port directory '²' is not a number") as e:
        parse_sysfs_dump("./mlx5_0/ports/²/state:4: ACTIVE\n", source="dump.txt")
    assert e.value.source == "mlx5_0/ports/²"
    text = TOPO.read_text(encoding="utf-8")
    with pytest.raises(ParseError, match="unknown NUMA affinity token '²'") as e:
        parse_topo_matrix(text.replace("0-47,96-143     0 ", "0-47,96-143     ² ", 1), source="topo.txt")
    assert e.value.line == 2
    with pytest.raises(ParseError, match="BlockSizes='²': expected positive integers") as e:
        parse_block_conf("BlockName=b1 Nodes=a[1-2]\nBlockSizes=²\n", source="t.conf")
    assert e.value.line == 2
