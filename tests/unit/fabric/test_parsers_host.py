"""host_from_tools: one Host from nvidia-smi -q, topo -m and ibstat outputs.

The fixtures are real but come from different H100 nodes (the topo matrix from one, the ibstat and -q
output from others), which is what makes the NIC mapping worth checking: the topo NICs mlx5_2/mlx5_3 are
not InfiniBand HCAs on the ibstat node, so GPU2 and GPU3 fall back to their nearest HCA that is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.domain.errors import InputError, ParseError
from gpupool.fabric.parsers.host import host_from_tools

DATA = Path(__file__).resolve().parents[2] / "data"
TOPO = DATA / "nvidia-smi-topo" / "sglang-issue-30401-8x-h100-nv18-8nic.txt"
SMI_TEXT = DATA / "nvidia-smi-q" / "h100-80gb-hbm3-8gpu-535.161.08-gpud.txt"
SMI_XML = DATA / "nvidia-smi-xml" / "dual-rtx-a5000-dtd-v13-telegraf.xml"
IBSTAT = DATA / "ibstat" / "h100-8x-cx7-ndr400-ib-plus-bluefield-eth-gpud.txt"
PANIC = DATA / "ibstat" / "a100-8x-cx6-hdr-ibpanic-exit255-gpud.txt"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_h100_host_from_all_three_tools() -> None:
    host, hcas = host_from_tools("h100-a", smi_xml=None, smi_text=read(SMI_TEXT), topo=read(TOPO), ibstat=read(IBSTAT))
    assert host.name == "h100-a" and host.gpu_count == 8
    assert {g.model for g in host.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert [g.index for g in host.gpus] == list(range(8))
    assert {g.nvlink_island for g in host.gpus} == {0}
    assert [g.numa_node for g in host.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert host.gpus[4].pci_bus_id == "00000000:9B:00.0"
    assert [h.name for h in hcas] == ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]
    assert host.hcas == tuple(h.guid for h in hcas)
    assert {h.host for h in hcas} == {"h100-a"}
    assert host.gpu_hca == (0, 1, 0, 0, 2, 3, 4, 5)
    assert host.nvlink_gbps == 18 * 200.0


def test_without_topo_no_nvlink_is_claimed() -> None:
    host, hcas = host_from_tools("ws", smi_xml=read(SMI_XML), topo=None, ibstat=None)
    assert [g.nvlink_island for g in host.gpus] == [0, 1]
    assert (host.nvlink_gbps, host.gpu_hca, host.hcas, hcas) == (0.0, (), (), ())
    assert host.gpus[1].pci_bus_id == "00000000:C1:00.0"


def test_gpu_count_disagreement_is_refused() -> None:
    with pytest.raises(InputError, match="lists 2 GPUs but topo -m shows 8"):
        host_from_tools("ws", smi_xml=read(SMI_XML), topo=read(TOPO), ibstat=None)


def test_partial_ibstat_is_refused_and_names_the_host() -> None:
    with pytest.raises(ParseError, match="ibstat failed part way") as e:
        host_from_tools("a100-b", smi_xml=None, topo=None, ibstat=read(PANIC))
    assert e.value.source == "a100-b: ibstat" and e.value.line == 137


def test_hcas_only_host() -> None:
    host, hcas = host_from_tools("io-1", smi_xml=None, topo=None, ibstat=read(IBSTAT))
    assert host.gpus == () and len(hcas) == 8 and host.gpu_hca == ()
