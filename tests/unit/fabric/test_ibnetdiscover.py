"""ibnetdiscover importer: real dumps in both formats, node-name maps, host attribution, malformed input."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest

from gpupool.domain.errors import ParseError
from gpupool.fabric import Tier
from gpupool.fabric.parsers._text import natural_key
from gpupool.fabric.parsers.attribution import NameSources
from gpupool.fabric.parsers.ibnetdiscover import (
    IbImport,
    parse_ibnetdiscover,
    read_ibnetdiscover,
    split_description,
)
from gpupool.fabric.parsers.nodemap import parse_node_name_map, read_node_name_map

DATA = Path(__file__).resolve().parents[2] / "data"
DEFAULT = DATA / "ibnetdiscover"
PORTS = DATA / "ibnetdiscover-p"
DGX = DEFAULT / "dgx-h100-ndr-superpod-qm9701-leaf-spine.txt"
STAGE = DEFAULT / "stage-cluster-2014-sx6036-fdr10-8switch.txt"
GB200 = DEFAULT / "dgx-gb200-single-ca-isolated-edgecase.txt"
HDR = PORTS / "hdr-leaf-spine-aggnode-treydock-test2.txt"
OSC = PORTS / "osc-edr-excerpt-treydock-test.txt"
QDR = PORTS / "qdr-unquoted-desc-edgecase-treydock-test3.txt"


@pytest.fixture(scope="module")
def dgx() -> IbImport:
    return read_ibnetdiscover(DGX)


def host_devices(imp: IbImport, host: str) -> list[str]:
    f = imp.fabric
    return [f.hcas[f.hca_index(g)].name for g in f.host(host).hcas]


# ------------------------------------------------------------------------------------------ DGX H100 SuperPOD


def test_dgx_switch_tiers_and_names(dgx: IbImport) -> None:
    f = dgx.fabric
    assert len(f.switches_at(Tier.LEAF)) == 31
    assert len(f.switches_at(Tier.SPINE)) == 9
    assert len(f.switches) == 40 and len(f.links) == 1074
    leaf = f.switches[f.switch_index("2c5eab0300b87b40")]
    assert (leaf.name, leaf.model, leaf.ports, leaf.lid, leaf.tier) == (
        "A09-P1-IBLEAF-04-04",
        "MQM9701",
        65,
        73,
        Tier.LEAF,
    )
    assert {f.switches[s].name.split("-")[2] for s in f.switches_at(Tier.SPINE)} == {"IBSPINE"}


def test_dgx_aggregation_nodes_are_not_hosts(dgx: IbImport) -> None:
    f = dgx.fabric
    assert dgx.aggregation_nodes == 40
    assert not [h for h in f.hcas if "Aggregation" in h.description]
    assert "2c5eab0300b87b50" not in {p.node for link in f.links for p in (link.a, link.b)}
    assert len(f.hcas) == 582 - 40


def test_dgx_named_hcas_grouped_under_hosts_in_device_order(dgx: IbImport) -> None:
    f = dgx.fabric
    assert f.host("a07-p1-dgx-03-c05").hcas == (
        "e09d730300857a64",  # HCA-1
        "e09d730300857a68",  # HCA-2
        "e09d7303008587c4",  # HCA-5
        "e09d7303008587c8",  # HCA-6
    )
    assert f.host("a07-p1-dgx-03-c05").gpus == ()
    assert host_devices(dgx, "a08-p1-dgx-04-c17") == ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5"]
    hca = f.hcas[f.hca_index("e09d7303007a5a68")]
    assert (hca.name, hca.host, hca.lid, hca.rate_gbps) == ("mlx5_5", "a08-p1-dgx-04-c17", 657, 400.0)
    # The UFM server is a real (named) host with two HCAs.
    assert host_devices(dgx, "B11-P1-CUFM-02") == ["mlx5_0", "mlx5_1"]
    assert len(f.hosts) == 120
    names = [h.name for h in f.hosts]
    assert names == sorted(names, key=natural_key)
    assert names.index("a07-p1-dgx-03-c09") < names.index("a07-p1-dgx-03-c10")


def test_dgx_rails_and_scalable_units(dgx: IbImport) -> None:
    f = dgx.fabric
    # The dump shows 8 host groups (dgx-01..08, leaf names IBLEAF-<rail>-<group>), each on its own 4 rail
    # leaves (HCA-1/2/5/6, or mlx5_0/1/4/5): no host reaches a leaf of another group. IBLEAF-03-01 is
    # absent, so group 01 has 3 leaves. The other four HCAs of each DGX are not in this fabric.
    assert f.rail_count == 4
    assert len(f.su_leaves) == 8
    assert sorted(len(su) for su in f.su_leaves) == [3, 4, 4, 4, 4, 4, 4, 4]
    for su in f.su_leaves:
        groups = {f.switches[s].name.rsplit("-", 1)[1] for s in su}
        assert len(groups) == 1
    c05 = f.host_index("a07-p1-dgx-03-c05")
    assert sorted(int(f.rail_of_hca(f.hca_index(g))) for g in f.hosts[c05].hcas) == [0, 1, 2, 3]


def test_dgx_unattributed_hcas_are_counted_and_explained(dgx: IbImport) -> None:
    # 69 generic "MT4129 ConnectX7" descriptions, 3 "localhost HCA-n" and 2 "ubuntu mlx5_n".
    # The rail-sibling rule finds no unambiguous case here: every candidate either has siblings that are
    # generic too, siblings naming two different hosts, or a host already present on its leaf.
    assert dgx.unattributed_hcas == 74 == len(dgx.fabric.unattributed_hcas)
    assert dgx.inferred_hcas == 0
    kinds = Counter(split_description(h.description)[2] for h in dgx.fabric.unattributed_hcas)
    assert kinds == {"generic": 69, "default-host": 5}
    localhost = [h for h in dgx.fabric.hcas if h.description.startswith("localhost")]
    assert sorted(h.name for h in localhost) == ["HCA-1", "HCA-2", "HCA-6"]
    assert all(h.host is None for h in localhost)
    assert any("69 HCAs with the generic description" in w for w in dgx.warnings)
    assert any("localhost, ubuntu" in w for w in dgx.warnings)


# ------------------------------------------------------------------------------------------ other fixtures


def test_stage_cluster_fdr10() -> None:
    imp = read_ibnetdiscover(STAGE)
    f = imp.fabric
    assert (len(f.switches), len(f.hcas), len(f.links)) == (8, 144, 192)
    assert Counter((link.width, link.speed) for link in f.links) == {(4, "QDR"): 145, (4, "FDR10"): 47}
    assert {(s.name, s.model) for s in f.switches} == {(f"ib{i}", "SX6036") for i in range(1, 9)}
    assert [f.switches[s].name for s in f.switches_at(Tier.SPINE)] == ["ib8"]
    # Node GUID, not the port GUID printed in parentheses; the short "(2c903002db103)" is zero-padded.
    atlas = f.hcas[f.hca_index("0002c903002db102")]
    assert (atlas.host, atlas.name, atlas.rate_gbps) == ("atlas", "mlx4_0", 40.0)
    tank1 = f.hcas[f.hca_index("f452140300081a20")]  # both ports cabled: one HCA, two links
    assert sum(tank1.guid in (link.a.node, link.b.node) for link in f.links) == 2
    names = [h.name for h in f.hosts]
    assert names.index("stage98") < names.index("stage100")
    assert imp.warnings == ()


def test_gb200_isolated_ca_is_a_valid_fabric() -> None:
    imp = read_ibnetdiscover(GB200)
    f = imp.fabric
    assert (len(f.switches), len(f.hcas), len(f.links)) == (0, 1, 0)
    assert f.hosts[0].name == "dgx-gb200-n01-c1" and f.hosts[0].hcas == ("b8e92403009ca838",)


def test_ports_report_hdr_with_aggregation_node() -> None:
    imp = read_ibnetdiscover(HDR)
    f = imp.fabric
    assert (len(f.switches), len(f.hcas), len(f.links)) == (5, 1, 1)
    assert imp.aggregation_nodes == 1
    names = {s.guid: s.name for s in f.switches}
    assert names["946dae0300618c83"] == "5FB0406-spine-IB02"  # ' 5FB0406-spine-IB02 ' in the dump
    assert names["0002c9020040f160"] == "Infiniscale-IV Mellanox Technologies"
    leaf = f.switches[f.switch_index("946dae0300630bf6")]
    assert (leaf.name, leaf.ports, leaf.lid, leaf.tier) == ("5FB0405-leaf-IB01", 81, 51, Tier.LEAF)
    assert f.hosts[0].name == "worker20" and f.hcas[0].name == "mlx5_3" and f.hcas[0].rate_gbps == 200.0


def test_ports_report_osc_links_deduplicated() -> None:
    imp = read_ibnetdiscover(OSC)
    f = imp.fabric
    assert (len(f.switches), len(f.hcas), len(f.links)) == (4, 3, 4)
    assert [h.name for h in f.hosts] == ["o0001", "o0002", "p0001"]
    assert {h.rate_gbps for h in f.hcas} == {100.0}
    assert f.switches[f.switch_index("506b4b03005c2740")].ports == 37  # the '4x ???' port with no peer
    assert len(f.switches_at(Tier.LEAF)) == 2 and imp.unattributed_hcas == 0


def test_ports_report_unquoted_description() -> None:
    f = read_ibnetdiscover(QDR).fabric
    assert (len(f.switches), len(f.hcas), len(f.links)) == (1, 0, 0)
    sw = f.switches[0]
    assert (sw.guid, sw.name, sw.ports, sw.lid) == ("0002c9020040f161", "Infiniscale-IV Mellanox Technologies", 22, 479)


UNKNOWN_SIDE = "SW     1  1 0x0000000000000001 4x ???   - CA     2  1 0x0000000000000002 ( 'sw' - 'h1 mlx5_0' )"
KNOWN_SIDE = "CA     2  1 0x0000000000000002 4x NDR   - SW     1  1 0x0000000000000001 ( 'h1 mlx5_0' - 'sw' )"


def test_unknown_speed_taken_from_the_other_side() -> None:
    imp = parse_ibnetdiscover(f"{UNKNOWN_SIDE}\n{KNOWN_SIDE}\n")
    assert [(link.width, link.speed) for link in imp.fabric.links] == [(4, "NDR")]
    assert imp.warnings == () and imp.fabric.hcas[0].rate_gbps == 400.0


def test_unknown_speed_on_both_sides_is_assumed_slowest_and_said() -> None:
    imp = parse_ibnetdiscover(UNKNOWN_SIDE + "\n")
    assert [(link.width, link.speed) for link in imp.fabric.links] == [(4, "SDR")]
    assert len(imp.warnings) == 1 and "line 1" in imp.warnings[0] and "assumed 4xSDR" in imp.warnings[0]


# ------------------------------------------------------------------------------------------ node-name map


def test_node_name_map_renames_a_switch_and_a_ca(tmp_path: Path) -> None:
    nmap = tmp_path / "names.map"
    nmap.write_text(
        "# site names\n"
        "\n"
        '0xf4521403001165a0 "MF0;edge-5:SX6036/U1"\n'
        '24be05ffff980030   "login01 mlx4_0"  # was stage114\n'
        "0x0000000000000042 ignored-not-in-dump\n"
    )
    f = read_ibnetdiscover(
        STAGE, names=NameSources(node_names=read_node_name_map(nmap)), allow_unknown_guids=True
    ).fabric
    sw = f.switches[f.switch_index("f4521403001165a0")]
    assert (sw.name, sw.model) == ("edge-5", "SX6036")
    hca = f.hcas[f.hca_index("24be05ffff980030")]
    assert (hca.description, hca.host) == ("login01 mlx4_0", "login01")
    assert f.has_host("login01") and not f.has_host("stage114")


def test_parse_node_name_map_format() -> None:
    text = '# c\n\n0x2C9 "a b"\n0002c903002db102 plain name # trailing\n  0x10\t"q#x" rest\n'
    assert parse_node_name_map(text, source="m") == {
        "00000000000002c9": "a b",
        "0002c903002db102": "plain name",
        "0000000000000010": "q#x",
    }


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('0x1 "a"\nzz "b"\n', 2, "hexadecimal node GUID"),
        ("0x1\n", 1, "has no name"),
        ('0x1 "a"\n\n0x01 "b"\n', 3, "mapped twice (first on line 1)"),
        ('0x1 "never closed\n', 1, "never closes"),
        ('0x12345678901234567 "too long"\n', 1, "hexadecimal node GUID"),
    ],
)
def test_parse_node_name_map_errors(text: str, line: int, words: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_node_name_map(text, source="site.map")
    assert err.value.source == "site.map" and err.value.line == line and words in err.value.message


def test_node_name_map_bad_encoding(tmp_path: Path) -> None:
    path = tmp_path / "bad.map"
    path.write_bytes(b'0x1 "a"\n0x2 "b\xff"\n')
    with pytest.raises(ParseError) as err:
        read_node_name_map(path)
    assert err.value.source == str(path) and err.value.line == 2


# ------------------------------------------------------------------------------------------ host attribution


def topology(switches: dict[str, str], cas: dict[str, str], links: list[tuple[str, int, str, int]]) -> str:
    """A default-format dump as ibnetdiscover writes it: a block per node, every link from both sides."""
    lid = {g: i + 1 for i, g in enumerate([*switches, *cas])}
    ends: dict[str, list[tuple[int, str, int]]] = defaultdict(list)
    for a, pa, b, pb in links:
        ends[a].append((pa, b, pb))
        ends[b].append((pb, a, pa))

    def ref(g: str) -> str:
        return f'"S-{g}"' if g in switches else f'"H-{g}"'

    def desc(g: str) -> str:
        return switches[g] if g in switches else cas[g]

    out = ["#", "# Topology file: written by a test", "#"]
    for g, d in switches.items():
        out += ["", "vendid=0x2c9", "devid=0xd2f2", f"sysimgguid=0x{g}", f"switchguid=0x{g}({g})"]
        out.append(f'Switch\t36 "S-{g}"\t\t# "{d}" enhanced port 0 lid {lid[g]} lmc 0')
        for p, r, rp in sorted(ends[g]):
            out.append(f'[{p}]\t{ref(r)}[{rp}]{f"({r}) " if r in cas else ""}\t\t# "{desc(r)}" lid {lid[r]} 4xNDR')
    for g, d in cas.items():
        out += ["", "vendid=0x2c9", "devid=0x1021", f"sysimgguid=0x{g}", f"caguid=0x{g}", f'Ca\t1 "H-{g}"\t\t# "{d}"']
        for p, r, rp in sorted(ends[g]):
            out.append(f'[{p}]({g}) \t{ref(r)}[{rp}]\t\t# lid {lid[g]} lmc 0 "{desc(r)}" lid {lid[r]} 4xNDR')
    return "\n".join(out) + "\n"


GENERIC = "MT4129 ConnectX7   Mellanox Technologies"


def rail_su(overrides: dict[tuple[int, int], tuple[str, int]]) -> str:
    """Hosts n1..n4, HCA mlx5_<r> of host i on rail leaf r (0..2) port i, one spine above the leaves.

    ``overrides[(rail, host)] = (description, port)`` changes one HCA's description or leaf port.
    """
    leaves = {f"{0xA0 + r:016x}": f"leaf-r{r}" for r in range(3)}
    spine = {f"{0xB0:016x}": "spine"}
    cas: dict[str, str] = {}
    links: list[tuple[str, int, str, int]] = []
    for r, leaf in enumerate(leaves):
        links.append((leaf, 30, f"{0xB0:016x}", r + 1))
        for i in range(1, 5):
            guid = f"{i:08x}{r:08x}"
            desc, port = overrides.get((r, i), (f"n{i} mlx5_{r}", i))
            cas[guid] = desc
            links.append((leaf, port, guid, 1))
    return topology({**leaves, **spine}, cas, links)


def test_generic_hca_attributed_by_rail_siblings() -> None:
    imp = parse_ibnetdiscover(rail_su({(1, 3): (GENERIC, 3)}))
    assert imp.inferred_hcas == 1 and imp.unattributed_hcas == 0
    f = imp.fabric
    assert f.host("n3").hcas == ("0000000300000000", "0000000300000001", "0000000300000002")
    assert f.hcas[f.hca_index("0000000300000001")].name == ""  # the description names no device
    assert any("attributed to host n3" in w and "leaf-r1 port 3" in w for w in imp.warnings)
    assert f.rail_count == 3


def test_siblings_that_disagree_leave_the_hca_unattributed() -> None:
    # Port 3 of rail 2 carries n1 (miscabled), so rail 1's generic HCA at port 3 has two candidate hosts.
    imp = parse_ibnetdiscover(rail_su({(1, 3): (GENERIC, 3), (2, 3): ("n1 mlx5_2", 3), (2, 1): ("n3 mlx5_2", 1)}))
    assert imp.inferred_hcas == 0 and imp.unattributed_hcas == 1
    assert imp.fabric.unattributed_hcas[0].guid == "0000000300000001"


def test_no_inference_for_a_host_already_on_the_leaf() -> None:
    # n4's rail-1 HCA sits on port 3 (where n3 belongs); the generic HCA on port 4 of rail 1 would point at
    # n4, but n4 already has an HCA on that leaf.
    overrides = {(1, 4): ("n4 mlx5_1", 3), (1, 3): (GENERIC, 4)}
    imp = parse_ibnetdiscover(rail_su(overrides))
    assert imp.inferred_hcas == 0 and imp.unattributed_hcas == 1


def test_two_generic_hcas_pointing_at_one_host_on_one_leaf_are_both_refused() -> None:
    # Ports 3 and 4 of the sibling leaves both carry n3, so both generic HCAs of rail 1 would go to n3.
    overrides = {(1, 3): (GENERIC, 3), (1, 4): (GENERIC, 4), (0, 4): ("n3 mlx5_7", 4), (2, 4): ("n3 mlx5_8", 4)}
    imp = parse_ibnetdiscover(rail_su(overrides))
    assert imp.inferred_hcas == 0 and imp.unattributed_hcas == 2


def test_default_and_duplicated_host_names_are_not_hosts() -> None:
    text = rail_su({(0, 1): ("ubuntu mlx5_0", 1), (0, 2): ("n3 mlx5_2", 2)})
    imp = parse_ibnetdiscover(text)
    f = imp.fabric
    assert not f.has_host("ubuntu")
    assert not f.has_host("n3")  # two machines call themselves "n3 mlx5_2"
    assert any("used by more than one machine" in w and "n3" in w for w in imp.warnings)
    ubuntu = f.hcas[f.hca_index("0000000100000000")]
    assert (ubuntu.name, ubuntu.host) == ("mlx5_0", "n1")  # its rail siblings at port 1 are all n1


@pytest.mark.parametrize(
    ("description", "expected"),
    [
        ("a08-p1-dgx-04-c17 mlx5_5", ("a08-p1-dgx-04-c17", "mlx5_5", "named")),
        ("a06-p1-dgx-02-c01 HCA-6", ("a06-p1-dgx-02-c01", "HCA-6", "named")),
        ("localhost HCA-1", (None, "HCA-1", "default-host")),
        (GENERIC, (None, "", "generic")),
        ("MT4129 ConnectX7", (None, "", "generic")),
        ("Mellanox Technologies Aggregation Node", (None, "", "generic")),
        ("", (None, "", "generic")),
    ],
)
def test_split_description(description: str, expected: tuple[str | None, str, str]) -> None:
    assert split_description(description) == expected


# ------------------------------------------------------------------------------------------ malformed input


def fail(text: str) -> ParseError:
    with pytest.raises(ParseError) as err:
        parse_ibnetdiscover(text, source="dump.txt")
    assert err.value.source == "dump.txt"
    return err.value


def stage_lines() -> list[str]:
    return STAGE.read_text().split("\n")


def test_truncated_mid_line() -> None:
    lines = stage_lines()
    assert lines[19].startswith("[10]")
    err = fail("\n".join([*lines[:19], lines[19][:30]]))
    assert err.line == 20 and "port line" in err.message


def test_truncated_after_a_block_header() -> None:
    lines = stage_lines()
    assert lines[43].startswith("vendid=")
    err = fail("\n".join(lines[:46]) + "\n")
    assert err.line == 46 and "block starting on line 44" in err.message and "truncated" in err.message


def test_truncated_before_a_linked_node_block() -> None:
    # Cut the dump after the first switch: its port lines name nodes that never get a block.
    err = fail("\n".join(stage_lines()[:41]) + "\n")
    assert err.line == 11 and "no block of its own" in err.message


def test_link_to_undeclared_node() -> None:
    lines = stage_lines()
    lines[10] = lines[10].replace("24be05ffff980030", "24be05ffff98ffff", 1)
    err = fail("\n".join(lines))
    assert err.line == 11 and "24be05ffff98ffff" in err.message


def test_a_line_of_another_format() -> None:
    lines = stage_lines()
    lines.insert(20, "CA   134  1 0x7cfe9003003b4bde 4x EDR - SW  1719 10 0x7cfe9003009ce5b0 ( 'a' - 'b' )")
    assert fail("\n".join(lines)).line == 21
    ports = OSC.read_text().split("\n")
    ports.insert(2, 'Switch\t36 "S-f4521403001165a0"\t\t# "x" enhanced port 0 lid 1 lmc 0')
    err = fail("\n".join(ports))
    assert err.line == 3 and "-p report" in err.message


def test_contradicting_sides_of_a_link() -> None:
    text = STAGE.read_text().replace('"S-f4521403001165a0"[14]', '"S-f4521403001165a0"[13]', 1)
    err = fail(text)
    assert "is linked to" in err.message and err.line is not None


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ('[40]\t"H-24be05ffff980030"[1](24be05ffff980031) \t\t# "x" lid 1 4xQDR', "outside 1..36"),
        ('[1]\t"H-24be05ffff980030"[1](24be05ffff980031) \t\t# "x" lid 1 4xQQR', "unknown link rate"),
    ],
)
def test_bad_port_lines(bad: str, words: str) -> None:
    lines = stage_lines()
    lines[10] = bad
    err = fail("\n".join(lines))
    assert err.line == 11 and words in err.message


def test_empty_input() -> None:
    assert fail("#\n# Topology file\n#\n").line == 3


def test_bad_encoding_names_file_and_line(tmp_path: Path) -> None:
    data = STAGE.read_bytes().split(b"\n")
    data[11] = data[11].replace(b"stage112", b"stage\xff12")
    path = tmp_path / "topo.txt"
    path.write_bytes(b"\n".join(data))
    with pytest.raises(ParseError) as err:
        read_ibnetdiscover(path)
    assert err.value.source == str(path) and err.value.line == 12 and "UTF-8" in err.value.message
