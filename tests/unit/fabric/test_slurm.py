from pathlib import Path

import pytest

from builders import make_fabric
from gpupool.domain.errors import ParseError
from gpupool.fabric import Fabric, Hca, Host, Link, Port, Switch, Tier
from gpupool.fabric import generators as gen
from gpupool.fabric.export.slurm import block_sizes, slurm_name, topology_block, topology_conf
from gpupool.fabric.hostlist import expand
from gpupool.fabric.parsers.slurm import (
    SlurmTree,
    parse_block_conf,
    parse_slurm_topology,
    parse_topology_conf,
    read_block_conf,
    read_topology_conf,
)

DATA = Path(__file__).parents[2] / "data" / "slurm-topology"
TREE = DATA / "topograph-expected-tree-oci-sim.conf.txt"
BLOCK = DATA / "topograph-expected-block-dra.conf.txt"

Partition = set[frozenset[str]]


def leaf_partition(f: Fabric) -> Partition:
    return {frozenset(f.hosts[h].name for h in hosts) for hosts in f.leaf_hosts.values()}


def su_partition(f: Fabric) -> Partition:
    return {frozenset(f.hosts[h].name for s in leaves for h in f.leaf_hosts[s]) for leaves in f.su_leaves}


def children(f: Fabric) -> dict[str, set[str]]:
    """Switch name -> names of the switches one tier below it."""
    out: dict[str, set[str]] = {}
    switch_guids = {s.guid for s in f.switches}
    for link in f.links:
        if link.a.node in switch_guids and link.b.node in switch_guids:
            a, b = f.switches[f.switch_index(link.a.node)], f.switches[f.switch_index(link.b.node)]
            lo, hi = (a, b) if a.tier < b.tier else (b, a)
            out.setdefault(hi.name, set()).add(lo.name)
    return out


# ---------------------------------------------------------------- the real fixtures


def test_topograph_tree_fixture_imports_as_three_tiers() -> None:
    f = read_topology_conf(TREE)
    assert len(f.hosts) == 96 and f.gpu_count == 0
    assert [len(f.switches_at(t)) for t in (Tier.LEAF, Tier.SPINE, Tier.CORE)] == [12, 6, 1]
    # Topograph's "# switch.1.1=leaf-1-1" comments give each switch its real name back.
    leaves = {f.switches[s].name: [f.hosts[h].name for h in hs] for s, hs in f.leaf_hosts.items()}
    assert leaves["leaf-1-1"] == expand("srv[1101-1108]")
    assert leaves["leaf-6-2"] == expand("srv[6201-6208]")
    assert children(f)["core"] == {f"spine-{i}" for i in range(1, 7)}
    assert children(f)["spine-6"] == {"leaf-6-1", "leaf-6-2"}
    # Every host has one synthetic HCA, attributed to it, with a GUID derived from its name alone.
    host = f.host("srv1101")
    hca = f.hcas[f.hca_index(host.hcas[0])]
    assert (hca.name, hca.host, len(host.hcas), host.gpus) == ("slurm0", "srv1101", 1, ())
    assert read_topology_conf(TREE).hcas == f.hcas
    assert len({h.guid for h in f.hcas} | {s.guid for s in f.switches}) == 96 + 19
    assert f.name == "topograph-expected-tree-oci-sim"


def test_topograph_tree_fixture_reexports_to_the_same_structure() -> None:
    f = read_topology_conf(TREE)
    again = parse_topology_conf(topology_conf(f), source="re-exported")
    assert leaf_partition(again) == leaf_partition(f)
    assert children(again) == children(f)


def test_topograph_block_fixture_reads_blocks_and_sizes() -> None:
    blocks = read_block_conf(BLOCK)
    assert [b.name for b in blocks.blocks][:3] == ["rack11", "rack12", "rack21"]
    assert len(blocks.blocks) == 12 and blocks.block_sizes == (8, 16, 32) and blocks.base_block_size == 8
    assert blocks.blocks[0].nodes == tuple(expand("srv[1101-1108]")) and blocks.blocks[0].line == 2
    assert blocks.node_block()["srv6208"] == "rack62"


