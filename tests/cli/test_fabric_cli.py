"""The `gpupool fabric` commands, run as a user runs them: a real process, real files, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpupool.fabric import Domain, Fabric, jsonio

DATA = Path(__file__).parent.parent / "data"
DGX = DATA / "ibnetdiscover" / "dgx-h100-ndr-superpod-qm9701-leaf-spine.txt"


def gpupool(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpupool", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def ok(*args: str | Path, cwd: Path) -> str:
    r = gpupool(*args, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_generate_superpod_show_json(tmp_path: Path) -> None:
    ok("fabric", "generate", "superpod", "--sus", "4", "-o", "sp.json", cwd=tmp_path)
    s = json.loads(ok("fabric", "show", "sp.json", "--json", cwd=tmp_path))
    assert (s["hosts"], s["gpus"], s["hcas"], s["unattributed_hcas"]) == (127, 1016, 1016, 0)
    assert s["switches"] == {"leaf": 32, "spine": 16, "core": 0}
    assert (s["rails"], s["scalable_units"]) == (8, 4)
    assert "scalable units" in ok("fabric", "show", "sp.json", cwd=tmp_path)


def test_generators_from_the_command_line(tmp_path: Path) -> None:
    ok("fabric", "generate", "fat-tree", "--k", "4", "-o", "ft.json", cwd=tmp_path)
    s = json.loads(ok("fabric", "show", "ft.json", "--json", cwd=tmp_path))
    assert (s["hosts"], s["switches"]) == (16, {"leaf": 8, "spine": 8, "core": 4})
    ok(
        "fabric", "generate", "leaf-spine", "--leaves", "4", "--spines", "2", "--hosts-per-leaf", "6",
        "--gpus-per-host", "4", "--oversubscription", "3", "-o", "ls.json", cwd=tmp_path,
    )  # fmt: skip
    s = json.loads(ok("fabric", "show", "ls.json", "--json", cwd=tmp_path))
    assert (s["hosts"], s["gpus"], s["oversubscription"]) == (24, 96, {"leaf": 3.0})


def test_import_dgx_ibnetdiscover_then_slurm_round_trip(tmp_path: Path) -> None:
    r = gpupool("fabric", "import", "ibnetdiscover", DGX, "-o", "dgx.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "40 SHARP aggregation nodes left out" in r.stderr and "74 HCAs unattributed" in r.stderr
    s = json.loads(ok("fabric", "show", "dgx.json", "--json", cwd=tmp_path))
    assert s["switches"] == {"leaf": 31, "spine": 9, "core": 0}
    assert (s["hosts"], s["unattributed_hcas"], s["rails"], s["scalable_units"]) == (120, 74, 4, 8)

    conf = ok("fabric", "export", "slurm", "dgx.json", cwd=tmp_path)
    (tmp_path / "topology.conf").write_text(conf)
    ok("fabric", "import", "slurm", "topology.conf", "-o", "back.json", cwd=tmp_path)
    original, back = jsonio.load(tmp_path / "dgx.json"), jsonio.load(tmp_path / "back.json")

    def partition(f: Fabric) -> list[list[str]]:
        su = f.domain_ids(Domain.SU).tolist()
        return sorted(sorted(f.hosts[h].name for h in range(len(f.hosts)) if su[h] == v) for v in set(su))

    assert partition(back) == partition(original)
    assert len(partition(original)) == 8


def test_exports_and_picture(tmp_path: Path) -> None:
    ok("fabric", "generate", "superpod", "--sus", "2", "-o", "sp.json", cwd=tmp_path)
    block = ok("fabric", "export", "slurm", "--block", "sp.json", cwd=tmp_path)
    assert "BlockName=su01 Nodes=dgx[001-032]" in block and "BlockName=su02 Nodes=dgx[033-063]" in block
    assert "block_sizes" in ok("fabric", "export", "slurm", "--block", "--yaml", "sp.json", cwd=tmp_path)
    assert (
        ok("fabric", "export", "nccl", "sp.json", "dgx005", "--gpus", "0,3", cwd=tmp_path)
        == "NCCL_IB_HCA==mlx5_0:1,mlx5_3:1\n"
    )
    ok("fabric", "draw", "sp.json", "-o", "sp.svg", cwd=tmp_path)
    assert (tmp_path / "sp.svg").read_text().count('id="host-dgx') == 63
    ok("fabric", "draw", "sp.json", "-o", "sp.png", cwd=tmp_path)
    assert (tmp_path / "sp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (DGX.read_text()[:700], "truncated.txt:"),
        ('Switch 8 "S-1" # "x" enhanced port 0 lid 1 lmc 0\nSwitchName=s1 Nodes=a[1-2]\n', "truncated.txt:"),
    ],
)
def test_malformed_input_exits_2_with_file_and_line(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "truncated.txt").write_text(content)
    r = gpupool("fabric", "import", "ibnetdiscover", "truncated.txt", "-o", "x.json", cwd=tmp_path)
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "x.json").exists()


def test_bad_encoding_and_missing_files_exit_2(tmp_path: Path) -> None:
    (tmp_path / "bad.txt").write_bytes(DGX.read_bytes()[:2000] + b"\xff\xfe\n")
    r = gpupool("fabric", "import", "ibnetdiscover", "bad.txt", "-o", "x.json", cwd=tmp_path)
    assert r.returncode == 2 and "bad.txt:" in r.stderr and "Traceback" not in r.stderr
    r = gpupool("fabric", "show", "nope.json", cwd=tmp_path)
    assert r.returncode == 2 and "nope.json: cannot read" in r.stderr
    (tmp_path / "t.conf").write_text("SwitchName=s1 Nodes=a[1-2]\nSwitchName=s2 Switches=s9\n")
    r = gpupool("fabric", "import", "slurm", "t.conf", "-o", "x.json", cwd=tmp_path)
    assert r.returncode == 2 and "t.conf:2" in r.stderr and "Traceback" not in r.stderr


def test_vendor_descriptions_and_a_node_name_map(tmp_path: Path) -> None:
    """The issue's fabric: HCAs that say only 'MT25408 ConnectX Mellanox Technologies', names from opensm's map."""
    ok(
        "fabric",
        "generate",
        "leaf-spine",
        "--leaves",
        "2",
        "--spines",
        "1",
        "--hosts-per-leaf",
        "2",
        "-o",
        "g.json",
        cwd=tmp_path,
    )
    dump = ok("fabric", "export", "ibnetdiscover", "g.json", cwd=tmp_path)
    guids = [line.split("=0x")[1] for line in dump.splitlines() if line.startswith("caguid=")]
    for i in range(len(guids)):
        dump = dump.replace(f'"node{i + 1:03d} mlx5_0"', '"MT25408 ConnectX Mellanox Technologies"')
    (tmp_path / "dump.txt").write_text(dump)
    (tmp_path / "site.map").write_text("".join(f'0x{g} "r510gluster{i}"\n' for i, g in enumerate(guids)))
    r = gpupool("fabric", "import", "ibnetdiscover", "dump.txt", "-o", "none.json", cwd=tmp_path)
    assert r.returncode == 0 and "0 hosts" in r.stderr and "4 HCAs unattributed" in r.stderr
    why = ok("fabric", "show", "none.json", "--unattributed", cwd=tmp_path)
    assert why.count("generic description 'MT25408 ConnectX Mellanox Technologies'") == 4
    r = gpupool(
        "fabric", "import", "ibnetdiscover", "dump.txt", "--node-name-map", "site.map", "-o", "f.json", cwd=tmp_path
    )
    assert r.returncode == 0 and "4 hosts" in r.stderr, r.stderr
    s = json.loads(ok("fabric", "show", "f.json", "--json", cwd=tmp_path))
    assert s["found_by"] == {"hosts": {"node-name-map": 4}, "hcas": {"node-name-map": 4}}
    assert "hosts found by: node-name-map 4 (4 HCAs)" in ok("fabric", "show", "f.json", cwd=tmp_path)
    assert "Nodes=r510gluster[0-1]" in ok("fabric", "export", "slurm", "f.json", cwd=tmp_path)


@pytest.mark.parametrize(
    ("option", "content", "where"),
    [
        ("--node-name-map", '0x{g} "a"\n0x00000000deadbeef "ghost"\n', "site.map:2"),
        ("--node-name-map", '0x{g} "a\n', "site.map:1"),
        ("--host-map", "guid,host\n0x{g},a\n0x{g}\n", "site.map:3"),
        ("--host-map", "0x{g} a\nzz b\n", "site.map:2"),
    ],
)
def test_bad_maps_exit_2_with_file_and_line_and_write_nothing(
    tmp_path: Path, option: str, content: str, where: str
) -> None:
    ok(
        "fabric",
        "generate",
        "leaf-spine",
        "--leaves",
        "1",
        "--spines",
        "1",
        "--hosts-per-leaf",
        "2",
        "-o",
        "g.json",
        cwd=tmp_path,
    )
    dump = ok("fabric", "export", "ibnetdiscover", "g.json", cwd=tmp_path)
    (tmp_path / "dump.txt").write_text(dump)
    guid = next(line.split("=0x")[1] for line in dump.splitlines() if line.startswith("caguid="))
    (tmp_path / "site.map").write_text(content.format(g=guid))
    r = gpupool("fabric", "import", "ibnetdiscover", "dump.txt", option, "site.map", "-o", "x.json", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert where in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "x.json").exists()


IBSIM = DATA / "ibsim" / "rail8-node-name-map"


@pytest.mark.parametrize(
    ("command", "name"),
    [
        ("iblinkinfo", "iblinkinfo.txt"),
        ("iblinkinfo", "iblinkinfo-l.txt"),
        ("lst", "opensm-subnet.lst"),
        ("ibnetdiscover", "ibnetdiscover-g.txt"),
    ],
)
def test_new_formats_import_and_refuse_truncated_files(tmp_path: Path, command: str, name: str) -> None:
    r = gpupool(
        "fabric", "import", command, IBSIM / name, "--node-name-map", IBSIM / "node-name-map", "-o", "f.json",
        cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0 and "wrote f.json: 4 hosts" in r.stderr, r.stderr
    text = (IBSIM / name).read_text().split("\n")
    cut = len(text) // 2
    (tmp_path / "cut.txt").write_text("\n".join([*text[:cut], text[cut][: len(text[cut]) // 2]]))
    r = gpupool("fabric", "import", command, "cut.txt", "-o", "x.json", cwd=tmp_path)
    assert r.returncode == 2 and "cut.txt:" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.json").exists()


def test_an_import_without_gpus_is_refused_clearly_then_merged(tmp_path: Path) -> None:
    """`sim run --fabric` and `export nccl` on an ibnetdiscover import crashed; now they say what to do."""
    ok(
        "fabric",
        "import",
        "ibnetdiscover",
        DATA / "ibsim" / "fat-tree-k4" / "ibnetdiscover.txt",
        "-o",
        "f.json",
        cwd=tmp_path,
    )
    r = gpupool("fabric", "export", "nccl", "f.json", "node001", cwd=tmp_path)
    assert (
        r.returncode == 2 and "has no GPUs" in r.stderr and "fabric merge" in r.stderr and "Traceback" not in r.stderr
    )
    (tmp_path / "trace.csv").write_text("job_id,submission_time,duration,num_gpu\nj1,0,600,8\n")
    r = gpupool(
        "sim", "run", "--trace", "trace.csv", "--format", "itp", "--fabric", "f.json", "--policy", "fifo",
        "--placement", "topology", "--out", "o", cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2 and "has no GPUs" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = gpupool("fabric", "merge", "f.json", "-o", "m.json", "--gpus-per-host", "8", cwd=tmp_path)
    assert r.returncode == 2 and "--gpu-model" in r.stderr
    r = gpupool(
        "fabric", "merge", "f.json", "-o", "m.json", "--gpus-per-host", "8", "--gpu-model", "H100", cwd=tmp_path
    )
    assert r.returncode == 0 and "128 GPUs" in r.stderr and "16 from --gpus-per-host" in r.stderr, r.stderr
    assert ok("fabric", "export", "nccl", "m.json", "node001", "--gpus", "0", cwd=tmp_path) == "NCCL_IB_HCA==mlx5_0:1\n"
    (tmp_path / "inv" / "node999").mkdir(parents=True)
    (tmp_path / "inv" / "node999" / "topo.txt").write_text("x")
    r = gpupool("fabric", "merge", "f.json", "-o", "n.json", "--inventory", "inv", cwd=tmp_path)
    assert r.returncode == 2 and "topo.txt" in r.stderr and not (tmp_path / "n.json").exists()


def test_topograph_block_file_labels_and_nvlink_blocks(tmp_path: Path) -> None:
    block = DATA / "slurm-topology" / "topograph-expected-block-dra.conf.txt"
    r = gpupool("fabric", "import", "slurm", block, "--nvlink-blocks", "-o", "b.json", cwd=tmp_path)
    assert r.returncode == 0 and "96 hosts" in r.stderr and "parse_block_conf" not in r.stderr, r.stderr
    out = ok("fabric", "export", "slurm", "b.json", "--block", "--nvlink", cwd=tmp_path)
    assert "BlockName=nvl-1-1 Nodes=srv[1101-1108]" in out
    labels = ok("fabric", "export", "labels", "b.json", "--style", "topograph", cwd=tmp_path)
    (tmp_path / "nodes.json").write_text(labels)
    assert json.loads(labels)["items"][0]["metadata"]["labels"]["accelerator.topograph.run/domain"] == "nvl-1-1"
    ok("fabric", "import", "labels", "nodes.json", "-o", "l.json", cwd=tmp_path)
    back = jsonio.load(tmp_path / "l.json")
    assert {h.name: h.nvlink_domain for h in back.hosts} == {
        h.name: h.nvlink_domain for h in jsonio.load(tmp_path / "b.json").hosts
    }
    (tmp_path / "bad.json").write_text(
        labels.replace('"fabric.topograph.run/tier-0"', '"fabric.topograph.run/tier-9"', 1)
    )
    r = gpupool("fabric", "import", "labels", "bad.json", "-o", "x.json", cwd=tmp_path)
    assert (
        r.returncode == 2 and "bad.json:" in r.stderr and "no tier-" in r.stderr and not (tmp_path / "x.json").exists()
    )
    r = gpupool("fabric", "export", "labels", "b.json", "--style", "k8s", cwd=tmp_path)
    assert r.returncode == 2 and "unknown style" in r.stderr


def test_diff_after_maintenance_exits_1_and_lists_what_dropped(tmp_path: Path) -> None:
    case = DATA / "ibsim" / "fat-tree-k4" / "ibnetdiscover.txt"
    text = case.read_text()
    # the next day: node016's cable is pulled (its CA block and the switch's port line are gone), and the
    # link of node001 trained at 4xQDR instead of 4xEDR
    blocks = [b for b in text.split("\n\n") if '\t# "node016 mlx5_0"\n' not in b]  # its own Ca block
    lines = [line for line in "\n\n".join(blocks).split("\n") if '"node016 mlx5_0"' not in line]  # and the leaf's line
    n = next(i for i, line in enumerate(lines) if '"node001 mlx5_0"' in line and line.startswith("["))
    lines[n] = lines[n].replace("4xEDR", "4xQDR")
    (tmp_path / "after.txt").write_text("\n".join(lines))
    ok("fabric", "import", "ibnetdiscover", case, "-o", "before.json", cwd=tmp_path)
    ok("fabric", "import", "ibnetdiscover", "after.txt", "-o", "after.json", cwd=tmp_path)
    r = gpupool("fabric", "diff", "before.json", "after.json", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert "LOST" in r.stdout and "hosts gone (1): node016" in r.stdout
    assert "links slower (1):" in r.stdout and "4xEDR -> 4xQDR" in r.stdout
    d = json.loads(gpupool("fabric", "diff", "before.json", "after.json", "--json", cwd=tmp_path).stdout)
    assert d["lost"] and d["hosts"]["gone"] == ["node016"] and len(d["links"]["gone"]) == 1
    r = gpupool("fabric", "diff", "before.json", "before.json", cwd=tmp_path)
    assert r.returncode == 0 and "no change" in r.stdout
    r = gpupool("fabric", "diff", "before.json", "nope.json", cwd=tmp_path)
    assert r.returncode == 2 and "nope.json" in r.stderr
