"""End to end, on the real server and two emulated agents: jobs that name an image run in Podman containers.

No registry is reachable here, so the image is made on the spot: a root file system holding Debian's static
busybox, imported with ``podman import`` once per test session (its tarball under the session's tmp dir).

- A 2-rank gang runs in the image: each rank sees its RANK, WORLD_SIZE, MASTER_ADDR and NCCL_IB_HCA (its
  GPUs' rail HCAs) inside the container, runs as its tenant's mapped user in its own working directory with
  the job's read-only mount, and the job finishes.
- A container's exit status is the rank's; one Podman cannot run (no such image) fails with Podman's reason.
- A cancelled container job whose workload ignores SIGTERM leaves no container behind (``podman ps -a``).
- A container past its time limit gets the checkpoint signal (SIGUSR1) inside, then stops as ``timeout``.
- An agent killed (-9) and restarted reattaches to its running container and still removes it on cancel.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from container_support import SANDBOX_CONF, busybox_image, podman
from e2e_cluster import HOSTS, Cluster, all_up
from gpupool.agent.containers import LABEL, NAME_PREFIX
from gpupool.fabric.export.nccl import nccl_ib_hca
from procs import until

AGENTS = HOSTS[:2]  # two 8-GPU nodes: a 2x8 gang spans both


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A busybox image in Podman's store, or a skip saying exactly what fails."""
    root = tmp_path_factory.mktemp("image")
    conf = root / "containers.conf"
    conf.write_text(SANDBOX_CONF)
    name = f"localhost/gpupool-test-busybox:{os.getpid()}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CONTAINERS_CONF", str(conf))  # the agents inherit it
        failed = busybox_image(root, name)
        if failed:
            pytest.skip(failed)
        try:
            yield name
        finally:
            podman("rmi", "-f", name)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, image: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("containers"), GPUPOOL_NODE_LOST_AFTER_S="10")
    try:
        for h in AGENTS:
            c.start_agent(h, extra=("--container-runtime", "podman"))
        until(lambda: all_up(c, AGENTS), 90, "the nodes up")
        for h in AGENTS:  # what places a job with an image on these nodes only
            assert c.nodes()[h]["labels"]["gpupool/containers"] == "yes"
        yield c
    finally:
        c.close()


def submit(c: Cluster, script: str, image: str, tasks: int = 1, gpus: int = 1, **kw: Any) -> str:
    body = {"command": ["/bin/sh", "-c", script], "image": image, "tasks": tasks, "gpus_per_task": gpus}
    r = c.http.post("/v1/jobs", json={**body, "tenant": "acme", **kw})
    assert r.status_code == 201, r.text
    return str(r.json()["job"]["id"])


def outputs(c: Cluster, job: str) -> dict[str, tuple[str, str]]:
    """Assignment id -> (host, stdout) of each rank of ``job`` that has written its log."""
    out = {}
    for host in AGENTS:
        for log in (c.root / host / "workloads").glob(f"{job}.*/stdout.log"):
            out[log.parent.name] = (host, log.read_text())
    return out


def containers_of(job: str) -> list[str]:
    ps = podman("ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}")
    assert ps.returncode == 0, ps.stderr
    return [n for n in ps.stdout.split() if n.startswith(f"{NAME_PREFIX}{job}.")]


def test_a_gang_runs_in_the_image_with_its_multi_node_environment(cluster: Cluster, image: str) -> None:
    c = cluster
    data = c.work / "dataset"
    data.mkdir()
    (data / "shard").write_text("shard-0\n")
    data.chmod(0o755)
    script = "env; echo uid=$(id -u); echo pwd=$(pwd); cat /data/shard; echo done"
    mounts = [{"source": str(data), "target": "/data", "read_only": True}]
    job = submit(c, script, image, tasks=2, gpus=8, mounts=mounts)
    until(lambda: c.job(job)["state"] in ("finished", "failed"), 60, "the container gang ended")
    assert c.job(job)["state"] == "finished", c.job(job)
    ranks = outputs(c, job)
    assert len(ranks) == 2
    (placed,) = c.placements(job)
    seen = set()
    for aid, (host, text) in ranks.items():
        lines = text.splitlines()
        assert lines[-1] == "done" and "shard-0" in lines
        env = dict(line.split("=", 1) for line in lines if "=" in line)
        assert env["container"] == "podman"  # set by Podman inside its containers: it ran in one
        rank = int(env["RANK"])
        seen.add(rank)
        assert env["WORLD_SIZE"] == "2" and env["MASTER_ADDR"] == "127.0.0.1"
        assert env["GPUPOOL_ASSIGNMENT_ID"] == aid and env["GPUPOOL_JOB_ID"] == job
        assert placed[rank][0] == host
        assert env["NCCL_IB_HCA"] == nccl_ib_hca(c.fabric, host, placed[rank][1])
        assert env["NCCL_IB_HCA"].startswith("=mlx5_")
        # Its own working directory, bound at its path, is where it starts.
        assert env["pwd"] == str(c.work / host / aid) == env.get("HOME", env["pwd"])
        if os.geteuid() == 0:  # the agents map tenant acme to a Unix user of its own
            assert env["uid"] != "0" and env["USER"] != "root"
    assert seen == {0, 1}
    until(lambda: not containers_of(job), 20, "the gang's containers removed")


