"""The synthetic fabric built from agents' inventories when none was imported (``gpupool.server.topology``)."""

from __future__ import annotations

from gpupool.schemas.agent import GpuInfo, HcaInfo, RegisterRequest
from gpupool.server.topology import LEAF_NAME, synthetic_fabric, synthetic_leaves

GPUS = tuple(GpuInfo(index=i, model="NVIDIA H100 80GB HBM3", memory_mib=81559) for i in range(2))


def test_an_ethernet_bond_is_not_an_hca_of_the_infiniband_fabric() -> None:
    inv = RegisterRequest(
        host="node001",
        gpus=GPUS,
        hcas=(
            HcaInfo(name="mlx5_0", guid="a", rate_gbps=400.0),
            HcaInfo(name="mlx5_bond_0", guid="b", rate_gbps=100.0, link_layer="Ethernet"),
            HcaInfo(name="mlx5_1", guid="c", rate_gbps=400.0, link_layer="infiniband"),
        ),
    )
    fab = synthetic_fabric([inv])
    assert fab is not None
    assert sorted(fab.hcas[fab.hca_index(g)].name for g in fab.host("node001").hcas) == ["mlx5_0", "mlx5_1"]
    # The beats' ports map to the same leaf the fabric put the HCAs under; the bond's port to none.
    assert synthetic_leaves(inv) == {"mlx5_0": LEAF_NAME, "mlx5_1": LEAF_NAME}
    assert [s.name for s in fab.switches] == [LEAF_NAME]


def test_a_dual_ported_hca_is_one_hca_and_a_host_without_infiniband_still_sits_in_the_fabric() -> None:
    dual = RegisterRequest(
        host="node001", gpus=GPUS, hcas=(HcaInfo(name="mlx5_0", port=1), HcaInfo(name="mlx5_0", port=2))
    )
    eth_only = RegisterRequest(host="node002", gpus=GPUS, hcas=(HcaInfo(name="mlx5_bond_0", link_layer="Ethernet"),))
    fab = synthetic_fabric([dual, eth_only])
    assert fab is not None
    assert len(fab.host("node001").hcas) == 1
    (stand_in,) = fab.host("node002").hcas
    assert fab.hcas[fab.hca_index(stand_in)].name == ""  # no name: NCCL is never told to open it
    assert synthetic_leaves(eth_only) == {}
    assert synthetic_fabric([]) is None
