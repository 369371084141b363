"""End to end: a gang's lifecycle survives a server kill -9 and heartbeats spread over two replicas.

Real server processes and real ``gpupool agent --emulate`` processes on loopback; each rank is a real child
that writes a ready file and exits 0 when the test drops its go file, so the test decides which rank ends
when (relative to the fault). Only two of the SuperPOD's four hosts have agents: a 2x8 gang fills both.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from e2e_cluster import Cluster
from procs import pg_schema, until

HOSTS = ("dgx001", "dgx002")


def go_on_file(out: Path) -> str:
    """A rank that says it is ready (its assignment id and host, by its working directory), then exits 0 once
    ``go-<RANK>`` exists."""
    return (
        "import json, os, time\n"
        f"out = {str(out)!r}\n"
        "rank = os.environ['RANK']\n"
        "json.dump({'aid': os.environ['GPUPOOL_ASSIGNMENT_ID'], 'cwd': os.getcwd()},"
        " open(out + '/ready-' + rank + '.tmp', 'w'))\n"
        "os.replace(out + '/ready-' + rank + '.tmp', out + '/ready-' + rank)\n"
        "while not os.path.exists(out + '/go-' + rank):\n"
        "    time.sleep(0.05)\n"
    )


def shared_out(c: Cluster) -> Path:
    """A folder every workload may write to, whichever user the agent runs it as."""
    out = c.work / "out"
    out.mkdir(exist_ok=True)
    out.chmod(0o777)
    c.out = out  # type: ignore[attr-defined]
    return out


def nodes_up(c: Cluster) -> bool:
    nodes = c.nodes()
    return all(nodes.get(h, {}).get("state") == "up" for h in HOSTS)


def rank_rows(url: str, job_id: str) -> list[dict[str, Any]]:
    """The job's stored ranks, read straight from the database the servers share."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            q = sa.text("SELECT task_index, host, started_s, exited_s, exit_code FROM allocations WHERE job_id = :j")
            return [dict(r._mapping) for r in conn.execute(q, {"j": job_id})]
    finally:
        engine.dispose()


