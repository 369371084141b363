"""GPUs merged into imported fabrics: per-host inventories (real nvidia-smi, topo -m, ibstat, sysfs captures)
and default server models; each GPU mapped to its rail HCA by PCI affinity."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from gpupool.domain.errors import InputError
from gpupool.fabric import Fabric, generators, jsonio
from gpupool.fabric.export.nccl import nccl_ib_hca
from gpupool.fabric.merge import GpuDefaults, merge_gpus, read_inventories, read_inventory, require_gpus
from gpupool.fabric.parsers.attribution import NameSources
from gpupool.fabric.parsers.iblinkinfo import read_iblinkinfo
from gpupool.fabric.parsers.nodemap import read_node_name_map

DATA = Path(__file__).resolve().parents[2] / "data"
SMI_Q = DATA / "nvidia-smi-q" / "h100-80gb-hbm3-8gpu-535.161.08-gpud.txt"
TOPO = DATA / "nvidia-smi-topo" / "sglang-issue-30401-8x-h100-nv18-8nic.txt"
IBSTAT = DATA / "ibstat" / "h100-8x-cx7-ndr400-ib-plus-bluefield-eth-gpud.txt"
SYSFS = DATA / "sysfs-infiniband" / "h100-node-gpud-sys-class-infiniband"
IBSTAT_IB = ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]  # and mlx5_bond_0
IBSTAT_GUIDS = [
    "58a2e10300a7820e", "a088c20300da6342", "a088c20300da656a", "a088c20300da62aa",
    "58a2e10300a78796", "58a2e10300a78756", "58a2e10300a78b5e", "a088c20300da62c2",
]  # fmt: skip


def imported() -> Fabric:
    """A real import without GPUs: iblinkinfo of the 8-rail ibsim fabric, hosts from its node-name map."""
    case = DATA / "ibsim" / "rail8-node-name-map"
    names = NameSources(node_names=read_node_name_map(case / "node-name-map"))
    return read_iblinkinfo(case / "iblinkinfo.txt", names=names).fabric


def test_an_import_has_no_gpus_and_says_how_to_add_them() -> None:
    f = imported()
    assert f.gpu_count == 0
    with pytest.raises(InputError, match=r"fabric merge FABRIC --inventory DIR.*--gpus-per-host 8 --gpu-model H100"):
        require_gpus(f, "f.json", ["the simulator"])


def test_default_server_model_for_every_host() -> None:
    f = merge_gpus(imported(), defaults=GpuDefaults.of(8, "H100")).fabric
    assert f.gpu_count == 32 and {g.memory_mib for h in f.hosts for g in h.gpus} == {81559}
    assert {h.nvlink_gbps for h in f.hosts} == {3600.0} and {g.nvlink_island for h in f.hosts for g in h.gpus} == {0}
    # rail order: GPU i uses the HCA on rail i; the bare-name map gave no device names, so NCCL is told nothing
    h = f.host_index("gpu001")
    assert [f.rail_of_hca(f.hca_index(f.rail_hca(h, g).guid)) for g in range(8)] == list(range(8))  # type: ignore[union-attr]
    pcie = GpuDefaults.of(4, "L40S")
    assert (pcie.memory_mib, pcie.nvlink_gbps, [g.nvlink_island for g in pcie.gpus()]) == (46068, 0.0, [0, 1, 2, 3])
    with pytest.raises(InputError, match="give its memory"):
        GpuDefaults.of(8, "MI300X")
    assert GpuDefaults.of(8, "MI300X", memory_mib=196608).memory_mib == 196608


def one_host(names: list[str], guids: list[str] | None = None) -> Fabric:
    """One host on 8 rail leaves, its HCAs with these device names (and GUIDs)."""
    f = generators.rail_optimised(1, 1, 8, 1, name="one")
    new = dict(zip((h.guid for h in f.hcas), guids or [h.guid for h in f.hcas], strict=True))
    hcas = [
        replace(h, guid=new[h.guid], name=n, description=f"dgx01 {n}" if n else "x")
        for h, n in zip(f.hcas, names, strict=True)
    ]
    links = [
        replace(x, a=replace(x.a, node=new.get(x.a.node, x.a.node)), b=replace(x.b, node=new.get(x.b.node, x.b.node)))
        for x in f.links
    ]
    host = replace(f.hosts[0], name="dgx01", gpus=(), hcas=tuple(new[g] for g in f.hosts[0].hcas), gpu_hca=())
    return Fabric(
        switches=f.switches, hcas=[replace(h, host="dgx01") for h in hcas], hosts=[host], links=links, name="one"
    )


def inventory(tmp_path: Path, **files: Path | str) -> Path:
    d = tmp_path / "inv" / "dgx01"
    d.mkdir(parents=True)
    for name, src in files.items():
        target = d / name.replace("_", "-").replace("-xml", ".xml").replace("-txt", ".txt")
        if isinstance(src, Path) and src.is_dir():
            shutil.copytree(src, target)
        elif isinstance(src, Path):
            shutil.copy(src, target)
        else:
            target.write_text(src)
    return tmp_path / "inv"


def test_gpus_map_to_rail_hcas_by_pci_affinity(tmp_path: Path) -> None:
    # The real matrix pairs GPU i with NIC i (PIX). Swap two legend names: GPU0 now sits beside mlx5_3.
    topo = TOPO.read_text().replace("NIC0: mlx5_0", "NIC0: mlx5_X").replace("NIC3: mlx5_3", "NIC3: mlx5_0")
    topo = topo.replace("NIC0: mlx5_X", "NIC0: mlx5_3")
    f = one_host([f"mlx5_{i}" for i in range(8)])
    result = merge_gpus(f, read_inventories(inventory(tmp_path, nvidia_smi_txt=SMI_Q, topo_txt=topo)))
    m = result.fabric
    assert result.from_inventory == ("dgx01",) and result.rail_by_affinity == ("dgx01",)
    h = m.host("dgx01")
    assert len(h.gpus) == 8 and h.gpus[0].model == "NVIDIA H100 80GB HBM3" and h.nvlink_gbps == 18 * 200.0
    assert h.gpu_hca == (3, 1, 2, 0, 4, 5, 6, 7)
    assert [g.numa_node for g in h.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert nccl_ib_hca(m, "dgx01", [0]) == "=mlx5_3:1" and nccl_ib_hca(m, "dgx01", [3, 4]) == "=mlx5_0:1,mlx5_4:1"


def test_ibstat_names_hcas_by_guid_and_leaves_the_ethernet_bond_out(tmp_path: Path) -> None:
    f = one_host([""] * 8, IBSTAT_GUIDS)  # attributed without device names (a bare-name map, say)
    result = merge_gpus(f, read_inventories(inventory(tmp_path, ibstat_txt=IBSTAT, nvidia_smi_txt=SMI_Q)))
    m = result.fabric
    assert [m.hcas[m.hca_index(g)].name for g in m.host("dgx01").hcas] == IBSTAT_IB
    assert "mlx5_bond_0" not in {h.name for h in m.hcas} and result.warnings == ()
    assert m.host("dgx01").gpu_hca == ()  # no topo -m: rail order
    assert nccl_ib_hca(m, "dgx01", [0, 7]) == "=mlx5_0:1,mlx5_9:1"


def test_sysfs_tree_names_hcas_by_device_and_skips_the_bond(tmp_path: Path) -> None:
    inv = read_inventory("dgx01", inventory(tmp_path, infiniband=SYSFS) / "dgx01")
    assert [a.name for a in inv.adapters if a.infiniband] == IBSTAT_IB
    assert [a.name for a in inv.adapters if not a.infiniband] == ["mlx5_bond_0"]
    f = one_host(IBSTAT_IB)
    result = merge_gpus(f, [inv])
    assert result.fabric.gpu_count == 0 and result.without_gpus == ("dgx01",)
    assert result.warnings == ("1 hosts have no GPUs (no GPU inventory and no --gpus-per-host)",)


def test_inventory_errors_name_the_file(tmp_path: Path) -> None:
    f = one_host([f"mlx5_{i}" for i in range(8)])
    root = inventory(tmp_path, nvidia_smi_txt=SMI_Q)
    (root / "dgx99").mkdir()
    (root / "dgx99" / "topo.txt").write_text(TOPO.read_text())
    with pytest.raises(InputError, match=r"dgx99.*which the fabric does not have") as err:
        merge_gpus(f, read_inventories(root))
    assert err.value.source.endswith("dgx99")
    (root / "dgx99" / "topo.txt").unlink()
    with pytest.raises(InputError, match="holds none of"):
        read_inventories(root)
    shutil.rmtree(root / "dgx99")
    two_gpus = "\n".join(TOPO.read_text().split("\n"))  # the 8-GPU matrix with a 1-GPU query
    (root / "dgx01" / "topo.txt").write_text(two_gpus)
    (root / "dgx01" / "nvidia-smi.txt").write_text((DATA / "nvidia-smi-q" / "a10-1gpu-535.129.03-gpud.txt").read_text())
    with pytest.raises(InputError, match="lists 1 GPUs but topo -m shows 8"):
        read_inventories(root)


def test_an_adapter_of_another_host_is_refused(tmp_path: Path) -> None:
    f = one_host([f"mlx5_{i}" for i in range(8)], IBSTAT_GUIDS)
    renamed = Fabric(
        switches=f.switches,
        hcas=[replace(h, host="dgx02") if i == 0 else h for i, h in enumerate(f.hcas)],
        hosts=[
            replace(f.hosts[0], hcas=f.hosts[0].hcas[1:]),
            replace(f.hosts[0], name="dgx02", hcas=f.hosts[0].hcas[:1]),
        ],
        links=f.links,
    )
    with pytest.raises(InputError, match="is an HCA of dgx02 in the fabric, not of dgx01"):
        merge_gpus(renamed, read_inventories(inventory(tmp_path, ibstat_txt=IBSTAT)))


def test_merged_fabric_round_trips_through_json(tmp_path: Path) -> None:
    m = merge_gpus(imported(), defaults=GpuDefaults.of(8, "B200")).fabric
    jsonio.save(m, tmp_path / "m.json")
    assert jsonio.to_dict(jsonio.load(tmp_path / "m.json")) == jsonio.to_dict(m)