def test_block_fixture_is_not_a_tree_and_tree_is_not_blocks() -> None:
    with pytest.raises(ParseError, match=r"block-dra\.conf\.txt:2: .*topology/block file") as e:
        read_topology_conf(BLOCK)
    assert e.value.line == 2 and e.value.source.endswith("block-dra.conf.txt")
    with pytest.raises(ParseError, match=r":2: .*topology/tree file"):
        read_block_conf(TREE)  # line 1 is a comment


# ---------------------------------------------------------------- syntax


def test_keys_are_case_insensitive_and_comments_continuations_quotes_and_crlf_are_read() -> None:
    text = (
        "# a comment line\r\n"
        'switchname=s1 NODES="n[1-2]"   linkspeed=100 # trailing comment\r\n'
        "SwitchName=s2 \\\r\n"
        "  Nodes=n[3-4]\r\n"
        "\r\n"
        "SWITCHNAME=top Switches=s[1-2]\r\n"
        "SwitchName=odd\\#name\n"
    )
    tree = parse_slurm_topology(text, source="t.conf")
    assert isinstance(tree, SlurmTree)
    s1, s2, top, odd = tree.switches
    assert (s1.nodes, s1.link_speed, s1.line) == (("n1", "n2"), 100, 2)
    assert (s2.nodes, s2.line) == (("n3", "n4"), 3)  # a continued line is reported at its first line
    assert (top.switches, top.line) == (("s1", "s2"), 6)
    assert odd.name == "odd#name"


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("SwitchName=s1 Nodes=a[1-2] Color=red", 1, "unknown key 'Color'"),
        ("SwitchName=s1 Switches=s2", 1, "undefined switch s2"),
        ("SwitchName=s1 Nodes=a[1-2]\nSwitchName=s2 Nodes=a[2-3]", 2, "node a2 is under two leaf switches, s1"),
        ("SwitchName=s1 Nodes=a[1-", 1, "bad hostlist in Nodes=.*never closed"),
        ("SwitchName=s1 Nodes=a[3-1]", 1, "bad hostlist.*backwards"),
        (
            'Switch\t36 "S-7cfe900300bdb2c0"\t\t# "MF0;sw:MQM9700/U1" enhanced port 0 lid 1',
            1,
            "not a topology.conf line",
        ),
        ("NodeName=dgx001 CPUs=224 Gres=gpu:8", 1, "starts with NodeName="),
        ("\n\nNodes=a1 SwitchName=s1", 3, "must start with SwitchName="),
        ("SwitchName=s1 Nodes=a1 Switches=s2\nSwitchName=s2", 1, "both Nodes= and Switches="),
        ("SwitchName=s1 Nodes=a1\nSwitchName=s1 Nodes=a2", 2, "defined twice"),
        ("SwitchName=a Switches=b\nSwitchName=b Switches=c\nSwitchName=c Switches=a", 3, "loop"),
        ("SwitchName=a Switches=a", 1, "lists itself"),
        ("SwitchName=s1 Nodes=a1 Nodes=a2", 1, "given twice"),
        ("SwitchName=s1 Nodes=", 1, "Nodes= is empty"),
        ("SwitchName=s1 LinkSpeed=fast", 1, "LinkSpeed='fast'"),
        ("SwitchName=s[1] Nodes=a1", 1, "cannot hold"),
        ("SwitchName=s1 Nodes=a1\nBlockName=b1 Nodes=a2", 2, "one file holds either"),
        ("SwitchName=s1 Nodes=a1 BlockSizes=4", 1, "does not belong on a SwitchName line"),
        ("# nothing here\n", None, "empty topology"),
        ("BlockName=b1 Nodes=a[1-4]\nBlockName=b2 Nodes=a[5-7]", 2, "3 nodes, fewer than the base block size 4"),
        ("BlockName=b1 Nodes=a[1-4]\nBlockName=b2 Nodes=a[4-8]", 2, "node a4 is in two blocks"),
        ("BlockName=b1\n", 1, "block b1 has no Nodes="),
        ("BlockSizes=4,12\nBlockName=b1 Nodes=a[1-4]", 1, "12 is not the base size 4 times a power of two"),
        ("BlockSizes=4,x\nBlockName=b1 Nodes=a[1-4]", 1, "expected positive integers"),
        ("BlockSizes=4\nBlockSizes=8", 2, "set twice"),
        ("BlockSizes=4\n", 1, "without any BlockName"),
    ],
)
def test_malformed_input_names_problem_file_and_line(text: str, line: int | None, message: str) -> None:
    with pytest.raises(ParseError, match=message) as e:
        parse_slurm_topology(text, source="bad.conf")
    assert e.value.line == line and e.value.source == "bad.conf"


