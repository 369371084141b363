"""nvidia-smi parsers against real captures: ``topo -m``, ``-q -x`` (DTD v12/v13/older) and plain ``-q``."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from gpupool.domain.errors import ParseError
from gpupool.fabric.model import Gpu
from gpupool.fabric.parsers._text import read_tool_output
from gpupool.fabric.parsers.nvidia_smi import (
    TopoMatrix,
    parse_query_text,
    parse_query_xml,
    parse_topo_matrix,
)

DATA = Path(__file__).resolve().parents[2] / "data"
TOPO = DATA / "nvidia-smi-topo"
XML = DATA / "nvidia-smi-xml"
QTEXT = DATA / "nvidia-smi-q"
CAPTURES = DATA / "nvidia-smi-captures"
H100_CAPTURE = CAPTURES / "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
MIG_CAPTURE = CAPTURES / "linux-x86_64__nvidia-h100-mig__590.48.01.txt"


def capture_section(path: Path, banner: str) -> str:
    """The output under ``# <banner>`` in an nvidia_gpu_exporter capture, up to the next ``####`` banner."""
    text = path.read_text(encoding="utf-8")
    start = text.index(f"# {banner}\n")
    body = text.index("\n", text.index("\n####", start) + 1) + 1
    return text[body : text.index("\n####", body) + 1]


def sglang() -> str:
    return (TOPO / "sglang-issue-30401-8x-h100-nv18-8nic.txt").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------- topo -m


def test_topo_8x_h100_with_nic_legend() -> None:
    m = parse_topo_matrix(sglang())
    assert m.gpus == tuple(f"GPU{i}" for i in range(8))
    assert m.nics == tuple(f"mlx5_{i}" for i in range(8))
    assert m.links[("GPU0", "GPU7")] == "NV18"
    assert m.links[("GPU4", "mlx5_4")] == "PIX"
    assert m.links[("GPU4", "mlx5_0")] == "SYS"
    assert m.links[("mlx5_3", "mlx5_3")] == "X"
    assert dict(m.numa) == {f"GPU{i}": 0 if i < 4 else 1 for i in range(8)}
    assert m.cpu_affinity["GPU5"] == "48-95,144-191"
    assert m.nvlink_islands() == (0,) * 8
    assert m.nvlink_max() == 18
    assert m.gpu_nic() == tuple(range(8))


def test_gpu_nic_restricted_to_some_nics_falls_back_to_the_next_closest() -> None:
    m = parse_topo_matrix(sglang())
    # Without mlx5_2 and mlx5_3, GPU2/GPU3 see the other NICs of their NUMA node at NODE: lowest index wins.
    among = {"mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"}
    assert m.gpu_nic(among=among) == (0, 1, 0, 0, 4, 5, 6, 7)
    assert m.gpu_nic(among=set()) == (None,) * 8


def test_topo_tabs_and_spaces_give_the_same_matrix() -> None:
    spaced = sglang()
    # Back to the tool's own separators: a tab wherever the copy has a run of spaces.
    tabbed = "\n".join(re.sub(r" {2,}", "\t", line) for line in spaced.splitlines())
    assert "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID" in tabbed
    assert parse_topo_matrix(tabbed) == parse_topo_matrix(spaced)


def test_topo_tab_separated_pcie_only_pair() -> None:
    m = parse_topo_matrix((TOPO / "club-3090-issue-1229-2x-rtx5090-phb.txt").read_text(encoding="utf-8"))
    assert m.gpus == ("GPU0", "GPU1") and m.nics == ()
    assert m.links[("GPU0", "GPU1")] == "PHB"
    assert m.nvlink_islands() == (0, 1)  # no NVLink: each GPU alone
    assert m.nvlink_max() == 0
    assert m.gpu_nic() == (None, None)
    assert dict(m.numa) == {"GPU0": 0, "GPU1": 0}


def test_topo_from_capture_with_ansi_underlined_header() -> None:
    section = capture_section(H100_CAPTURE, "$ nvidia-smi topo -m")
    assert "\x1b[4m" in section  # the real header is underlined
    m = parse_topo_matrix(section, source=str(H100_CAPTURE))
    assert m == TopoMatrix(
        gpus=("GPU0",), nics=(), links={("GPU0", "GPU0"): "X"}, numa={"GPU0": 0}, cpu_affinity={"GPU0": "0-19"}
    )


def test_topo_islands_split_on_nvlink_pairs() -> None:
    text = (
        "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNV2\tSYS\tSYS\t0-7\t0\n"
        "GPU1\tNV2\t X \tSYS\tSYS\t0-7\t0\n"
        "GPU2\tSYS\tSYS\t X \tNV4\t8-15\tN/A\n"
        "GPU3\tSYS\tSYS\tNV4\t X \t8-15\tN/A\n"
    )
    m = parse_topo_matrix(text)
    assert m.nvlink_islands() == (0, 0, 1, 1)
    assert m.nvlink_max() == 4
    assert m.numa["GPU2"] == -1


