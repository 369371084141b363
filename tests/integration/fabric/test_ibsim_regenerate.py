"""scripts/ibsim_fabrics.py still makes what tests/data/ibsim holds: run it (real ibsim, opensm and
infiniband-diags child processes) for one case and import every output it writes against the ground truth."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fabric_naming import slurm_partition
from gpupool.fabric import jsonio
from gpupool.fabric.parsers.attribution import NameSources
from gpupool.fabric.parsers.iblinkinfo import read_iblinkinfo
from gpupool.fabric.parsers.ibnetdiscover import read_ibnetdiscover
from gpupool.fabric.parsers.lst import read_lst
from gpupool.fabric.parsers.nodemap import read_node_name_map

ROOT = Path(__file__).resolve().parents[3]
TOOLS = ("ibsim", "opensm", "ibnetdiscover", "iblinkinfo")


@pytest.mark.skipif(
    any(shutil.which(t) is None for t in TOOLS),
    reason="needs ibsim-utils, opensm, infiniband-diags (.ci/run installs them)",
)
def test_regenerated_case_matches_its_truth_and_the_committed_one(tmp_path: Path) -> None:
    case = "rail8-node-name-map"
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "ibsim_fabrics.py"), "--only", case, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    made, committed = tmp_path / case, ROOT / "tests" / "data" / "ibsim" / case
    assert sorted(p.name for p in made.iterdir()) == sorted(p.name for p in committed.iterdir())
    for same in ("topology.net", "node-name-map", "case.json", "truth.json"):  # inputs are deterministic
        assert (made / same).read_text() == (committed / same).read_text(), same
    truth = jsonio.load(made / "truth.json")
    names = NameSources(node_names=read_node_name_map(made / "node-name-map"))
    for f in (
        read_ibnetdiscover(made / "ibnetdiscover.txt", names=names).fabric,
        read_ibnetdiscover(made / "ibnetdiscover-names.txt").fabric,
        read_iblinkinfo(made / "iblinkinfo-l.txt", names=names).fabric,
        read_lst(made / "opensm-subnet.lst", names=names).fabric,
    ):
        assert len(f.hosts) == len(truth.hosts) and slurm_partition(f) == slurm_partition(truth)
    assert json.loads((made / "case.json").read_text())["hosts"] == 4