def test_a_containers_exit_status_is_the_ranks(cluster: Cluster, image: str) -> None:
    c = cluster
    job = submit(c, "exit 7", image)
    until(lambda: c.job(job)["state"] == "failed", 60, "the failing container job failed")
    attempts = c.http.get(f"/v1/jobs/{job}/attempts").json()["attempts"]
    assert [(a["state"], a["exit_code"]) for a in attempts] == [("failed", 7)]
    assert "podman" not in attempts[0]["reason"]


def test_a_cancelled_container_job_leaves_no_container(cluster: Cluster, image: str) -> None:
    c = cluster
    # It ignores SIGTERM: the stop's SIGKILL kills Podman, and only the agent's removal ends the container.
    job = submit(c, "trap '' TERM; echo up; while true; do sleep 1; done", image)
    until(lambda: containers_of(job) and any("up" in t for _, t in outputs(c, job).values()), 60, "it runs")
    assert c.http.post(f"/v1/jobs/{job}/cancel").status_code == 200
    until(lambda: c.job(job)["state"] == "cancelled", 30, "the container job cancelled")
    until(lambda: not containers_of(job), 30, "no container of the job left")
    assert not containers_of(job)


def test_a_container_that_cannot_start_fails_with_the_runtimes_reason(cluster: Cluster, image: str) -> None:
    c = cluster
    job = submit(c, "true", "localhost/gpupool-no-such-image:1")  # no registry answers: the pull fails
    until(lambda: c.job(job)["state"] == "failed", 60, "the job with a missing image failed")
    (attempt,) = c.http.get(f"/v1/jobs/{job}/attempts").json()["attempts"]
    assert attempt["exit_code"] == 125
    assert "podman could not run the container (exit 125): Error: " in attempt["reason"], attempt
    assert "localhost/gpupool-no-such-image:1" in attempt["reason"], attempt
    # The container's own exit statuses are never taken for Podman's: exit 7 has no such reason (above).


def test_a_container_past_its_limit_gets_the_checkpoint_signal_then_stops_as_timeout(
    cluster: Cluster, image: str
) -> None:
    c = cluster
    out = c.work / "signals"
    out.mkdir()
    out.chmod(0o777)  # whichever user the tenant maps to may write here
    script = "trap 'echo usr1 > /out/signal' USR1; echo up; while true; do sleep 0.2; done"
    mounts = [{"source": str(out), "target": "/out"}]
    job = submit(c, script, image, mounts=mounts, time_limit_s=8, signal_lead_s=4)
    until(lambda: c.job(job)["state"] == "timeout", 60, "the container job timed out")
    assert (out / "signal").read_text() == "usr1\n"  # Podman and the container's init passed SIGUSR1 on
    until(lambda: not containers_of(job), 30, "its container removed")


def test_an_agent_killed_and_restarted_still_removes_its_running_container_on_cancel(
    cluster: Cluster, image: str
) -> None:
    """Invariant: the launch record carries the container's removal: a new agent on the same state directory
    reattaches to Podman (which outlived the old one) and removes the container when the job is cancelled."""
    c = cluster
    job = submit(c, "trap '' TERM; echo up; while true; do sleep 1; done", image)
    until(lambda: containers_of(job) and c.job(job)["state"] == "running", 60, "it runs")
    ((host, _),) = c.placements(job)[0]
    c.agents[host].kill()  # kill -9: no stop of its workloads, no clean-up
    c.agents[host].wait(10)
    assert containers_of(job)  # Podman and the container live on without the agent
    c.start_agent(host, extra=("--container-runtime", "podman"))
    until(lambda: all_up(c, AGENTS), 60, "the agent back")
    assert c.job(job)["state"] == "running"  # the new agent reports the rank it found still running
    assert c.http.post(f"/v1/jobs/{job}/cancel").status_code == 200
    until(lambda: c.job(job)["state"] == "cancelled", 30, "the container job cancelled")
    until(lambda: not containers_of(job), 30, "the reattached agent removed its container")
