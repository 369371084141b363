"""End to end, on the real server and emulated agents: ``gpupool sbatch`` scripts behave as in Slurm.

An ``#SBATCH --array`` script runs once per element, each with its SLURM_ARRAY_TASK_ID, SLURM_ARRAY_JOB_ID
and SLURM_JOB_ID, its output in Slurm's ``slurm-%A_%a.out`` in the submit directory; a second script, given
``--dependency=afterok:<array>`` on the command line (over its own #SBATCH lines), starts only after every
element ended, on 2 nodes, each task seeing its SLURM_NODEID, SLURM_PROCID, SLURM_NNODES and the node list.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e_cluster import HOSTS, Cluster, running
from procs import until

AGENTS = HOSTS[:2]  # 16 GPUs

ARRAY_SCRIPT = """#!/bin/sh
#SBATCH --job-name=sweep
#SBATCH --array=0-2
#SBATCH --gres=gpu:1
#SBATCH --time=10
d=results/$SLURM_ARRAY_TASK_ID
mkdir -p results
date +%s.%N > $d.start
echo "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID as $SLURM_JOB_ID args $*"
sleep 3
date +%s.%N > $d.end
"""

GANG_SCRIPT = """#!/bin/sh
#SBATCH -J gather --nodes=2 --ntasks-per-node=1
#SBATCH --gres=gpu:8
#SBATCH --dependency=afterany:nothing-yet
#SBATCH -o gather-%j-%t.log
date +%s.%N > results/gather.$SLURM_PROCID.start
echo "$SLURM_JOB_NAME node $SLURM_NODEID proc $SLURM_PROCID of $SLURM_NTASKS on $SLURM_NNODES: $SLURM_JOB_NODELIST gpus $SLURM_GPUS_ON_NODE"
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory.mktemp("sbatch"), AGENTS) as c:
        yield c


def sbatch(c: Cluster, token: str, cwd: Path, *args: str) -> str:
    env = {**os.environ, "GPUPOOL_SERVER": c.url, "GPUPOOL_TOKEN": token, "GPUPOOL_CONFIG": "/nonexistent"}
    r = subprocess.run(
        [sys.executable, "-m", "gpupool", "sbatch", "--parsable", *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_an_sbatch_array_and_a_dependent_gang_behave_as_in_slurm(cluster: Cluster) -> None:
    c = cluster
    token = c.http.post("/v1/tokens", json={"tenant": "acme"}).json()["token"]
    submit_dir = c.work / "submit"
    submit_dir.mkdir()
    submit_dir.chmod(0o777)  # the jobs run as acme's user
    (submit_dir / "sweep.sh").write_text(ARRAY_SCRIPT)
    (submit_dir / "gather.sh").write_text(GANG_SCRIPT)
    array = sbatch(c, token, submit_dir, "sweep.sh", "lr=0.1")
    gang = sbatch(c, token, submit_dir, f"--dependency=afterok:{array}", "gather.sh")
    until(lambda: c.job(gang)["state"] == "finished", 120, "the dependent gang finished")
    assert c.http.get(f"/v1/arrays/{array}").json()["states"] == {"finished": 3}

    results = submit_dir / "results"
    ends = [float((results / f"{i}.end").read_text()) for i in range(3)]
    starts = [float((results / f"gather.{r}.start").read_text()) for r in range(2)]
    assert max(ends) <= min(starts), (ends, starts)
    for i in range(3):
        out = (submit_dir / f"slurm-{array}_{i}.out").read_text()
        assert out == f"task {i} of {array} as {array}.{i} args lr=0.1\n", out
    nodes = "dgx[001-002]"
    for r in range(2):
        log = (submit_dir / f"gather-{gang}-{r}.log").read_text().strip()
        assert log.startswith("gather node ") and f" proc {r} of 2 on 2: {nodes} gpus 8" in log, log
    node_ids = {(submit_dir / f"gather-{gang}-{r}.log").read_text().split()[2] for r in range(2)}
    assert node_ids == {"0", "1"}
