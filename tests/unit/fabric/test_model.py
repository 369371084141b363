import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import make_fabric
from gpupool.domain.errors import FabricError
from gpupool.fabric import Domain, Fabric, Hca, Link, Port, Switch, Tier
from gpupool.fabric import generators as gen
from gpupool.fabric.model import Gpu
from gpupool.fabric.rates import link_gbps, parse_rate


def test_unknown_numa_node_is_minus_one_for_gpus_as_for_hcas() -> None:
    assert Gpu(0, "NVIDIA H100 80GB HBM3", 81559).numa_node == Hca("58a2e10300a7820e").numa_node == -1
    assert [g.numa_node for g in gen.superpod(1).hosts[0].gpus] == [0, 0, 0, 0, 1, 1, 1, 1]  # generators set it


def test_link_rates_from_sdr_to_xdr() -> None:
    assert parse_rate("4xNDR") == (4, "NDR")
    assert parse_rate("4xFDR10") == (4, "FDR10")
    assert parse_rate("3xNDR") is None
    assert parse_rate("4xfoo") is None
    assert [link_gbps(4, s) for s in ("SDR", "DDR", "QDR", "FDR", "EDR", "HDR", "NDR", "XDR")] == [
        10,
        20,
        40,
        56,
        100,
        200,
        400,
        800,
    ]
    assert link_gbps(1, "NDR") == 100


@pytest.mark.parametrize(
    ("sus", "nodes", "leaves", "spines"), [(1, 31, 8, 4), (2, 63, 16, 8), (3, 95, 24, 16), (4, 127, 32, 16)]
)
def test_superpod_matches_nvidia_component_table(sus: int, nodes: int, leaves: int, spines: int) -> None:
    f = gen.superpod(sus)
    assert len(f.hosts) == nodes
    assert f.gpu_count == nodes * 8
    assert len(f.switches_at(Tier.LEAF)) == leaves
    assert len(f.switches_at(Tier.SPINE)) == spines
    assert len(f.switches_at(Tier.CORE)) == 0
    assert f.rail_count == 8
    assert len(f.su_leaves) == sus
    # 32 down, 32 up on every leaf: 1:1 (31:32 on the leaves of the SU whose last slot holds the UFM)
    over = sorted(float(f.oversubscription_array()[s]) for s in f.switches_at(Tier.LEAF))
    assert over == [31 / 32] * 8 + [1.0] * (8 * sus - 8)


def test_superpod_hosts_have_eight_hcas_on_eight_distinct_leaves_of_their_own_su() -> None:
    f = gen.superpod(4)
    for h, host in enumerate(f.hosts):
        leaves = [int(f.hca_leaf[f.hca_index(g)]) for g in host.hcas]
        assert len(set(leaves)) == 8
        sus = {int(f.leaf_su[s]) for s in leaves}
        assert len(sus) == 1
        assert sorted(int(f.leaf_rail[s]) for s in leaves) == list(range(8))
        # HCA i is on rail i
        assert [f.rail_of_hca(f.hca_index(g)) for g in host.hcas] == list(range(8))
        assert f.rail_hca(h, 5) is not None and f.rail_hca(h, 5).name == "mlx5_5"  # type: ignore[union-attr]


def test_superpod_domains_and_pair_queries() -> None:
    f = gen.superpod(4)
    su0 = [h for h in range(len(f.hosts)) if f.domain_ids(Domain.SU)[h] == f.domain_ids(Domain.SU)[0]]
    assert len(su0) == 32
    assert f.smallest_domain([0]) == Domain.NVLINK
    assert f.smallest_domain([0, 1]) == Domain.LEAF
    assert f.smallest_domain([0, 40]) == Domain.SPINE_GROUP
    assert f.lowest_common_tier(0, 0) == 0
    assert f.lowest_common_tier(0, 1) == 1
    assert f.lowest_common_tier(0, 40) == 2
    assert f.switch_hops(0, 1) == 1 and f.switch_hops(0, 40) == 3 and f.switch_hops(3, 3) == 0
    assert f.bottleneck_gbps(0, 0) == 3600.0
    assert f.bottleneck_gbps(0, 1) == 400.0
    assert f.bottleneck_gbps(0, 40) == 400.0  # 1:1, no oversubscription


def test_beyond_four_sus_grows_a_core_tier() -> None:
    f = gen.superpod(8)
    assert len(f.hosts) == 8 * 32 - 1
    assert len(f.switches_at(Tier.CORE)) > 0
    assert f.lowest_common_tier(0, len(f.hosts) - 1) == 3
    assert f.smallest_domain([0, len(f.hosts) - 1]) == Domain.CORE
    assert f.switch_hops(0, len(f.hosts) - 1) == 5


