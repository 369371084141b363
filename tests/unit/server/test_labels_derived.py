"""Labels derived at registration from the inventory and the fabric, Topograph's keys only where they apply."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.fabric.export.topograph import node_labels
from gpupool.fabric.fabric import Fabric
from gpupool.fabric.generators import fat_tree, leaf_spine, superpod
from gpupool.schemas.agent import GpuInfo, RegisterRequest
from gpupool.server.labels import derived_labels, refusal


def inventory(host: str) -> RegisterRequest:
    return RegisterRequest(host=host, gpus=(GpuInfo(index=0, model="NVIDIA H100 80GB HBM3", memory_mib=81559),))


def test_single_homed_leaf_spine_host_gets_leaf_spine_and_topograph_keys() -> None:
    got = derived_labels(leaf_spine(2, 1, 2), inventory("node003"))
    assert got == {
        "gpupool/gpu-model": "NVIDIA H100 80GB HBM3",
        "gpupool/leaf": "leaf-02",
        "gpupool/su": "su02",
        "gpupool/rails": "1",
        "network.topology.nvidia.com/leaf": "leaf-02",
        "network.topology.nvidia.com/spine": "spine-01",
    }


def test_a_spine_group_is_named_by_its_first_spine_as_the_exporter_names_it() -> None:
    got = derived_labels(leaf_spine(2, 2, 2), inventory("node001"))
    assert got["network.topology.nvidia.com/leaf"] == "leaf-01"
    assert got["network.topology.nvidia.com/spine"] == "spine-01"


def test_rail_optimised_host_has_its_su_as_topograph_tier_0_but_no_gpupool_leaf() -> None:
    got = derived_labels(superpod(2), inventory("dgx040"))
    assert got["gpupool/su"] == "su02" and got["gpupool/rails"] == "8"
    assert got["network.topology.nvidia.com/leaf"] == "su02"
    assert "gpupool/leaf" not in got


@pytest.mark.parametrize(
    ("fabric", "host"), [(leaf_spine(2, 1, 2), "node003"), (superpod(2), "dgx040"), (fat_tree(4), "node005")]
)
def test_topograph_keys_are_the_exporters_labels_of_the_host(fabric: Fabric, host: str) -> None:
    got = derived_labels(fabric, inventory(host))
    exported = node_labels(fabric, "nvidia")[host]
    assert exported and {k: v for k, v in got.items() if k.startswith("network.topology.nvidia.com/")} == exported


def test_fat_tree_edge_gets_its_leaf_pod_and_core() -> None:
    got = derived_labels(fat_tree(4), inventory("node001"))
    assert got["gpupool/leaf"] == "edge-p01-01"
    assert got["network.topology.nvidia.com/spine"] == "agg-p01-01"
    assert got["network.topology.nvidia.com/core"] == "core-001"


def test_a_multi_node_nvlink_domain_is_topographs_accelerator() -> None:
    fab = leaf_spine(1, 1, 2)
    hosts = [replace(h, nvlink_domain="nvl72-a") for h in fab.hosts]
    fab = Fabric(switches=fab.switches, hcas=fab.hcas, hosts=hosts, links=fab.links)
    assert derived_labels(fab, inventory("node001"))["network.topology.nvidia.com/accelerator"] == "nvl72-a"


def test_no_fabric_or_unknown_host_gives_the_gpu_model_only() -> None:
    assert derived_labels(None, inventory("x")) == {"gpupool/gpu-model": "NVIDIA H100 80GB HBM3"}
    assert derived_labels(leaf_spine(1, 1, 1), inventory("x")) == {"gpupool/gpu-model": "NVIDIA H100 80GB HBM3"}


def test_the_refusal_lists_values_per_key_and_the_keys_that_exist() -> None:
    msg = refusal([("zone", "b")], [[("zone", "a")], [("zone", "a"), ("rack", "1")], [("zone", "c")]])
    assert msg == (
        "no node has every label of node_selector zone=b: zone is a (2 nodes), c (1 node); label keys on nodes: rack, zone"
    )
    assert refusal([("k", "v")], []).endswith("no node has a label k; no node has any label")


def test_a_node_with_a_container_runtime_is_labelled_with_it_and_one_without_is_not() -> None:
    with_podman = inventory("node001").model_copy(update={"container_runtime": "podman"})
    got = derived_labels(None, with_podman)
    assert got["gpupool/container-runtime"] == "podman" and got["gpupool/containers"] == "yes"
    assert not {"gpupool/container-runtime", "gpupool/containers"} & set(derived_labels(None, inventory("node001")))
