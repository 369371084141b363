import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpupool.fabric import Fabric
from gpupool.fabric import generators as gen
from gpupool.fabric.export.draw import draw
from gpupool.fabric.parsers.slurm import read_topology_conf

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TREE = Path(__file__).parents[2] / "data" / "slurm-topology" / "topograph-expected-tree-oci-sim.conf.txt"


def svg_ids(path: Path) -> list[str]:
    root = ET.parse(path).getroot()  # raises on malformed XML
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return [el.attrib["id"] for el in root.iter() if "id" in el.attrib]


@pytest.mark.parametrize(
    "fabric",
    [gen.superpod(2), gen.fat_tree(4), gen.leaf_spine(3, 2, 5), read_topology_conf(TREE)],
    ids=["superpod-2", "fat-tree-4", "leaf-spine", "slurm-import"],
)
def test_svg_is_valid_and_has_one_tile_per_host(fabric: Fabric, tmp_path: Path) -> None:
    out = tmp_path / "fabric.svg"
    draw(fabric, out)
    ids = svg_ids(out)
    host_ids = [i for i in ids if i.startswith("host-")]
    assert sorted(host_ids) == sorted(f"host-{h.name}" for h in fabric.hosts)
    assert "switches-leaf" in ids


def test_png_by_suffix(tmp_path: Path) -> None:
    out = tmp_path / "fabric.PNG"
    draw(gen.superpod(1), out, title="one SU")
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_three_tier_fabric_draws_every_tier(tmp_path: Path) -> None:
    out = tmp_path / "big.svg"
    draw(gen.superpod(5), out)
    ids = svg_ids(out)
    assert {"switches-leaf", "switches-spine", "switches-core"} <= set(ids)
    assert sum(i.startswith("host-") for i in ids) == 159


def test_unknown_suffix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"\.svg or \.png"):
        draw(gen.superpod(1), tmp_path / "fabric.jpg")
    assert not (tmp_path / "fabric.jpg").exists()
