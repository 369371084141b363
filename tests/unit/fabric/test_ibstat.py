"""ibstat / ibstatus parsers against real outputs (gpud test data), including a run that died with ibpanic."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpupool.domain.errors import ParseError
from gpupool.fabric.model import Hca
from gpupool.fabric.parsers._text import read_tool_output
from gpupool.fabric.parsers.ibstat import (
    hcas_from_ibstat,
    ib_ports,
    parse_ibstat,
    parse_ibstat_report,
    parse_ibstatus,
)

DATA = Path(__file__).resolve().parents[2] / "data"
H100 = DATA / "ibstat" / "h100-8x-cx7-ndr400-ib-plus-bluefield-eth-gpud.txt"
A100 = DATA / "ibstat" / "a100-8x-mt4126-hdr200-ib-gpud.txt"
PANIC = DATA / "ibstat" / "a100-8x-cx6-hdr-ibpanic-exit255-gpud.txt"
IBSTATUS = DATA / "ibstatus" / "a100-azure-8x-hdr200-gpud.txt"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_h100_eight_ndr_hcas_and_a_bluefield_ethernet_bond() -> None:
    cas = parse_ibstat(read(H100))
    assert [c.name for c in cas] == [
        "mlx5_0",
        "mlx5_1",
        "mlx5_4",
        "mlx5_5",
        "mlx5_6",
        "mlx5_7",
        "mlx5_8",
        "mlx5_9",
        "mlx5_bond_0",
    ]
    first = cas[0]
    assert (first.ca_type, first.firmware, first.node_guid) == ("MT4129", "28.41.1000", "58a2e10300a7820e")
    (p,) = first.ports
    assert (p.state, p.physical_state, p.rate_gbps, p.base_lid, p.sm_lid) == ("Active", "LinkUp", 400.0, 128, 1)
    assert (p.port_guid, p.link_layer, p.active, p.infiniband) == ("58a2e10300a7820e", "InfiniBand", True, True)
    bond = cas[-1]
    assert (bond.ca_type, bond.ports[0].link_layer, bond.ports[0].rate_gbps) == ("MT41692", "Ethernet", 200.0)


def test_ib_ports_skip_ethernet_unless_asked() -> None:
    cas = parse_ibstat(read(H100))
    assert len(ib_ports(cas)) == 8
    assert {p.rate_gbps for p in ib_ports(cas)} == {400.0}
    assert [p.ca for p in ib_ports(cas, include_ethernet=True)][-1] == "mlx5_bond_0"
    a100 = parse_ibstat(read(A100))
    assert a100[0].ports[0].link_layer == "Ethernet"  # mlx5_0 is the RoCE port on this node
    assert [p.ca for p in ib_ports(a100)] == [f"mlx5_{i}" for i in range(1, 9)]


def test_hcas_from_ibstat() -> None:
    hcas = hcas_from_ibstat(parse_ibstat(read(H100)), host="h100-a")
    assert len(hcas) == 8
    assert hcas[0] == Hca(guid="58a2e10300a7820e", name="mlx5_0", lid=128, rate_gbps=400.0, host="h100-a")
    assert "mlx5_bond_0" not in {h.name for h in hcas}


def test_tab_indented_output() -> None:
    text = read(A100)
    assert "\n\tCA type" in text
    assert len(parse_ibstat(text)) == 9


def test_ibpanic_run_keeps_the_complete_adapters() -> None:
    """ibstat died on mlx5_8 (exit 255): the eight adapters before the panic are whole and usable."""
    report = parse_ibstat_report(read(PANIC), source="panic.txt")
    assert not report.complete
    assert [c.name for c in report.cas] == [f"mlx5_{i}" for i in range(8)]
    assert all(c.ports[0].link_layer == "InfiniBand" and c.ports[0].rate_gbps == 200.0 for c in report.cas)
    ((line, message),) = report.diagnostics
    assert line == 137 and "stat of IB device 'mlx5_8' failed" in message
    with pytest.raises(ParseError, match="ibstat failed part way") as e:
        parse_ibstat(read(PANIC), source="panic.txt")
    assert (e.value.source, e.value.line) == ("panic.txt", 137)


def test_a_warning_does_not_make_a_run_incomplete() -> None:
    text = "ibwarn: [42] umad_init: some warning\n" + read(H100)
    report = parse_ibstat_report(text)
    assert report.complete and len(report.cas) == 9
    assert len(parse_ibstat(text)) == 9


def test_output_after_a_panic_is_refused() -> None:
    text = read(PANIC) + read(H100)
    with pytest.raises(ParseError, match="after an ibpanic") as e:
        parse_ibstat_report(text)
    assert e.value.line == 139


def test_ibstatus_matches_ibstat_of_the_same_node() -> None:
    """The ibstatus fixture comes from the node of the ibpanic run: same port GUIDs and LIDs (hex there)."""
    status = parse_ibstatus(read(IBSTATUS))
    assert [c.name for c in status] == [f"mlx5_{i}" for i in range(9)]
    p = status[0].ports[0]
    assert (p.state, p.physical_state, p.rate_gbps, p.width, p.speed) == ("ACTIVE", "LinkUp", 200.0, 4, "HDR")
    panic = parse_ibstat_report(read(PANIC)).cas
    for from_status, from_ibstat in zip(status, panic, strict=False):
        a, b = from_status.ports[0], from_ibstat.ports[0]
        assert (a.port_guid, a.base_lid, a.sm_lid) == (b.port_guid, b.base_lid, b.sm_lid)
    eth = status[8].ports[0]
    assert (eth.link_layer, eth.rate_gbps, eth.speed, eth.port_guid) == ("Ethernet", 40.0, "QDR", "")
    assert len(ib_ports(status)) == 8


def test_ibstatus_has_no_node_guid_for_an_hca() -> None:
    with pytest.raises(ParseError, match="no node GUID"):
        hcas_from_ibstat(parse_ibstatus(read(IBSTATUS)))


def _lines(path: Path) -> list[str]:
    return read(path).splitlines()


def test_truncated_inside_a_port() -> None:
    lines = _lines(H100)
    cut = next(i for i, ln in enumerate(lines) if "Capability mask" in ln and i > 40)
    with pytest.raises(ParseError, match="port 1 has no 'Port GUID' line") as e:
        parse_ibstat("\n".join(lines[:cut]), source="cut.txt")
    assert e.value.line is not None and lines[e.value.line - 1].strip() == "Port 1:"


def test_truncated_after_the_ca_header() -> None:
    lines = _lines(H100)
    with pytest.raises(ParseError, match="CA 'mlx5_1' has no 'CA type' line") as e:
        parse_ibstat("\n".join(lines[:18]))
    assert e.value.line == 18


def test_port_count_mismatch() -> None:
    text = read(H100).replace("Number of ports: 1", "Number of ports: 2", 1)
    with pytest.raises(ParseError, match="declares 2 ports but lists 1") as e:
        parse_ibstat(text)
    assert e.value.line == 3


def test_line_of_another_format() -> None:
    lines = _lines(H100)
    lines.insert(17, "Infiniband device 'mlx5_0' port 1 status:")
    with pytest.raises(ParseError, match="not an ibstat line") as e:
        parse_ibstat("\n".join(lines))
    assert e.value.line == 18


@pytest.mark.parametrize(
    ("parse", "path", "old", "new", "message"),
    [
        (parse_ibstat, H100, "Rate: 400", "Rate: fast", "Rate 'fast' is not a number"),
        (parse_ibstat, H100, "Node GUID: 0x58a2e10300a7820e", "Node GUID: 58a2e10300a7820e", "not a 0x-prefixed"),
        (parse_ibstat, H100, "Base lid: 128", "Base lid: 0x80", "Base lid '0x80' is not a number"),
        (
            parse_ibstatus,
            IBSTATUS,
            "state:           4: ACTIVE",
            "state:           ACTIVE",
            "state 'ACTIVE' is not like",
        ),
        (parse_ibstatus, IBSTATUS, "200 Gb/sec (4X HDR)", "200 Gb/sec (4X ZDR)", "unknown link speed 'ZDR'"),
        (parse_ibstatus, IBSTATUS, "200 Gb/sec (4X HDR)", "200 Gbps", "is not like '400 Gb/sec"),
        (
            parse_ibstatus,
            IBSTATUS,
            "fe80:0000:0000:0000:0015:5dff:fd34:11eb",
            "fe80::15:5dff:fd34:11eb",
            "default gid",
        ),
    ],
)
def test_unknown_tokens_name_source_and_line(
    parse: Callable[..., object], path: Path, old: str, new: str, message: str
) -> None:
    text = read(path)
    line = text[: text.index(old)].count("\n") + 1
    with pytest.raises(ParseError, match=message) as e:
        parse(text.replace(old, new, 1), source="s.txt")
    assert (e.value.source, e.value.line) == ("s.txt", line)


def test_empty_and_bad_encoding(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="no CA found"):
        parse_ibstat("\n\n")
    path = tmp_path / "ibstat.txt"
    data = H100.read_bytes().replace(b"MT41692", b"MT4\xb16", 1)
    path.write_bytes(data)
    with pytest.raises(ParseError, match="not UTF-8") as e:
        read_tool_output(path)
    assert (e.value.source, e.value.line) == (str(path), data[: data.index(b"\xb1")].count(b"\n") + 1)


def test_ibstatus_truncated_and_foreign() -> None:
    lines = _lines(IBSTATUS)
    with pytest.raises(ParseError, match="has no 'rate' line") as e:
        parse_ibstatus("\n".join(lines[:15]))
    assert e.value.line == 10  # the header of mlx5_1's block
    with pytest.raises(ParseError, match="not an ibstatus line"):
        parse_ibstatus(read(H100))
