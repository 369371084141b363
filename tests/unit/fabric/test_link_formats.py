"""iblinkinfo, LST (opensm-subnet.lst / ibdiagnet2.lst) and ibnetdiscover -g: forms and bad input.

Bad input in every new format (truncated, garbled, impossible values) is a ParseError naming the file and line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpupool.domain.errors import ParseError
from gpupool.fabric.parsers.iblinkinfo import parse_iblinkinfo
from gpupool.fabric.parsers.ibnetdiscover import IbImport, parse_ibnetdiscover
from gpupool.fabric.parsers.lst import parse_lst

IBSIM = Path(__file__).resolve().parents[2] / "data" / "ibsim"
CASE = IBSIM / "hosts-1-2-8-hcas"


def lines(name: str) -> list[str]:
    return (CASE / name).read_text().split("\n")


def fail(parse: Callable[..., IbImport], text: str) -> ParseError:
    with pytest.raises(ParseError) as err:
        parse(text, source="out.txt")
    assert err.value.source == "out.txt" and err.value.line is not None
    return err.value


def test_iblinkinfo_rates_and_ports() -> None:
    f = parse_iblinkinfo((CASE / "iblinkinfo.txt").read_text()).fabric
    assert {(x.width, x.speed) for x in f.links} == {(4, "HDR")}
    assert {h.rate_gbps for h in f.hcas} == {200.0}
    leaf = f.switches[f.switch_index("5a0000000000000a")]
    assert (leaf.name, leaf.model, leaf.ports) == ("leaf-su01-rail8", "MQM9700", 12)
    host = f.host("gpu001")
    assert [f.hcas[f.hca_index(g)].name for g in host.hcas] == [f"HCA-{i}" for i in range(1, 9)]


@pytest.mark.parametrize("name", ["iblinkinfo.txt", "iblinkinfo-l.txt"])
def test_iblinkinfo_truncated_mid_line(name: str) -> None:
    text = lines(name)
    n = next(i for i, t in enumerate(text) if "==(" in t and "Active" in t)
    err = fail(parse_iblinkinfo, "\n".join([*text[:n], text[n][:40]]))
    assert err.line == n + 1 and "iblinkinfo" in err.message


def test_iblinkinfo_truncated_before_a_peer_section() -> None:
    text = lines("iblinkinfo.txt")
    head = next(i for i, t in enumerate(text) if t.startswith("Switch:"))
    err = fail(parse_iblinkinfo, "\n".join(text[: head + 3]))
    assert "has no section of its own" in err.message and err.line is not None and err.line <= head + 3


def test_iblinkinfo_garbled_rate_and_missing_lids() -> None:
    text = lines("iblinkinfo.txt")
    n = next(i for i, t in enumerate(text) if "53.125 Gbps" in t)
    text[n] = text[n].replace("53.125 Gbps", "53.124 Gbps")
    err = fail(parse_iblinkinfo, "\n".join(text))
    assert err.line == n + 1 and "unknown lane rate 53.124" in err.message
    no_sm = (
        "CA: n1 mlx5_0:\n"
        '      0x0000000000100004      0    1[  ] ==( 4X           2.5 Gbps Active/  LinkUp)==>       0    1[  ] "sw" ( )\n'
        "Switch: 0x0000000000200001 sw:\n"
        '           0    1[  ] ==( 4X           2.5 Gbps Active/  LinkUp)==>       0    1[  ] "n1 mlx5_0" ( )\n'
    )
    assert "no subnet manager" in fail(parse_iblinkinfo, no_sm).message
    assert "CA's port line must start" in fail(parse_iblinkinfo, no_sm.replace("0x0000000000100004", "")).message


def test_iblinkinfo_down_ports_are_not_links() -> None:
    text = (CASE / "iblinkinfo-l.txt").read_text()
    assert "Down/ Polling" in text
    f = parse_iblinkinfo(text).fabric
    assert len(f.links) == 70


def test_lst_truncated_garbled_and_inconsistent() -> None:
    text = lines("opensm-subnet.lst")
    err = fail(parse_lst, "\n".join([*text[:5], text[5][:120]]))
    assert err.line == 6 and "LST" in err.message
    bad = list(text)
    bad[2] = bad[2].replace("SPD=50", "SPD=51")
    assert fail(parse_lst, "\n".join(bad)).line == 3
    bad = list(text)
    bad[3] = bad[3].replace("{MF0;spine-01:MQM9700/U1}", "{MF0;spine-99:MQM9700/U1}", 1)
    err = fail(parse_lst, "\n".join(bad))
    assert err.line == 4 and "described differently" in err.message
    assert fail(parse_lst, "\n\n").line == 3  # "\n\n" has three (empty) lines; the error points past them


def test_lst_one_sided_link_is_kept_with_a_warning_and_down_links_dropped() -> None:
    text = lines("opensm-subnet.lst")
    imp = parse_lst("\n".join(text[1:]))
    assert any("listed by one side only" in w for w in imp.warnings)
    down = [t.replace("LOG=ACT", "LOG=DWN") if i == 0 else t for i, t in enumerate(text)]
    assert len(parse_lst("\n".join(down)).fabric.links) == 70


def test_ibnetdiscover_grouping_form() -> None:
    g = (IBSIM / "rail8-system-guid" / "ibnetdiscover-g.txt").read_text()
    assert "Chassis 1 (guid 0x" in g and "Non-Chassis Nodes" in g and "# Chassis 1" in g
    plain = parse_ibnetdiscover((IBSIM / "rail8-system-guid" / "ibnetdiscover.txt").read_text()).fabric
    grouped = parse_ibnetdiscover(g).fabric
    assert [(h.guid, h.host, h.system_guid) for h in sorted(grouped.hcas, key=lambda h: h.guid)] == [
        (h.guid, h.host, h.system_guid) for h in sorted(plain.hcas, key=lambda h: h.guid)
    ]
    cut = g.split("\n")
    n = next(i for i, t in enumerate(cut) if t.startswith("caguid="))
    err = fail(parse_ibnetdiscover, "\n".join(cut[: n + 1]) + "\n")
    assert "truncated" in err.message


def test_lst_line_without_description_braces_and_with_old_devid() -> None:
    """ibdiagnet2.lst as seen in the wild: an 8-digit DevID (the old subnet.lst bug) and no {description}."""
    ca = "{ CA Ports:02 SystemGUID:0002c90300165e63 NodeGUID:0002c90300165e60 PortGUID:0002c90300165e61 VenID:000002c9 DevID:1003 Rev:00000000  LID:0005 PN:01 }"
    sw = "{ SW Ports:24 SystemGUID:0002c90300688830 NodeGUID:0002c90300688830 PortGUID:0002c90300688830 VenID:000002c9 DevID:c7380000 Rev:000000a1 {sw-a} LID:0002 PN:14 }"
    f = parse_lst(f"{ca} {sw} PHY=4x LOG=ACT SPD=2.5\n").fabric
    assert [(h.guid, h.description, h.system_guid, h.rate_gbps) for h in f.hcas] == [
        ("0002c90300165e60", "", "0002c90300165e63", 10.0)
    ]
    assert f.switches[0].ports == 0x24 and f.links[0].b.port == 0x14
    assert f.hcas[0].unattributed_reason == "empty node description"


def test_two_sides_printing_different_rates_give_the_slower_with_a_warning() -> None:
    text = (IBSIM / "fat-tree-k4" / "ibnetdiscover.txt").read_text().split("\n")
    n = next(i for i, t in enumerate(text) if t.startswith("[") and '"node001 mlx5_0"' in t)
    text[n] = text[n].replace("4xEDR", "4xQDR")
    imp = parse_ibnetdiscover("\n".join(text))
    assert sorted({x.speed for x in imp.fabric.links}) == ["EDR", "QDR"]
    assert any(f"line {n + 1}: the two sides" in w and "took 4xQDR" in w for w in imp.warnings)