def test_bad_encoding_names_the_line(tmp_path: Path) -> None:
    p = tmp_path / "topology.conf"
    p.write_bytes(b"SwitchName=s1 Nodes=a1\n# comment\nSwitchName=s2 Nodes=caf\xe9\n")
    with pytest.raises(ParseError, match="not UTF-8") as e:
        read_topology_conf(p)
    assert (e.value.source, e.value.line) == (str(p), 3)


def test_a_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="cannot read"):
        read_topology_conf(tmp_path / "absent.conf")


# ---------------------------------------------------------------- export: tree


@pytest.mark.parametrize(
    ("fabric", "rail_optimised"),
    [
        (gen.superpod(2), True),
        (gen.superpod(8), True),  # three tiers: cores above spine groups
        (gen.leaf_spine(4, 2, 8), False),
        (gen.fat_tree(4), False),
    ],
)
def test_exported_tree_loads_back_to_the_same_partition(fabric: Fabric, rail_optimised: bool) -> None:
    again = parse_topology_conf(topology_conf(fabric), source="export")
    expected = su_partition(fabric) if rail_optimised else leaf_partition(fabric)
    assert leaf_partition(again) == expected
    assert {h.name for h in again.hosts} == {h.name for h in fabric.hosts}
    for tier in (Tier.SPINE, Tier.CORE):
        assert len(again.switches_at(tier)) == len(fabric.switches_at(tier))


def test_rail_optimised_fabric_writes_one_switch_per_scalable_unit() -> None:
    text = topology_conf(gen.superpod(2))
    assert "SwitchName=su01 Nodes=dgx[001-032]\n" in text
    assert "SwitchName=su02 Nodes=dgx[033-063]\n" in text
    assert "# su01 stands for leaf-su01-rail[1-8]\n" in text
    assert "SwitchName=spine-08 Switches=su[01-02]\n" in text
    assert "SwitchName=leaf" not in text
    # Upper tiers come first, as topograph writes them.
    assert text.index("SwitchName=spine-01") < text.index("SwitchName=su01")


def test_switch_names_are_sanitised_and_unattributed_hcas_skipped() -> None:
    base = make_fabric({"leaf 1;a:b": ["h1", "h2"], "leaf-2": ["h3"]}, spines={"core spine": ["leaf 1;a:b", "leaf-2"]})
    stray = Hca(guid="ca000000000000ff", name="mlx5_0", host=None)
    leaf = base.switches[0].guid
    f = Fabric(
        switches=base.switches,
        hcas=[*base.hcas, stray],
        hosts=base.hosts,
        links=[*base.links, Link(Port(stray.guid, 1), Port(leaf, 60))],
    )
    text = topology_conf(f)
    assert "SwitchName=leaf_1_a_b Nodes=h[1-2]\n" in text
    assert "# leaf_1_a_b='leaf 1;a:b'\n" in text
    assert "SwitchName=core_spine Switches=leaf-2,leaf_1_a_b\n" in text
    assert leaf_partition(parse_topology_conf(text)) == leaf_partition(base)
    assert slurm_name("x" * 80) == "x" * 64 and slurm_name("") == "switch"


def test_name_clashes_after_sanitising_stay_distinct() -> None:
    f = make_fabric({"a b": ["h1"], "a:b": ["h2"]})
    again = parse_topology_conf(topology_conf(f))
    assert leaf_partition(again) == {frozenset({"h1"}), frozenset({"h2"})}
    assert "SwitchName=a_b " in topology_conf(f) and "SwitchName=a_b_2 " in topology_conf(f)
    assert sorted(s.name for s in again.switches) == ["a b", "a:b"]  # the "# a_b='a b'" comments


