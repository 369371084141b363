"""End to end, on the real server and an emulated agent: an elastic job resized for a deadline.

One 8-GPU node. An elastic job with a loose deadline runs alone and grows to its curve's fastest size (8
ranks). A tight newcomer needs 4 GPUs to make its deadline: the running job gets its checkpoint signal
(SIGUSR1), is stopped (reason ``resize``) and launched again on 4 ranks, each of which sees WORLD_SIZE=4,
while the newcomer runs on the other 4.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e_cluster import HOSTS, Cluster, ranks_of, running, shared_dir
from procs import until

CURVE = [[1, 10.0], [2, 18.0], [4, 30.0], [8, 40.0]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory.mktemp("elastic"), HOSTS[:1]) as c:
        yield c


def checkpointing_env_writer(out: Path) -> str:
    """Prints its env as one JSON line; on SIGUSR1 notes its rank and world size (its checkpoint); waits."""
    return (
        "import json, os, signal, time\n"
        f"out = {str(out)!r}\n"
        "def note(sig, frame):\n"
        "    open(out + '/ckpt-' + os.environ['RANK'] + '-of-' + os.environ['WORLD_SIZE'], 'w').write('x')\n"
        "signal.signal(signal.SIGUSR1, note)\n"
        "print(json.dumps({'env': dict(os.environ)}), flush=True)\n"
        "time.sleep(300)\n"
    )


def world_sizes(c: Cluster, job: str) -> list[str]:
    return sorted(r["env"]["WORLD_SIZE"] for r in ranks_of(c, job).values())


def test_a_running_elastic_job_is_shrunk_at_a_checkpoint_and_relaunched_with_the_new_world_size(
    cluster: Cluster,
) -> None:
    """Invariant: a resize is a checkpoint signal, then a stop, then a launch of the job at its new size whose
    every rank sees the new world size; the GPUs never hold more than the node has."""
    c = cluster
    out = shared_dir(c, "elastic")
    elastic = {"gpus": {"min": 1, "max": 8}, "curve": CURVE}
    big = c.submit(
        checkpointing_env_writer(out),
        tasks=1,
        gpus=1,
        estimated_runtime_s=4000.0,
        deadline_s=time.time() + 100_000,
        elastic=elastic,
    )
    until(lambda: world_sizes(c, big) == ["8"] * 8, 60, "the lone elastic job runs on 8 ranks")
    # 100 s of 1-GPU work by 60 s from now (5 s kept): 2 GPUs take 56 s, 4 take 33 s: it needs 4.
    tight = c.submit(
        checkpointing_env_writer(out),
        tasks=1,
        gpus=1,
        estimated_runtime_s=100.0,
        deadline_s=time.time() + 60,
        elastic=elastic,
    )
    until(lambda: world_sizes(c, tight) == ["4"] * 4, 60, "the tight job runs on 4 ranks")
    until(lambda: world_sizes(c, big) == ["4"] * 4 + ["8"] * 8, 60, "the big job relaunched on 4 ranks")
    assert sorted(p.name for p in out.iterdir()) == [f"ckpt-{r}-of-8" for r in sorted(map(str, range(8)))]
    placements = c.placements(big)
    assert [len(p) for p in placements] == [8, 4]
    events = c.http.get(f"/v1/jobs/{big}/events").json()["events"]
    stops = [e["data"]["reason"] for e in events if e["action"] == "job.pending"]
    assert stops == ["resize: resized from 8 to 4 GPUs"]
    assert len({g for p in (placements[-1], c.placements(tight)[-1]) for _, gpus in p for g in gpus}) == 8
