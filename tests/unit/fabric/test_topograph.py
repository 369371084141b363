"""NVIDIA Topograph interop: its Slurm tree and block files, and its Kubernetes node labels in all three key
families, read and written; every round trip keeps the hosts and their leaf (or block) partition."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric_naming import slurm_partition
from gpupool.domain.errors import ParseError
from gpupool.fabric import Fabric, Tier, generators, jsonio
from gpupool.fabric.export.slurm import topology_block
from gpupool.fabric.export.topograph import label_value, node_labels, node_labels_json, node_labels_kubectl
from gpupool.fabric.parsers.slurm import SlurmBlocks, parse_slurm_topology
from gpupool.fabric.parsers.topograph import LABEL_STYLES, parse_node_labels, parse_slurm_fabric, read_slurm_fabric

DATA = Path(__file__).resolve().parents[2] / "data"
BLOCK = DATA / "slurm-topology" / "topograph-expected-block-dra.conf.txt"
TREE = DATA / "slurm-topology" / "topograph-expected-tree-oci-sim.conf.txt"


def block_partition(text: str) -> set[frozenset[str]]:
    parsed = parse_slurm_topology(text)
    assert isinstance(parsed, SlurmBlocks)
    return {frozenset(b.nodes) for b in parsed.blocks}


def test_topograph_block_file_imports_blocks_as_leaves_aggregated_by_block_sizes() -> None:
    f = read_slurm_fabric(BLOCK)
    assert len(f.hosts) == 96 and f.gpu_count == 0
    leaves = {f.switches[s].name: {f.hosts[h].name for h in hs} for s, hs in f.leaf_hosts.items()}
    assert len(leaves) == 12 and leaves["nvl-1-1"] == {f"srv{n}" for n in range(1101, 1109)}  # "# rack11=nvl-1-1"
    # BlockSizes=8,16,32: a switch above each 2 consecutive blocks, one above each 4
    assert [len(f.switches_at(t)) for t in (Tier.LEAF, Tier.SPINE, Tier.CORE)] == [12, 6, 3]
    assert {h.nvlink_domain for h in f.hosts} == {""}


def test_topograph_blocks_as_nvlink_domains_round_trip_through_the_block_export() -> None:
    f = read_slurm_fabric(BLOCK, nvlink_blocks=True)
    assert f.host("srv1101").nvlink_domain == "nvl-1-1" and len({h.nvlink_domain for h in f.hosts}) == 12
    out = topology_block(f, by="nvlink")
    assert "# nvl-1-1=nvl-1-1" in out and "BlockName=nvl-1-1 Nodes=srv[1101-1108]" in out
    assert out.rstrip().split("\n")[-1] == "BlockSizes=8,16,32,64"  # 12 domains: 8 x 2^k, k = floor(log2 12)
    assert block_partition(out) == block_partition(BLOCK.read_text())
    again = parse_slurm_fabric(out, source="<again>", nvlink_blocks=True)
    assert {h.name: h.nvlink_domain for h in again.hosts} == {h.name: h.nvlink_domain for h in f.hosts}


def test_the_block_import_error_no_longer_names_an_internal_function() -> None:
    from gpupool.fabric.parsers.slurm import parse_topology_conf

    with pytest.raises(ParseError) as err:
        parse_topology_conf(BLOCK.read_text(), source="t.conf")
    assert "parse_block_conf" not in err.value.message and "gpupool fabric import slurm" in err.value.message


def test_topograph_documented_labels_in_every_key_family() -> None:
    """Topograph's docs: NVLink domain nvl1, switch s1 under s2 under s3."""
    docs = {
        "nvidia": {
            "network.topology.nvidia.com/accelerator": "nvl1",
            "network.topology.nvidia.com/leaf": "s1",
            "network.topology.nvidia.com/spine": "s2",
            "network.topology.nvidia.com/core": "s3",
        },
        "nvidia-tiers": {
            "xclr.topology.nvidia.com/domain": "nvl1",
            "network.topology.nvidia.com/tier-0": "s1",
            "network.topology.nvidia.com/tier-1": "s2",
            "network.topology.nvidia.com/tier-2": "s3",
        },
        "topograph": {
            "accelerator.topograph.run/domain": "nvl1",
            "accelerator.topograph.run/sub-domain": "nvl1.rack01",
            "fabric.topograph.run/tier-0": "s1",
            "fabric.topograph.run/tier-1": "s2",
            "fabric.topograph.run/tier-2": "s3",
        },
    }
    for style, labels in docs.items():
        doc = {
            "kind": "NodeList",
            "items": [{"metadata": {"name": "n1", "labels": labels}}, {"metadata": {"name": "n2", "labels": labels}}],
        }
        f = parse_node_labels(json.dumps(doc))
        assert [h.nvlink_domain for h in f.hosts] == ["nvl1", "nvl1"], style
        assert [(s.name, s.tier) for s in f.switches] == [("s1", Tier.LEAF), ("s2", Tier.SPINE), ("s3", Tier.CORE)]
        back = node_labels(f, style)
        assert back["n1"] == {k: v for k, v in labels.items() if "sub-domain" not in k}, style