def test_topo_pre_legend_format_names_nic_columns_by_device() -> None:
    # Layout of drivers before the NIC Legend (as quoted in NVIDIA/nccl-tests#78), shortened to two GPUs.
    text = (
        "        GPU0    GPU1    mlx5_0  mlx5_1  CPU Affinity\n"
        "GPU0     X      NV6     PIX     PXB     0-23,48-71\n"
        "GPU1    NV6      X      PXB     PIX     0-23,48-71\n"
        "mlx5_0  PIX     PXB      X      PXB\n"
        "mlx5_1  PXB     PIX     PXB      X \n"
    )
    m = parse_topo_matrix(text)
    assert m.nics == ("mlx5_0", "mlx5_1")
    assert m.gpu_nic() == (0, 1)
    assert dict(m.numa) == {"GPU0": -1, "GPU1": -1}  # no NUMA Affinity column


def _replace_line(text: str, prefix: str, new: str) -> tuple[str, int]:
    lines = text.splitlines()
    idx = next(i for i, ln in enumerate(lines) if ln.startswith(prefix))
    lines[idx] = new
    return "\n".join(lines) + "\n", idx + 1


@pytest.mark.parametrize(
    ("token", "message"),
    [("NV0", "unknown link token 'NV0'"), ("NVX", "unknown link token 'NVX'"), ("NV-18", "unknown link token")],
)
def test_topo_unknown_link_token(token: str, message: str) -> None:
    text = sglang()
    row = next(ln for ln in text.splitlines() if ln.startswith("GPU3"))
    text, line = _replace_line(text, "GPU3", row.replace("NV18", token, 1))
    with pytest.raises(ParseError, match=message) as e:
        parse_topo_matrix(text, source="topo.txt")
    assert (e.value.source, e.value.line) == ("topo.txt", line)


@pytest.mark.parametrize(
    ("old", "new", "message"), [("     0  ", " zero  ", "NUMA affinity"), ("0-47,96-143", "0-47;96", "CPU")]
)
def test_topo_unknown_affinity_token(old: str, new: str, message: str) -> None:
    text = sglang()
    row = next(ln for ln in text.splitlines() if ln.startswith("GPU1"))
    text, line = _replace_line(text, "GPU1", row.replace(old, new))
    with pytest.raises(ParseError, match=message) as e:
        parse_topo_matrix(text)
    assert e.value.line == line


def test_topo_truncated_matrix() -> None:
    text = "\n".join(sglang().splitlines()[:12])  # header + 8 GPU rows + 3 of 8 NIC rows
    with pytest.raises(ParseError, match="matrix ends after 11 of 16 rows") as e:
        parse_topo_matrix(text, source="cut.txt")
    assert e.value.line == 12


def test_topo_truncated_legend() -> None:
    text = sglang().replace("  NIC7: mlx5_7\n", "")
    with pytest.raises(ParseError, match="NIC7 has no entry in the NIC Legend"):
        parse_topo_matrix(text)


def test_topo_line_of_another_format_inside_the_matrix() -> None:
    text, line = _replace_line(sglang(), "NIC2", "CA 'mlx5_2'")
    with pytest.raises(ParseError, match="expected the row of NIC2") as e:
        parse_topo_matrix(text)
    assert e.value.line == line


def test_topo_not_a_matrix() -> None:
    with pytest.raises(ParseError, match="no topology matrix"):
        parse_topo_matrix((QTEXT / "a10-1gpu-535.129.03-gpud.txt").read_text(encoding="utf-8"))


def test_topo_bad_encoding_from_file(tmp_path: Path) -> None:
    data = sglang().encode()
    cut = data.index(b"GPU2    NV18")
    path = tmp_path / "topo.txt"
    path.write_bytes(data[:cut] + b"GPU2\xff" + data[cut + 4 :])
    with pytest.raises(ParseError, match="not UTF-8") as e:
        parse_topo_matrix(read_tool_output(path), source=str(path))
    assert (e.value.source, e.value.line) == (str(path), 4)


# ---------------------------------------------------------------------------------------------- -q -x