def test_hosts_on_no_leaf_are_left_out_with_a_note() -> None:
    base = make_fabric({"leaf1": ["h1"]})
    f = Fabric(switches=base.switches, hcas=base.hcas, hosts=[*base.hosts, Host("lonely")], links=base.links)
    text = topology_conf(f)
    assert "# Hosts under no leaf switch, left out: lonely\n" in text
    assert [h.name for h in parse_topology_conf(text).hosts] == ["h1"]


# ---------------------------------------------------------------- export: block


def test_block_sizes_follow_slurm_rules() -> None:
    assert block_sizes([32, 31]) == [31, 62]
    assert block_sizes([32, 32, 32, 31]) == [31, 62, 124]
    assert block_sizes([8] * 12) == [8, 16, 32, 64]
    assert block_sizes([5]) == [5]
    assert block_sizes([]) == []


def test_block_conf_has_one_block_per_scalable_unit() -> None:
    expected = (
        "# Slurm topology (topology/block) for fabric 'superpod-2su', written by gpupool:"
        " one block per scalable unit.\n"
        "# su01 stands for leaf-su01-rail[1-8]\n"
        "BlockName=su01 Nodes=dgx[001-032]\n"
        "# su02 stands for leaf-su02-rail[1-8]\n"
        "BlockName=su02 Nodes=dgx[033-063]\n"
        "BlockSizes=31,62\n"
    )
    assert topology_block(gen.superpod(2), "conf") == expected


@pytest.mark.parametrize("fabric", [gen.superpod(4), gen.leaf_spine(4, 2, 8), gen.fat_tree(4)])
def test_block_conf_loads_back_to_the_su_partition(fabric: Fabric) -> None:
    blocks = parse_block_conf(topology_block(fabric, "conf"))
    assert {frozenset(b.nodes) for b in blocks.blocks} == su_partition(fabric)
    assert blocks.block_sizes == tuple(block_sizes([len(b.nodes) for b in blocks.blocks]))


def read_topology_yaml_blocks(text: str) -> tuple[list[int], dict[str, list[str]]]:
    """A reader for the small YAML subset topology_block writes: block sizes and block -> nodes."""
    sizes: list[int] = []
    blocks: dict[str, list[str]] = {}
    current = ""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        key, _, value = line.strip().removeprefix("- ").partition(": ")
        value = value.strip('"')
        if key == "block_sizes":
            sizes = [int(v) for v in value.strip("[]").split(",")]
        elif key == "block":
            current = value
        elif key == "nodes":
            blocks[current] = expand(value)
    return sizes, blocks


def test_topology_yaml_text() -> None:
    expected = (
        "# Slurm topology (topology.yaml) for fabric 'superpod-2su', written by gpupool:"
        " one block per scalable unit.\n"
        "- topology: default\n"
        "  cluster_default: true\n"
        "  block:\n"
        "    block_sizes: [31, 62]\n"
        "    blocks:\n"
        "      - block: su01\n"
        '        nodes: "dgx[001-032]"\n'
        "      - block: su02\n"
        '        nodes: "dgx[033-063]"\n'
    )
    assert topology_block(gen.superpod(2), "yaml") == expected


def test_topology_yaml_reads_back_to_the_su_partition() -> None:
    f = gen.superpod(4)
    sizes, blocks = read_topology_yaml_blocks(topology_block(f, "yaml"))
    assert sizes == [31, 62, 124]
    assert {frozenset(v) for v in blocks.values()} == su_partition(f)
    assert list(blocks) == ["su01", "su02", "su03", "su04"]


def test_block_export_of_a_fabric_without_hosts_is_refused() -> None:
    empty = Fabric(switches=[Switch("00000000000000aa", "lonely", 4)], hcas=[], hosts=[], links=[])
    with pytest.raises(ValueError, match="no hosts in any scalable unit"):
        topology_block(empty, "conf")
