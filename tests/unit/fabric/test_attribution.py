"""Host attribution: every naming form real sites use, in its order of trust, and a property test over
generated fabrics in random naming styles (host count, Slurm leaf partition, lossless round trip)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabric_naming import GENERIC, STYLES, link_set, slurm_partition, styled
from gpupool.domain.errors import ParseError
from gpupool.fabric import Fabric, generators, jsonio
from gpupool.fabric.export.ibnetdiscover import to_ibnetdiscover
from gpupool.fabric.export.slurm import topology_conf
from gpupool.fabric.parsers.attribution import NameSources, split_description, strip_domain
from gpupool.fabric.parsers.ibnetdiscover import IbImport, parse_ibnetdiscover
from gpupool.fabric.parsers.nodemap import parse_host_map, parse_node_name_map


def assert_found(imp: IbImport, truth: Fabric) -> None:
    f = imp.fabric
    assert len(f.hosts) == len(truth.hosts)
    assert {h.name: set(h.hcas) for h in f.hosts} == {h.name: set(h.hcas) for h in truth.hosts}
    assert imp.unattributed_hcas == 0
    assert slurm_partition(f) == slurm_partition(truth)
    # import -> export -> import: the same fabric, through both the JSON and the ibnetdiscover text
    again = parse_ibnetdiscover(to_ibnetdiscover(f), source="<again>").fabric
    assert [(h.name, h.hcas) for h in again.hosts] == [(h.name, h.hcas) for h in f.hosts]
    assert link_set(again) == link_set(f) and again.switches == f.switches
    assert jsonio.to_dict(jsonio.from_dict(jsonio.to_dict(f))) == jsonio.to_dict(f)


# ------------------------------------------------------------------------------------------ the forms


@pytest.mark.parametrize(
    ("description", "expected"),
    [
        ("node12 HCA-1", ("node12", "HCA-1", "named")),
        ("gpu-a01.cluster.local mlx5_0", ("gpu-a01.cluster.local", "mlx5_0", "named")),
        ("dgx042/U1", ("dgx042", "U1", "named")),
        ("r510gluster1", ("r510gluster1", "", "named")),
        ("n\u0153ud01 mlx5_0", ("n\u0153ud01", "mlx5_0", "named")),
        ("knl17 hfi1_0", ("knl17", "hfi1_0", "named")),
        ("c3 ibp65s0f1", ("c3", "ibp65s0f1", "named")),
        ("old7 mlx4_0", ("old7", "mlx4_0", "named")),
        ("mlx5_0", (None, "", "generic")),  # a device alone names no host
        ("MT25408 ConnectX Mellanox Technologies", (None, "", "generic")),
        ("MT25408", (None, "", "generic")),
        ("localhost", (None, "", "default-host")),
        ("dgx042/", (None, "", "generic")),
        ("_x mlx5_0", (None, "", "generic")),
    ],
)
def test_split_description_forms(description: str, expected: tuple[str | None, str, str]) -> None:
    assert split_description(description) == expected


def test_strip_domain() -> None:
    assert strip_domain("gpu-a01.cluster.local", "cluster.local") == "gpu-a01"
    assert strip_domain("gpu-a01.cluster.local", ".cluster.local") == "gpu-a01"
    assert strip_domain("gpu-a01.other.org", "cluster.local") == "gpu-a01.other.org"
    assert strip_domain("gpu-a01.x.y", "*") == "gpu-a01"
    assert strip_domain("gpu-a01.x.y", "") == "gpu-a01.x.y"


def small_fabric() -> Fabric:
    return generators.leaf_spine(2, 1, 2, gpus_per_host=0)


def test_vendor_descriptions_with_a_bare_name_map_import_every_host() -> None:
    """The issue's case: 'MT25408 ConnectX Mellanox Technologies' CAs, a map of bare names -> 4 hosts, not 0."""
    f = small_fabric()
    dump = Fabric(
        switches=f.switches,
        hcas=[h.__class__(h.guid, description="MT25408 ConnectX Mellanox Technologies") for h in f.hcas],
        hosts=[],
        links=f.links,
    )
    text = to_ibnetdiscover(dump)
    assert parse_ibnetdiscover(text).fabric.hosts == ()
    nmap = "".join(f'0x{h.guid} "r510gluster{i}"\n' for i, h in enumerate(f.hcas))
    imp = parse_ibnetdiscover(text, names=NameSources(node_names=parse_node_name_map(nmap, source="m")))
    assert [h.name for h in imp.fabric.hosts] == [f"r510gluster{i}" for i in range(4)]
    assert {h.found_by for h in imp.fabric.hcas} == {"node-name-map"}
    assert "SwitchName=leaf-01 Nodes=r510gluster[0-1]" in topology_conf(imp.fabric)