def test_xml_v12_a100_mig() -> None:
    r = parse_query_xml((XML / "a100-sxm4-dtd-v12-telegraf.xml").read_text(encoding="utf-8"))
    assert (r.driver_version, r.cuda_version) == ("535.54.03", "12.2")
    (g,) = r.gpus
    assert g.product_name == "NVIDIA A100-SXM4-80GB"
    assert g.memory_total_mib == 81920  # the GPU's, not a MIG slice's 19968
    assert g.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert g.pci_bus_id == "00000000:01:00.0"
    assert g.mig_mode is True and g.minor_number == 1 and g.numa_node is None
    t = g.telemetry
    assert t.gpu_util_pct is None  # N/A under MIG
    assert (t.memory_used_mib, t.temperature_c, t.memory_temperature_c) == (50, 27.0, 44.0)
    assert (t.power_draw_w, t.power_limit_w, t.performance_state) == (67.03, 500.0, "P0")
    assert (t.ecc_enabled, t.ecc_volatile_corrected, t.ecc_aggregate_uncorrected) == (True, 0, 0)
    assert t.retired_pages_single_bit is None and t.remapped_rows_pending is None  # both N/A


def test_xml_v13_two_gpus() -> None:
    r = parse_query_xml((XML / "dual-rtx-a5000-dtd-v13-telegraf.xml").read_text(encoding="utf-8"))
    assert [g.pci_bus_id for g in r.gpus] == ["00000000:81:00.0", "00000000:C1:00.0"]
    a, b = r.gpus
    assert a.mig_mode is None and a.memory_total_mib == 24564
    assert a.telemetry.power_draw_w == 6.52  # instant_power_draw (v13 splits instant and average)
    assert b.telemetry.power_draw_w == 13.59
    assert a.telemetry.ecc_enabled is False and a.telemetry.ecc_volatile_corrected is None
    assert (a.telemetry.remapped_rows_uncorrectable, a.telemetry.remapped_rows_pending) == (0, False)


def test_xml_older_dtd_tesla_t4() -> None:
    (g,) = parse_query_xml((XML / "tesla-t4-telegraf.xml").read_text(encoding="utf-8")).gpus
    t = g.telemetry
    assert (g.product_name, g.memory_total_mib) == ("Tesla T4", 15360)
    assert (t.power_draw_w, t.power_limit_w) == (26.78, 70.0)  # <power_readings>, before the gpu_ prefix
    assert (t.retired_pages_single_bit, t.retired_pages_double_bit, t.retired_pages_pending) == (0, 0, False)


def test_to_gpu() -> None:
    (g,) = parse_query_xml((XML / "a100-sxm4-dtd-v12-telegraf.xml").read_text(encoding="utf-8")).gpus
    assert g.to_gpu(3, nvlink_island=1, numa_node=2) == Gpu(
        index=3,
        model="NVIDIA A100-SXM4-80GB",
        memory_mib=81920,
        nvlink_island=1,
        numa_node=2,
        uuid="GPU-513536b6-7d19-9063-b049-1e69664bb298",
        pci_bus_id="00000000:01:00.0",
        mig_mode=True,
    )
    assert g.to_gpu(0, numa_node=-1).numa_node == -1  # unknown on both sides stays unknown, never node 0
    assert g.to_gpu(0).numa_node == -1
    known = replace(g, numa_node=1)
    assert known.to_gpu(0, numa_node=-1).numa_node == 1  # topo -m printed N/A: the query's value stands
    assert known.to_gpu(0, numa_node=0).numa_node == 0  # topo -m wins, node 0 included


def test_xml_truncated() -> None:
    text = (XML / "a100-sxm4-dtd-v12-telegraf.xml").read_text(encoding="utf-8")
    cut = text[: text.index("<temperature>")]
    with pytest.raises(ParseError, match="malformed XML") as e:
        parse_query_xml(cut, source="cut.xml")
    assert e.value.source == "cut.xml" and e.value.line is not None and e.value.line > 200


@pytest.mark.parametrize(
    "doctype",
    [
        '<!DOCTYPE nvidia_smi_log [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>',
        '<!DOCTYPE nvidia_smi_log [<!ENTITY x SYSTEM "file:///etc/passwd">]>',
    ],
)
def test_xml_entities_are_refused(doctype: str) -> None:
    text = (XML / "tesla-t4-telegraf.xml").read_text(encoding="utf-8")
    text = re.sub(r"<!DOCTYPE[^>]*>", doctype, text, count=1).replace("Tesla T4", "&b;&x;")
    with pytest.raises(ParseError, match="DTD entity") as e:
        parse_query_xml(text)
    assert e.value.line == 2


def test_xml_unknown_unit_points_at_its_line() -> None:
    text = (XML / "a100-sxm4-dtd-v12-telegraf.xml").read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    assert lines[228].strip() == "<total>81920 MiB</total>"
    lines[228] = lines[228].replace("81920 MiB", "80 GiB")
    with pytest.raises(ParseError, match="expected a value in MiB, got '80 GiB'") as e:
        parse_query_xml("".join(lines), source="a100.xml")
    assert e.value.line == 229