@pytest.fixture
def two_hosts(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    shared_out(c)
    try:
        for h in HOSTS:
            c.start_agent(h)
        until(lambda: nodes_up(c), 90, "nodes up")
        yield c
    finally:
        c.close()


def test_a_gang_whose_ranks_exit_either_side_of_a_server_kill9_finishes_and_frees_its_gpus(two_hosts: Cluster) -> None:
    """Invariant: a gang's progress is durable. Rank 0 exits 0 and its end is stored; the server is killed
    with -9; rank 1 exits 0 while no server runs (its agent keeps the end until a server acknowledges it);
    the restarted server stores it and the job is finished from what the database holds, its 16 GPUs free
    (a second 2x8 gang runs on them)."""
    c = two_hosts
    url = f"sqlite:///{c.root / 'data' / 'gpupool.db'}"
    job = c.submit(go_on_file(c.out), tasks=2, gpus=8)
    until(lambda: c.job(job)["state"] == "running", 30, "gang running")
    until(lambda: all((c.out / f"ready-{r}").exists() for r in (0, 1)), 20, "both ranks ready")
    (c.out / "go-0").touch()
    until(lambda: any(r["exited_s"] is not None for r in rank_rows(url, job)), 20, "rank 0's exit stored")
    c.server.send_signal(signal.SIGKILL)
    c.server.wait(10)
    (c.out / "go-1").touch()
    # Rank 1 has exited (its agent holds the end, unacknowledged) before any server runs again.
    ready1 = json.loads((c.out / "ready-1").read_text())
    until(lambda: not _alive(ready1), 20, "rank 1 exited")
    c.restart()
    until(lambda: c.job(job)["state"] == "finished", 30, "gang finished after the restart")
    assert rank_rows(url, job) == []  # its allocation is gone: the GPUs are free
    (c.out / "second").mkdir()
    (c.out / "second").chmod(0o777)
    second = c.submit(go_on_file(c.out / "second"), tasks=2, gpus=8)
    until(lambda: c.job(second)["state"] == "running", 30, "a second 2x8 gang runs on the freed GPUs")


def _alive(ready: dict[str, Any]) -> bool:
    """Whether a process still runs in the rank's working directory (its cwd link points there)."""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.readlink(f"/proc/{pid}/cwd") == ready["cwd"]:
                    return True
            except OSError:
                continue
    return False


def test_two_replicas_each_hearing_one_rank_run_and_finish_the_gang(tmp_path: Path) -> None:
    """Invariant: no replica keeps a gang's progress in memory. Two ``gpupool server`` processes share one
    PostgreSQL database; each agent talks to a different one, so each replica hears one rank only. The gang
    still becomes running (both starts are stored, whoever got them), then finished once both exit 0, and
    its allocation is gone."""
    gen = pg_schema()
    url = next(gen)
    c = Cluster(tmp_path, GPUPOOL_DATABASE_URL=url, GPUPOOL_LEADER_RETRY_S="0.2")
    shared_out(c)
    other, other_url = c.replica()
    try:
        c.start_agent(HOSTS[0])
        c.start_agent(HOSTS[1], other_url)
        until(lambda: nodes_up(c), 90, "nodes up")
        job = c.submit(go_on_file(c.out), tasks=2, gpus=8)
        until(lambda: c.job(job)["state"] == "running", 30, "gang running")
        until(lambda: _both_ready(c), 20, "both ranks ready")  # one per 8-GPU host: one per replica's agent
        (c.out / "go-0").touch()
        (c.out / "go-1").touch()
        until(lambda: c.job(job)["state"] == "finished", 30, "gang finished")
        assert rank_rows(url, job) == []
    finally:
        other.send_signal(signal.SIGTERM)
        try:
            other.wait(15)
        except subprocess.TimeoutExpired:
            other.kill()
        c.close()
        next(gen, None)


def _both_ready(c: Cluster) -> tuple[int, int] | None:
    return (0, 1) if all((c.out / f"ready-{r}").exists() for r in (0, 1)) else None


def keeps_beating(out: Path, name: str) -> str:
    """A workload that ignores SIGTERM, writes its start time to ``<name>.start``, then the time to
    ``<name>.alive`` every 20 ms (renamed into place) while it lives: its last value is when it was last
    alive on its GPUs."""
    return (
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"path = {str(out / name)!r}\n"
        "open(path + '.start.tmp', 'w').write(repr(time.time()))\n"
        "os.replace(path + '.start.tmp', path + '.start')\n"
        "while True:\n"
        "    open(path + '.tmp', 'w').write(repr(time.time()))\n"
        "    os.replace(path + '.tmp', path + '.alive')\n"
        "    time.sleep(0.02)\n"
    )


def test_a_cancelled_job_keeps_its_gpus_until_its_process_is_gone(tmp_path: Path) -> None:
    """Invariant: no two live processes on one GPU. A job using all 8 GPUs of the only host is cancelled; its
    process ignores SIGTERM and lives until the agent's SIGKILL (3 s grace). A job waiting for those 8 GPUs
    starts only after that process's last sign of life (both workloads' own timestamp files say so), and
    the cancelled process did outlive its cancel (so the hold was tested)."""
    c = Cluster(tmp_path, GPUPOOL_STOP_GRACE_S="3.0")
    shared_out(c)
    try:
        c.start_agent(HOSTS[0])
        until(lambda: c.nodes().get(HOSTS[0], {}).get("state") == "up", 90, "node up")
        old = c.submit(keeps_beating(c.out, "old"), tasks=1, gpus=8)
        until(lambda: (c.out / "old.alive").exists(), 30, "the old job alive")
        new = c.submit(keeps_beating(c.out, "new"), tasks=1, gpus=8)
        cancelled_at = time.time()
        assert c.http.post(f"/v1/jobs/{old}/cancel").status_code == 200
        until(lambda: (c.out / "new.start").exists(), 30, "the new job started")
        first_new = float((c.out / "new.start").read_text())
        last_old = float((c.out / "old.alive").read_text())
        assert first_new > last_old, f"new job alive at {first_new}, the old one still at {last_old}"
        assert last_old > cancelled_at + 2.0, "the old process outlived its cancel by the grace"
        until(lambda: c.job(new)["state"] == "running", 20, "the new job running")  # its report follows its start
    finally:
        c.close()