def test_order_of_trust_host_map_over_node_name_map_over_description() -> None:
    f = small_fabric()
    a, b, c, _ = (h.guid for h in f.hcas)
    st_ = styled(f, "described")
    names = NameSources(
        node_names=parse_node_name_map(f'0x{a} "mapped-a"\n0x{b} "mapped-b"\n', source="m"),
        host_map=parse_host_map(f"0x{a} hostmap-a\n", source="h"),
    )
    imp = parse_ibnetdiscover(to_ibnetdiscover(st_.dump), names=names)
    by_guid = {h.guid: h for h in imp.fabric.hcas}
    assert (by_guid[a].host, by_guid[a].found_by) == ("hostmap-a", "host-map")
    assert (by_guid[b].host, by_guid[b].found_by) == ("mapped-b", "node-name-map")
    assert (by_guid[c].host, by_guid[c].found_by) == ("node003", "description")
    assert by_guid[a].name == "mlx5_0"  # the device still comes from the HCA's own description
    assert any("2 HCAs named by a map whose own description names another host" in w for w in imp.warnings)


def test_system_image_guid_groups_hcas_of_one_host() -> None:
    f = generators.rail_optimised(1, 3, 4, 1, speed="HDR")
    st_ = styled(f, "system-guid")
    imp = parse_ibnetdiscover(to_ibnetdiscover(st_.dump))
    assert_found(imp, st_.truth)
    counts = {m: sum(1 for h in imp.fabric.hcas if h.found_by == m) for m in ("description", "system-image-guid")}
    assert counts == {"description": 3, "system-image-guid": 9}


def test_a_system_image_guid_shared_by_two_hosts_attributes_nothing() -> None:
    f = small_fabric()
    hcas = list(f.hcas)
    hcas[0] = hcas[0].__class__(hcas[0].guid, description="node001 mlx5_0", system_guid="00000000000000aa")
    hcas[1] = hcas[1].__class__(hcas[1].guid, description="node002 mlx5_0", system_guid="00000000000000aa")
    hcas[2] = hcas[2].__class__(hcas[2].guid, description=GENERIC, system_guid="00000000000000aa")
    dump = Fabric(switches=f.switches, hcas=hcas, hosts=[], links=f.links)
    imp = parse_ibnetdiscover(to_ibnetdiscover(dump))
    assert imp.fabric.hcas[2].host is None and "generic description" in imp.fabric.hcas[2].unattributed_reason
    assert any("shared by HCAs of different hosts" in w for w in imp.warnings)


def test_every_unattributed_hca_says_why() -> None:
    f = small_fabric()
    descs = ["localhost mlx5_0", GENERIC, "", "mlx5_0"]
    dump = Fabric(
        switches=f.switches,
        hcas=[h.__class__(h.guid, description=d) for h, d in zip(f.hcas, descs, strict=True)],
        hosts=[],
        links=f.links,
    )
    reasons = [h.unattributed_reason for h in parse_ibnetdiscover(to_ibnetdiscover(dump)).fabric.hcas]
    assert reasons == [
        "default host name 'localhost' identifies no machine",
        f"generic description {GENERIC!r}",
        "empty node description",
        "generic description 'mlx5_0'",
    ]


def test_a_bare_name_is_one_host_with_several_hcas() -> None:
    f = generators.rail_optimised(1, 2, 2, 1, speed="HDR")
    st_ = styled(f, "node-name-map")
    imp = parse_ibnetdiscover(to_ibnetdiscover(st_.dump), names=st_.names())
    assert_found(imp, st_.truth)


# ------------------------------------------------------------------------------------------ maps: bad input


def map_error(text: str, dump_fabric: Fabric | None = None, *, host_map: bool = False) -> ParseError:
    f = dump_fabric or small_fabric()
    with pytest.raises(ParseError) as err:
        parsed = parse_host_map(text, source="site.map") if host_map else parse_node_name_map(text, source="site.map")
        names = NameSources(host_map=parsed) if host_map else NameSources(node_names=parsed)
        parse_ibnetdiscover(to_ibnetdiscover(f), names=names)
    assert err.value.source == "site.map"
    return err.value