def generated() -> list[Fabric]:
    ro = generators.rail_optimised(2, 3, 4, 2)
    gb200 = Fabric(
        switches=ro.switches,
        hcas=ro.hcas,
        hosts=[h.__class__(h.name, h.gpus, h.hcas, nvlink_domain=f"nvl-{i // 3 + 1}") for i, h in enumerate(ro.hosts)],
        links=ro.links,
        name="gb200-like",
    )
    return [generators.fat_tree(4, 0), generators.superpod(2), generators.leaf_spine(3, 2, 2), gb200]


@pytest.mark.parametrize("style", sorted(LABEL_STYLES))
@pytest.mark.parametrize("index", range(4))
def test_labels_round_trip_keep_hosts_partition_and_nvlink_domains(style: str, index: int) -> None:
    f = generated()[index]
    back = parse_node_labels(node_labels_json(f, style), source="labels.json")
    assert sorted(h.name for h in back.hosts) == sorted(h.name for h in f.hosts)
    assert slurm_partition(back) == slurm_partition(f)
    assert {h.name: h.nvlink_domain for h in back.hosts} == {h.name: h.nvlink_domain for h in f.hosts}
    again = node_labels(back, style)
    assert again == node_labels(f, style)  # labels -> fabric -> labels is the identity


def test_imported_fabric_labels_and_kubectl_commands() -> None:
    f = jsonio.load(DATA / "ibsim" / "fat-tree-k4" / "truth.json")
    labels = node_labels(f, "topograph")
    assert labels["node001"] == {
        "fabric.topograph.run/tier-0": "edge-p01-01",
        "fabric.topograph.run/tier-1": "agg-p01-01",
        "fabric.topograph.run/tier-2": "core-001",
    }
    cmds = node_labels_kubectl(f, "nvidia").splitlines()
    assert len(cmds) == 16 and cmds[0] == (
        "kubectl label node --overwrite node001 network.topology.nvidia.com/leaf=edge-p01-01 "
        "network.topology.nvidia.com/spine=agg-p01-01 network.topology.nvidia.com/core=core-001"
    )
    assert label_value("MF0;leaf 1:QM9700/U1") == "MF0_leaf_1_QM9700_U1" and label_value("-x-") == "x"


def test_show_labels_table() -> None:
    table = (
        "NAME    STATUS   ROLES    AGE   VERSION   LABELS\n"
        "gpu-1   Ready    <none>   5d    v1.30.0   kubernetes.io/arch=amd64,fabric.topograph.run/tier-0=leaf-a\n"
        "gpu-2   Ready    <none>   5d    v1.30.0   fabric.topograph.run/tier-0=leaf-b,fabric.topograph.run/tier-1=sp\n"
        "cpu-1   Ready    <none>   5d    v1.30.0   <none>\n"
    )
    f = parse_node_labels(table)
    assert [h.name for h in f.hosts] == ["gpu-1", "gpu-2", "cpu-1"] and f.host("cpu-1").hcas == ()
    assert {frozenset(v) for v in slurm_partition(f)} == {frozenset({"gpu-1"}), frozenset({"gpu-2"})}


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('{"items": [\n {"metadata": {"name": "a"}},\n {"metadata": \n', 4, "invalid JSON"),  # truncated
        (
            '{"items": [\n {"metadata": {"name": "a", "labels": {"fabric.topograph.run/tier-0": "s"}}},\n {"metadata": {}}\n]}',
            3,
            "no metadata.name",
        ),
        (
            '{"items": [\n {"metadata": {"name": "a",\n "labels": {"fabric.topograph.run/tier-1": "s"}}}]}',
            2,
            "no tier-0",
        ),
        (
            '{"items": [\n {"metadata": {"name": "a", "labels": {"network.topology.nvidia.com/leaf": "s"}}},\n {"metadata": {"name": "a"}}]}',
            3,
            "listed twice",
        ),
        ('{"items": [{"metadata": {"name": "a", "labels": {"kubernetes.io/arch": "amd64"}}}]}', 1, "no node carries"),
        ("NAME STATUS ROLES AGE VERSION LABELS\ngpu-1 Ready <none> 5d\n", 2, "expected 6 columns"),
        ("NAME STATUS ROLES AGE VERSION LABELS\ngpu-1 Ready <none> 5d v1 garbled\n", 2, "not key=value"),
    ],
)
def test_bad_label_files(text: str, line: int, words: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_node_labels(text, source="nodes.json")
    assert (err.value.source, err.value.line) == ("nodes.json", line) and words in err.value.message


@settings(max_examples=25, deadline=None)
@given(
    sus=st.integers(1, 3),
    hosts=st.integers(1, 5),
    rails=st.integers(1, 4),
    spines=st.integers(1, 3),
    style=st.sampled_from(sorted(LABEL_STYLES)),
)
def test_labels_of_generated_rail_fabrics_round_trip(sus: int, hosts: int, rails: int, spines: int, style: str) -> None:
    f = generators.rail_optimised(sus, hosts, rails, spines)
    back = parse_node_labels(node_labels_json(f, style))
    assert slurm_partition(back) == slurm_partition(f) and len(back.hosts) == len(f.hosts)