def test_fat_tree_counts_and_tiers() -> None:
    k = 4
    f = gen.fat_tree(k)
    assert len(f.hosts) == k**3 // 4
    assert len(f.switches_at(Tier.LEAF)) == k * k // 2
    assert len(f.switches_at(Tier.SPINE)) == k * k // 2
    assert len(f.switches_at(Tier.CORE)) == (k // 2) ** 2
    assert [f.lowest_common_tier(0, b) for b in (0, 1, 2, 4)] == [0, 1, 2, 3]
    assert f.smallest_domain([0, 2]) == Domain.SPINE_GROUP
    with pytest.raises(FabricError):
        gen.fat_tree(5)


def test_leaf_spine_oversubscription_lowers_cross_leaf_bandwidth() -> None:
    f = gen.leaf_spine(4, 2, 8, gpus_per_host=4, oversubscription=2.0)
    over = f.oversubscription_array()
    assert [over[s] for s in f.switches_at(Tier.LEAF)] == [2.0] * 4
    assert f.bottleneck_gbps(0, 1) == 400.0
    assert f.bottleneck_gbps(0, 8) == 200.0
    assert f.gpu_count == 4 * 8 * 4


def test_pcie_servers_have_no_nvlink_island() -> None:
    f = gen.superpod(1, gen.ServerSpec.pcie())
    assert f.smallest_domain([0]) == Domain.HOST
    assert len({g.nvlink_island for g in f.hosts[0].gpus}) == 8
    assert f.bottleneck_gbps(0, 0) == 0.0
    assert f.rail_count == 4
    # two GPUs share each rail NIC
    names = [f.rail_hca(0, g).name for g in range(8)]  # type: ignore[union-attr]
    assert names == ["mlx5_0", "mlx5_0", "mlx5_1", "mlx5_1", "mlx5_2", "mlx5_2", "mlx5_3", "mlx5_3"]


def test_hosts_under_switch() -> None:
    f = make_fabric({"l1": ["a", "b"], "l2": ["c"], "l3": ["d"]}, {"s1": ["l1", "l2"], "s2": ["l3"]})
    s1 = f.switch_index(f"{4:016x}")
    assert f.switches[s1].tier == Tier.SPINE
    assert [f.hosts[i].name for i in f.hosts_under(s1)] == ["a", "b", "c"]
    assert f.lowest_common_tier(0, 3) == 4  # s1 and s2 do not meet: unreachable
    assert f.smallest_domain([0, 3]) is None


def test_vectorised_queries_agree_with_scalar() -> None:
    f = gen.superpod(5)
    rng = np.random.default_rng(1)
    a = rng.integers(0, len(f.hosts), 500)
    b = rng.integers(0, len(f.hosts), 500)
    many = f.lowest_common_tier_many(a, b)
    assert [f.lowest_common_tier(int(x), int(y)) for x, y in zip(a, b, strict=True)] == many.tolist()
    assert set(many.tolist()) <= {0, 1, 2, 3}
    hca_a = rng.integers(0, len(f.hcas), 500)
    hca_b = rng.integers(0, len(f.hcas), 500)
    t = f.hca_lowest_common_tier_many(hca_a, hca_b)
    same_leaf = f.hca_leaf[hca_a] == f.hca_leaf[hca_b]
    assert np.all((t <= 1) == same_leaf)


def test_derived_arrays_are_read_only() -> None:
    f = gen.superpod(1)
    with pytest.raises(ValueError):
        f.domain_ids(Domain.LEAF)[0] = 99
    with pytest.raises(ValueError):
        f.hca_leaf[0] = 3


def test_inconsistent_fabrics_are_refused() -> None:
    sw = Switch("00000000000000aa", "leaf", 8)
    hca = Hca("00000000000000bb", host=None)
    with pytest.raises(FabricError, match="undeclared node"):
        Fabric(switches=[sw], hcas=[hca], hosts=[], links=[Link(Port("00000000000000aa", 1), Port("ffff", 1))])
    with pytest.raises(FabricError, match="used by two links"):
        Fabric(
            switches=[sw],
            hcas=[hca, Hca("00000000000000cc")],
            hosts=[],
            links=[
                Link(Port("00000000000000aa", 1), Port("00000000000000bb", 1)),
                Link(Port("00000000000000aa", 1), Port("00000000000000cc", 1)),
            ],
        )
    with pytest.raises(FabricError, match="duplicate switch GUID"):
        Fabric(switches=[sw, sw], hcas=[], hosts=[], links=[])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=6), st.integers(min_value=1, max_value=3))
def test_domains_nest_on_random_leaf_spine(hosts_per_leaf: list[int], n_spines: int) -> None:
    leaves = {f"l{i}": [f"h{i}-{j}" for j in range(n)] for i, n in enumerate(hosts_per_leaf)}
    spines = {f"s{k}": [f"l{i}" for i in range(len(leaves)) if i % n_spines == k] for k in range(n_spines)}
    spines = {k: v for k, v in spines.items() if v}
    f = make_fabric(leaves, spines, gpus=2)
    ids = [f.domain_ids(level) for level in Domain if level != Domain.NVLINK]
    # every domain at one level lies inside exactly one domain of the next level
    for inner, outer in itertools.pairwise(ids):
        pairs = set(zip(inner.tolist(), outer.tolist(), strict=True))
        assert len({i for i, _ in pairs}) == len(pairs)
    n = len(f.hosts)
    a, b = np.meshgrid(np.arange(n), np.arange(n))
    t = f.lowest_common_tier_many(a.ravel(), b.ravel()).reshape(n, n)
    assert np.array_equal(t, t.T)
    assert np.all(np.diag(t) == 0)
