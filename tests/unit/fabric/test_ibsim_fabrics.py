"""Real tool output from ibsim-simulated fabrics (tests/data/ibsim, made by scripts/ibsim_fabrics.py): every
format of every case imports to the ground truth it was made from."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from fabric_naming import link_set, slurm_partition
from gpupool.fabric import Fabric, jsonio
from gpupool.fabric.export.ibnetdiscover import to_ibnetdiscover
from gpupool.fabric.parsers.attribution import NameSources
from gpupool.fabric.parsers.iblinkinfo import read_iblinkinfo
from gpupool.fabric.parsers.ibnetdiscover import IbImport, parse_ibnetdiscover, read_ibnetdiscover
from gpupool.fabric.parsers.lst import read_lst
from gpupool.fabric.parsers.nodemap import read_host_map, read_node_name_map

IBSIM = Path(__file__).resolve().parents[2] / "data" / "ibsim"
CASES = sorted(p.name for p in IBSIM.iterdir() if p.is_dir())
Reader = Callable[..., IbImport]
FORMATS: dict[str, Reader] = {
    "ibnetdiscover.txt": read_ibnetdiscover,
    "ibnetdiscover-g.txt": read_ibnetdiscover,
    "ibnetdiscover-p.txt": read_ibnetdiscover,
    "ibnetdiscover-names.txt": read_ibnetdiscover,
    "iblinkinfo.txt": read_iblinkinfo,
    "iblinkinfo-l.txt": read_iblinkinfo,
    "iblinkinfo-names.txt": read_iblinkinfo,
    "opensm-subnet.lst": read_lst,
}
# Formats that print no system image GUID: HCAs only that GUID ties to a host stay unattributed there.
NO_SYSTEM_GUID = {"ibnetdiscover-p.txt", "iblinkinfo.txt", "iblinkinfo-l.txt", "iblinkinfo-names.txt"}


def names_for(case: Path, fmt: str) -> NameSources:
    o = json.loads((case / "case.json").read_text())["import_options"]
    substituted = fmt.endswith("-names.txt")  # the tool already put the node-name map's names in
    return NameSources(
        node_names=read_node_name_map(case / o["node_name_map"]) if "node_name_map" in o and not substituted else {},
        host_map=read_host_map(case / o["host_map"]) if "host_map" in o else {},
        strip_domain=o.get("strip_domain", ""),
    )


def test_every_case_was_made() -> None:
    assert len(CASES) == 9
    assert (
        sum((IBSIM / c / f).exists() for c in CASES for f in FORMATS) == 9 * 6 + 4 * 2
    )  # 6 formats each; 4 cases have a node-name map, 2 more files each
    for case in CASES:
        info = json.loads((IBSIM / case / "case.json").read_text())
        assert jsonio.load(IBSIM / case / "truth.json").hosts and info["hosts"] > 0


@pytest.mark.parametrize(("case", "fmt"), [(c, f) for c in CASES for f in sorted(FORMATS) if (IBSIM / c / f).exists()])
def test_real_tool_output_imports_to_the_ground_truth(case: str, fmt: str) -> None:
    path = IBSIM / case / fmt
    truth = jsonio.load(IBSIM / case / "truth.json")
    imp = FORMATS[fmt](path, names=names_for(IBSIM / case, fmt))
    f = imp.fabric
    assert sorted(h.name for h in f.hosts) == sorted(h.name for h in truth.hosts)
    assert slurm_partition(f) == slurm_partition(truth)
    assert len(f.switches) == len(truth.switches) and len(f.links) == len(truth.links)
    assert all(h.unattributed_reason for h in f.unattributed_hcas)
    lost_by_format = fmt in NO_SYSTEM_GUID and json.loads((IBSIM / case / "case.json").read_text())["style"] in (
        "system-guid",
        "mixed",
    )
    hcas = {h.name: len(h.hcas) for h in f.hosts}
    if not lost_by_format:
        assert hcas == {h.name: len(h.hcas) for h in truth.hosts} and imp.unattributed_hcas == 0
    if fmt in ("ibnetdiscover.txt", "ibnetdiscover-g.txt", "opensm-subnet.lst"):  # node GUIDs: the same HCAs
        assert {h.name: set(h.hcas) for h in f.hosts} == {h.name: set(h.hcas) for h in truth.hosts}
        assert link_set(f) == link_set(truth)
    round_trip(f)


def round_trip(f: Fabric) -> None:
    again = parse_ibnetdiscover(to_ibnetdiscover(f), source="<again>").fabric
    assert [(h.name, h.hcas) for h in again.hosts] == [(h.name, h.hcas) for h in f.hosts]
    assert link_set(again) == link_set(f)
    assert [(h.guid, h.host, h.name) for h in again.hcas] == [(h.guid, h.host, h.name) for h in f.hcas]
    assert jsonio.to_dict(jsonio.from_dict(jsonio.to_dict(f))) == jsonio.to_dict(f)


def test_ibnetdiscover_with_a_node_name_map_keeps_the_own_description_and_renames_peers() -> None:
    case = IBSIM / "rail8-node-name-map"
    text = (case / "ibnetdiscover-names.txt").read_text()
    assert '# "MT4129 ConnectX7   Mellanox Technologies"' in text and '# "gpu001" lid' in text
    imp = read_ibnetdiscover(case / "ibnetdiscover-names.txt")
    assert {h.found_by for h in imp.fabric.hcas} == {"node-name-map"}
    assert all(h.description in {"gpu001", "gpu002", "gpu003", "gpu004"} for h in imp.fabric.hcas)


def test_ibhosts_output_is_a_name_source() -> None:
    case = IBSIM / "fat-tree-k4"
    names = NameSources(node_names=read_node_name_map(case / "ibhosts.txt"))
    # ibhosts names node GUIDs; iblinkinfo knows CAs by port GUID (node GUID + 1 on these adapters)
    imp = read_iblinkinfo(case / "iblinkinfo.txt", names=names)
    assert len(imp.fabric.hosts) == 16 and {h.found_by for h in imp.fabric.hcas} == {"node-name-map"}
    switches = read_node_name_map(case / "ibswitches.txt")
    assert len(switches) == 20 and all(v.startswith("MF0;") for v in switches.values())


def test_system_image_guids_group_hosts_where_the_format_has_them() -> None:
    case = IBSIM / "rail8-system-guid"
    for fmt in ("ibnetdiscover.txt", "ibnetdiscover-g.txt", "opensm-subnet.lst"):
        f = FORMATS[fmt](case / fmt).fabric
        assert sum(1 for h in f.hcas if h.found_by == "system-image-guid") == 42, fmt
    f = read_ibnetdiscover(case / "ibnetdiscover-p.txt").fabric
    assert len(f.unattributed_hcas) == 42
    assert {h.unattributed_reason for h in f.unattributed_hcas} == {
        "generic description 'MT4129 ConnectX7   Mellanox Technologies'"
    }