def test_a_map_naming_a_guid_not_in_the_dump_is_an_error_at_its_line() -> None:
    f = small_fabric()
    text = f'0x{f.hcas[0].guid} "a"\n# comment\n0x00000000deadbeef "ghost"\n'
    err = map_error(text, f)
    assert err.line == 3 and "00000000deadbeef is not in the fabric" in err.message
    err = map_error(f"0x{f.hcas[0].guid},a\n0xdeadbeef,ghost\n", f, host_map=True)
    assert err.line == 2
    # a site-wide map may list nodes this dump lacks when the caller says so
    names = NameSources(node_names=parse_node_name_map(text, source="site.map"))
    imp = parse_ibnetdiscover(to_ibnetdiscover(f), names=names, allow_unknown_guids=True)
    assert any("1 map entries name GUIDs that are not in the dump" in w for w in imp.warnings)


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("guid,host\n0x1,a\n0x2\n", 3, "two columns"),  # truncated row
        ("0x1 a\n0x2\n", 2, "expected 'GUID host"),  # truncated line
        ("0x1,a\nzz,b\n", 2, "expected a node GUID"),  # garbled GUID
        ("0x1 a\n0x1 b\n", 2, "mapped twice (first on line 1)"),
        ("0x1,a b\n", 1, "is not a host name"),
        ("0x1,\n", 1, "has no host name"),
    ],
)
def test_host_map_errors(text: str, line: int, words: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_host_map(text, source="hosts.csv")
    assert (err.value.source, err.value.line) == ("hosts.csv", line) and words in err.value.message


def test_host_map_forms() -> None:
    assert parse_host_map("# c\nguid,host\n0x2C9,a\n0002c903002db102,b\n", source="x") == {
        "00000000000002c9": "a",
        "0002c903002db102": "b",
    }
    hosts = parse_host_map("0x10 login1 login1.site  # alias ignored\n58a2:e103:00a7:820e n\u0153ud\n", source="x")
    assert hosts == {"0000000000000010": "login1", "58a2e10300a7820e": "n\u0153ud"}
    assert hosts.lines == {"0000000000000010": 1, "58a2e10300a7820e": 2}


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('Ca\t: 0x0002c903002db102 ports 1 "atlas mlx4_0"\nCa\t: 0x0002c903002db10', 2, "ibhosts"),
        ('Switch\t: 0x0002c903002db102 ports 36 "sw1"\n', 1, "port 0 lid"),
        ('Ca\t: 0x1 ports 1 "a"\nCa\t: 0x1 ports 1 "b"\n', 2, "mapped twice"),
    ],
)
def test_ibhosts_as_a_name_source_errors(text: str, line: int, words: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_node_name_map(text, source="hosts.txt")
    assert err.value.line == line and words in err.value.message


def test_ibhosts_and_ibswitches_as_name_sources() -> None:
    text = (
        'Ca\t: 0x0002c903002db102 ports 1 "atlas mlx4_0"\n'
        'Switch\t: 0xf4521403001165a0 ports 36 "MF0;ib1:SX6036/U1" enhanced port 0 lid 3 lmc 0\n'
    )
    assert parse_node_name_map(text, source="x") == {
        "0002c903002db102": "atlas mlx4_0",
        "f4521403001165a0": "MF0;ib1:SX6036/U1",
    }


# ------------------------------------------------------------------------------------------ property test


@st.composite
def generated(draw: st.DrawFn) -> Fabric:
    if draw(st.booleans()):
        return generators.fat_tree(draw(st.sampled_from([2, 4, 6])), gpus_per_host=0)
    return generators.rail_optimised(
        sus=draw(st.integers(1, 3)),
        hosts_per_su=draw(st.integers(1, 6)),
        rails=draw(st.integers(1, 8)),
        spines=draw(st.integers(1, 4)),
        speed=draw(st.sampled_from(["HDR", "NDR", "EDR"])),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabric=generated(), style=st.sampled_from(STYLES), seed=st.integers(0, 1000))
def test_every_naming_style_of_every_generated_fabric_imports_to_the_ground_truth(
    fabric: Fabric, style: str, seed: int
) -> None:
    st_ = styled(fabric, style, seed)
    imp = parse_ibnetdiscover(to_ibnetdiscover(st_.dump), names=st_.names())
    assert_found(imp, st_.truth)


def test_round_trip_keeps_attribution_facts(tmp_path: Path) -> None:
    st_ = styled(generators.rail_optimised(2, 2, 2, 1), "system-guid")
    f = parse_ibnetdiscover(to_ibnetdiscover(st_.dump)).fabric
    jsonio.save(f, tmp_path / "f.json")
    back = jsonio.load(tmp_path / "f.json")
    assert [(h.system_guid, h.found_by, h.unattributed_reason) for h in back.hcas] == [
        (h.system_guid, h.found_by, h.unattributed_reason) for h in f.hcas
    ]
