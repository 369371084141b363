import json
from pathlib import Path

import pytest

from gpupool.domain.errors import InputError
from gpupool.fabric import Domain, jsonio
from gpupool.fabric import generators as gen


@pytest.mark.parametrize("fabric", [gen.superpod(2), gen.fat_tree(4), gen.leaf_spine(3, 2, 4, oversubscription=3.0)])
def test_import_export_import_is_lossless(fabric, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "f.json"
    jsonio.save(fabric, path)
    again = jsonio.load(path)
    assert jsonio.dumps(again) == jsonio.dumps(fabric)
    assert again.hosts == fabric.hosts and again.hcas == fabric.hcas and again.links == fabric.links
    assert again.switches == fabric.switches
    for level in Domain:
        assert again.domain_ids(level).tolist() == fabric.domain_ids(level).tolist()


def test_derived_facts_are_recomputed_not_trusted(tmp_path: Path) -> None:
    data = jsonio.to_dict(gen.superpod(1))
    data["derived"]["rails"] = 99
    data["derived"]["tiers"] = {k: "core" for k in data["derived"]["tiers"]}
    f = jsonio.from_dict(data)
    assert f.rail_count == 8
    assert {s.tier.name for s in f.switches} == {"LEAF", "SPINE"}


def test_bad_documents_name_the_problem(tmp_path: Path) -> None:
    p = tmp_path / "bad.json"
    p.write_text('{"format": "gpupool-fabric",\n "version": 1,\n "switches": [}', encoding="utf-8")
    with pytest.raises(InputError, match=r"bad\.json:3: invalid JSON"):
        jsonio.load(p)
    p.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(InputError, match="not a gpupool-fabric document"):
        jsonio.load(p)
    p.write_text(json.dumps({"format": "gpupool-fabric", "version": 7}))
    with pytest.raises(InputError, match="unsupported gpupool-fabric version 7"):
        jsonio.load(p)
    data = jsonio.to_dict(gen.superpod(1))
    del data["hosts"][0]["name"]
    p.write_text(json.dumps(data))
    with pytest.raises(InputError, match="malformed 'hosts' section"):
        jsonio.load(p)
    p.write_bytes(b"\xff\xfe{}")
    with pytest.raises(InputError, match="not UTF-8"):
        jsonio.load(p)
    with pytest.raises(InputError, match="cannot read"):
        jsonio.load(tmp_path / "missing.json")


def test_inconsistent_fabric_names_the_file(tmp_path: Path) -> None:
    data = jsonio.to_dict(gen.superpod(1))
    data["links"][0][0] = "ffffffffffffffff"
    p = tmp_path / "f.json"
    p.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"f\.json: inconsistent fabric: link .* undeclared node ffffffffffffffff"):
        jsonio.load(p)


def test_a_gpu_without_numa_node_reads_as_unknown() -> None:
    data = jsonio.to_dict(gen.superpod(1))
    assert data["hosts"][0]["gpus"][0]["numa_node"] == 0  # the generator sets node 0 explicitly
    del data["hosts"][0]["gpus"][0]["numa_node"]
    host = jsonio.from_dict(data).hosts[0]
    assert host.gpus[0].numa_node == -1  # unknown, as an HCA's is; never a guessed node 0
    assert host.gpus[1].numa_node == 0