def test_xml_missing_product_name_points_at_the_gpu() -> None:
    text = (XML / "a100-sxm4-dtd-v12-telegraf.xml").read_text(encoding="utf-8")
    text = text.replace("<product_name>NVIDIA A100-SXM4-80GB</product_name>", "")
    with pytest.raises(ParseError, match="no product name") as e:
        parse_query_xml(text)
    assert e.value.line == 8


def test_xml_of_another_tool() -> None:
    with pytest.raises(ParseError, match="expected <nvidia_smi_log>"):
        parse_query_xml('<?xml version="1.0"?>\n<system version="1"><cpu/></system>\n')


def test_xml_bad_encoding_from_file(tmp_path: Path) -> None:
    data = (XML / "tesla-t4-telegraf.xml").read_bytes().replace(b"Tesla T4", b"Tesla\xe9T4")
    path = tmp_path / "t4.xml"
    path.write_bytes(data)
    with pytest.raises(ParseError, match="not UTF-8") as e:
        read_tool_output(path)
    assert e.value.line == data[: data.index(b"\xe9")].count(b"\n") + 1


# ---------------------------------------------------------------------------------------------- -q text


def test_text_a10_pending_row_remap() -> None:
    r = parse_query_text((QTEXT / "a10-1gpu-535.129.03-gpud.txt").read_text(encoding="utf-8"))
    assert (r.driver_version, r.cuda_version) == ("535.129.03", "12.2")
    (g,) = r.gpus
    assert (g.product_name, g.memory_total_mib, g.pci_bus_id) == ("NVIDIA A10", 23028, "00000000:07:00.0")
    t = g.telemetry
    assert (t.remapped_rows_uncorrectable, t.remapped_rows_pending, t.remapped_rows_failure) == (4, True, False)
    assert (t.power_draw_w, t.power_limit_w, t.temperature_c) == (43.89, 150.0, 33.0)


def test_text_8x_h100() -> None:
    r = parse_query_text((QTEXT / "h100-80gb-hbm3-8gpu-535.161.08-gpud.txt").read_text(encoding="utf-8"))
    assert len(r.gpus) == 8
    assert {g.product_name for g in r.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert r.gpus[4].pci_bus_id == "00000000:9B:00.0"
    assert len({g.uuid for g in r.gpus}) == 8
    assert r.gpus[0].telemetry.power_draw_w == 67.74


def test_text_590_capture_idle_mig_and_loaded_with_processes() -> None:
    idle = parse_query_text(capture_section(MIG_CAPTURE, "$ nvidia-smi -q"), source=str(MIG_CAPTURE))
    (g,) = idle.gpus
    assert (idle.driver_version, g.mig_mode, g.memory_total_mib) == ("590.48.01", True, 81559)
    assert g.telemetry.power_draw_w == 72.63  # "Instantaneous Power Draw"
    (g,) = parse_query_text(capture_section(H100_CAPTURE, "load :: query (-q)")).gpus
    assert (g.telemetry.gpu_util_pct, g.telemetry.memory_used_mib, g.telemetry.power_draw_w) == (100.0, 19818, 588.39)


def test_text_truncated_at_a_gpu_boundary() -> None:
    text = (QTEXT / "h100-80gb-hbm3-8gpu-535.161.08-gpud.txt").read_text(encoding="utf-8")
    cut = text[: text.index("GPU 00000000:9B:00.0")]
    with pytest.raises(ParseError, match="says 8 attached GPUs but lists 4"):
        parse_query_text(cut)


def test_text_truncated_inside_a_gpu() -> None:
    text = (QTEXT / "a10-1gpu-535.129.03-gpud.txt").read_text(encoding="utf-8")
    cut = text[: text.index("    FB Memory Usage")]
    with pytest.raises(ParseError, match="no FB memory total") as e:
        parse_query_text(cut)
    assert e.value.line == 8  # the "GPU 00000000:07:00.0" header


@pytest.mark.parametrize("intruder", ["CA 'mlx5_0'", "\tCA type: MT4129", "  odd indent : 1"])
def test_text_line_of_another_format(intruder: str) -> None:
    lines = (QTEXT / "a10-1gpu-535.129.03-gpud.txt").read_text(encoding="utf-8").splitlines()
    lines.insert(20, intruder)
    with pytest.raises(ParseError) as e:
        parse_query_text("\n".join(lines), source="q.txt")
    assert (e.value.source, e.value.line) == ("q.txt", 21)


def test_text_unknown_value_token() -> None:
    text = (QTEXT / "a10-1gpu-535.129.03-gpud.txt").read_text(encoding="utf-8")
    text = text.replace("Pending                           : Yes", "Pending                           : Maybe")
    with pytest.raises(ParseError, match="expected Enabled/Disabled or Yes/No, got 'Maybe'"):
        parse_query_text(text)
