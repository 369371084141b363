"""End to end, on the real server and emulated agents: time limits, retries and the multi-node launch
environment as a job's own processes see them.

- A job past its time limit gets its checkpoint signal (SIGUSR1) first, then is stopped: state ``timeout``.
- A job that fails every time with ``retry: {count: 2}`` runs three times (GPUPOOL_ATTEMPT 1, 2, 3), then is
  ``failed``, with three attempts recorded.
- A gang's ranks see torchrun's layout (NNODES, NODE_RANK, LOCAL_WORLD_SIZE, LOCAL_RANK) and an MPI hostfile
  (GPUPOOL_HOSTFILE, slots per host) that agree with where the scheduler placed them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e_cluster import HOSTS, Cluster, ranks_when, running, shared_dir
from procs import until

LEAD_S = 2.0


AGENTS = HOSTS[:2]  # two 8-GPU nodes: a 2x8 gang spans both


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory.mktemp("limits"), AGENTS, GPUPOOL_SCHEDULER__TIME_LIMIT_LEAD_S=str(LEAD_S)) as c:
        yield c


def waits_for_its_limit(out: Path) -> str:
    """Notes when it got SIGUSR1, and says it is alive every 50 ms until it is stopped."""
    return (
        "import os, signal, time\n"
        f"out = {str(out)!r}\n"
        "def note(sig, frame):\n"
        "    open(out + '/signal', 'w').write(repr(time.time()))\n"
        "signal.signal(signal.SIGUSR1, note)\n"
        "open(out + '/start', 'w').write(repr(time.time()))\n"
        "while True:\n"
        "    open(out + '/alive.tmp', 'w').write(repr(time.time()))\n"
        "    os.replace(out + '/alive.tmp', out + '/alive')\n"
        "    time.sleep(0.05)\n"
    )


def test_a_job_past_its_limit_gets_the_signal_then_stops_as_timeout(cluster: Cluster) -> None:
    """Invariant: the time limit is the job's contract: a checkpoint signal within the lead, then a stop at
    the limit, recorded as timeout (not failed, not finished) with the reason."""
    c = cluster
    out = shared_dir(c, "limit")
    job = c.submit(waits_for_its_limit(out), tasks=1, gpus=8, time_limit_s=5.0)
    until(lambda: (out / "start").exists(), 30, "the job started")
    until(lambda: c.job(job)["state"] == "timeout", 30, "the job timed out")
    started = float((out / "start").read_text())
    assert (out / "signal").exists(), "no checkpoint signal before the stop"
    signalled = float((out / "signal").read_text())
    # The server counts from the start it stored, which is after the process started.
    assert signalled >= started + 5.0 - LEAD_S - 0.25
    until(lambda: time.time() - float((out / "alive").read_text()) > 1.0, 20, "the process stopped")
    assert float((out / "alive").read_text()) > signalled, "it lived on after its signal, until the stop"
    rec = c.job(job)
    assert rec["reason_code"] == "time_limit" and "past its time limit of 5 s" in rec["reason"]
    attempts = c.http.get(f"/v1/jobs/{job}/attempts").json()["attempts"]
    assert [a["state"] for a in attempts] == ["timeout"]


def test_a_failing_job_is_retried_twice_then_failed_with_three_attempts(cluster: Cluster) -> None:
    """Invariant: a run that fails uses one retry; with none left the job fails; every run is kept."""
    c = cluster
    out = shared_dir(c, "retries")
    code = (
        "import os, sys\n"
        f"open({str(out)!r} + '/attempt-' + os.environ['GPUPOOL_ATTEMPT'], 'w').write(os.environ['GPUPOOL_ASSIGNMENT_ID'])\n"
        "sys.exit(3)\n"
    )
    job = c.submit(code, tasks=1, gpus=1, retry={"count": 2, "on": ["failure"]})
    until(lambda: c.job(job)["state"] == "failed", 60, "the job failed for good")
    assert sorted(p.name for p in out.iterdir()) == ["attempt-1", "attempt-2", "attempt-3"]
    attempts = c.http.get(f"/v1/jobs/{job}/attempts").json()["attempts"]
    assert [(a["attempt"], a["state"], a["exit_code"]) for a in attempts] == [(n, "failed", 3) for n in (1, 2, 3)]
    assert len({(out / f"attempt-{n}").read_text() for n in (1, 2, 3)}) == 3  # three launches, not one
    rec = c.job(job)
    assert rec["attempt"] == 3 and "no retry left (2 used)" in rec["reason"]


def layout_writer() -> str:
    """Prints its env and its hostfile as one JSON line, then waits."""
    return (
        "import json, os, time\n"
        "hostfile = open(os.environ['GPUPOOL_HOSTFILE']).read()\n"
        "print(json.dumps({'env': dict(os.environ), 'hostfile': hostfile}), flush=True)\n"
        "time.sleep(120)\n"
    )


@pytest.mark.parametrize(("tasks", "gpus"), [(2, 8), (4, 3)])
def test_ranks_see_the_multi_node_layout_and_a_hostfile(cluster: Cluster, tasks: int, gpus: int) -> None:
    """Invariant: each rank's layout variables and the hostfile describe the gang as it was placed."""
    c = cluster
    job = c.submit(layout_writer(), tasks=tasks, gpus=gpus)
    try:
        ranks = until(lambda: ranks_when(c, job, tasks), 40, "every rank printed its layout")
        by_rank = {int(r["env"]["RANK"]): r for r in ranks.values()}
        hosts = [by_rank[i]["host"] for i in range(tasks)]
        order = list(dict.fromkeys(hosts))
        for i, r in by_rank.items():
            env = r["env"]
            assert env["WORLD_SIZE"] == str(tasks) and env["NNODES"] == str(len(order))
            assert env["NODE_RANK"] == str(order.index(r["host"]))
            assert env["LOCAL_WORLD_SIZE"] == str(hosts.count(r["host"]))
            assert env["LOCAL_RANK"] == str([j for j in range(tasks) if hosts[j] == r["host"]].index(i))
            assert env["GPUPOOL_ATTEMPT"] == "1"
            want = "".join(f"{h} slots={gpus * hosts.count(h)}\n" for h in order)
            assert r["hostfile"] == want
            assert env["GPUPOOL_HOSTFILE"].endswith("/hostfile")
    finally:
        assert c.http.post(f"/v1/jobs/{job}/cancel").status_code == 200
        until(lambda: c.job(job)["state"] == "cancelled", 20, "the layout job cancelled")
