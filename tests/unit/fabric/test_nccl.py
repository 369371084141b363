from dataclasses import replace

import pytest

from gpupool.fabric import Fabric, Gpu
from gpupool.fabric import generators as gen
from gpupool.fabric.export.nccl import nccl_ib_hca, nccl_topology_env
from gpupool.fabric.generators import ServerSpec
from gpupool.fabric.parsers.slurm import parse_topology_conf

SUPERPOD = gen.superpod(1)


def test_each_gpu_names_its_rail_hca_exactly_on_port_1() -> None:
    assert nccl_ib_hca(SUPERPOD, "dgx001", [0, 3]) == "=mlx5_0:1,mlx5_3:1"
    assert nccl_ib_hca(SUPERPOD, "dgx017", [7]) == "=mlx5_7:1"


def test_order_follows_the_gpus_given() -> None:
    assert nccl_ib_hca(SUPERPOD, "dgx001", [5, 2, 6]) == "=mlx5_5:1,mlx5_2:1,mlx5_6:1"


def test_whole_host_lists_all_eight_rails() -> None:
    expected = "=" + ",".join(f"mlx5_{i}:1" for i in range(8))
    assert nccl_ib_hca(SUPERPOD, "dgx031", range(8)) == expected


def test_gpus_sharing_a_rail_name_it_once() -> None:
    # 8 GPUs on 4 rails: GPUs 2i and 2i+1 share rail i.
    pcie = gen.superpod(1, ServerSpec.pcie())
    assert nccl_ib_hca(pcie, "dgx001", [0, 1, 2]) == "=mlx5_0:1,mlx5_1:1"
    assert nccl_ib_hca(pcie, "dgx001", [7, 6, 0]) == "=mlx5_3:1,mlx5_0:1"


def test_env_holds_only_nccl_ib_hca() -> None:
    assert nccl_topology_env(SUPERPOD, "dgx002", [1, 4]) == {"NCCL_IB_HCA": "=mlx5_1:1,mlx5_4:1"}


@pytest.mark.parametrize(
    ("host", "gpus", "message"),
    [
        ("nope", [0], "not in fabric"),
        ("dgx001", [8], "GPUs 0 to 7"),
        ("dgx001", [-1], "GPUs 0 to 7"),
        ("dgx001", [], "no GPUs"),
    ],
)
def test_bad_requests_raise_value_error(host: str, gpus: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        nccl_ib_hca(SUPERPOD, host, gpus)


def test_stand_in_hcas_of_a_slurm_import_are_never_named() -> None:
    slurm = parse_topology_conf("SwitchName=s1 Nodes=n1")
    with pytest.raises(ValueError, match="has no GPUs"):
        nccl_topology_env(slurm, "n1", [0])
    # Even with GPUs filled in (as an agent would report them), the stand-in HCA is not a device to open.
    host = replace(slurm.hosts[0], gpus=(Gpu(0, "NVIDIA H100 80GB HBM3", 81559),))
    f = Fabric(switches=slurm.switches, hcas=slurm.hcas, hosts=[host], links=slurm.links)
    assert f.rail_hca(0, 0) is not None and f.rail_hca(0, 0).name == "slurm0"  # type: ignore[union-attr]
    assert nccl_topology_env(f, "n1", [0]) == {}
    with pytest.raises(ValueError, match="no InfiniBand HCA is known"):
        nccl_ib_hca(f, "n1", [0])
