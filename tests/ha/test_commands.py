"""Durable agent commands on real processes: a checkpoint signal the leader decides is stored, delivered by
whichever replica the agent talks to, carried out once, and survives a server kill -9 before delivery.

The signal comes from the real scheduler: tenant acme borrows bob's idle quota with a preemptible 8-GPU job;
bob submits and reclaims it, so acme's job is asked to checkpoint (SIGUSR1) a grace period (600 s here: the
preemption itself never comes within the test) before it would be preempted. The workload writes a line to its
log for each SIGUSR1 it gets; the invariant is exactly one line, checked over a window after the stored
command is gone (acknowledged), so a late repeat would be seen."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from e2e_cluster import Cluster
from procs import pg_schema, stop, until

HOST = "dgx001"
GRACE = {"GPUPOOL_SCHEDULER__PREEMPTION_GRACE_S": "600"}
CHECKPOINTS = (
    "import signal, time\n"
    "signal.signal(signal.SIGUSR1, lambda *_: print('checkpoint', flush=True))\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    time.sleep(0.05)\n"
)


def stored_commands(url: str) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT count(*) FROM agent_commands WHERE done_s IS NULL")).scalar_one())
    finally:
        engine.dispose()


def workload_log(c: Cluster) -> str:
    logs = list((c.root / HOST / "workloads").glob("*/stdout.log"))
    return logs[0].read_text() if len(logs) == 1 else ""


def borrowing_job_running(c: Cluster) -> str:
    """Quotas in one cohort (acme 0, bob 8 GPUs), acme's preemptible job on bob's idle 8 GPUs, running."""
    assert c.http.post("/v1/tenants", json={"name": "bob"}).status_code == 201
    for tenant, nominal in (("acme", 0), ("bob", 8)):
        body = {"pool": "default", "nominal_gpus": nominal, "cohort": "lab"}
        assert c.http.put(f"/v1/tenants/{tenant}/quotas", json=body).status_code == 200
    until(lambda: c.nodes().get(HOST, {}).get("state") == "up", 90, "node up")
    job = c.submit(CHECKPOINTS, tasks=1, gpus=8, preemptible=True)
    until(lambda: c.job(job)["state"] == "running", 30, "the borrowing job running")
    until(lambda: "ready" in workload_log(c), 20, "its workload ready")
    return job


def exactly_one_checkpoint(c: Cluster, url: str) -> None:
    until(lambda: "checkpoint" in workload_log(c), 30, "the checkpoint signal carried out")
    until(lambda: stored_commands(url) == 0, 20, "the stored signal acknowledged and marked done")
    deadline = time.monotonic() + 3.0  # a window of 15 heartbeats and as many polls: any repeat would land
    while time.monotonic() < deadline:
        assert workload_log(c).count("checkpoint") == 1, workload_log(c)
        assert stored_commands(url) == 0
        threading.Event().wait(0.1)  # the observation window's poll interval


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from pg_schema()


def test_a_signal_the_leader_stored_reaches_an_agent_of_the_other_replica_once(tmp_path: Path, pg_url: str) -> None:
    c = Cluster(tmp_path, GPUPOOL_DATABASE_URL=pg_url, GPUPOOL_LEADER_RETRY_S="0.2", **GRACE)
    other: subprocess.Popen[bytes] | None = None
    try:
        until(lambda: c.http.get("/healthz").json()["leader"], 20, "the first server leads")
        other, other_url = c.replica()
        c.start_agent(HOST, other_url)  # the agent knows only the replica that does not lead
        job = borrowing_job_running(c)
        reclaim = c.submit(CHECKPOINTS, tasks=1, gpus=8, tenant="bob")
        exactly_one_checkpoint(c, pg_url)
        assert c.job(job)["state"] == "running" and c.job(reclaim)["state"] == "pending"
    finally:
        if other is not None:
            stop(other, 15)
        c.close()


def test_a_signal_stored_before_a_server_kill9_is_delivered_after_the_restart(tmp_path: Path) -> None:
    """No push (``command_wait_s`` 0), and the agent paused: the signal cannot leave the server before it is
    killed; in the leader's memory it would be lost with it. The agent stays paused until the test sees the
    restarted server answer, which on a loaded box came more than 3 s (the cluster's lost-timeout) after the new
    leader began judging nodes: it rightly judged the paused node lost and requeued the job, which this test is
    not about, so its lost-timeout is 15 s."""
    c = Cluster(tmp_path, GPUPOOL_COMMAND_WAIT_S="0", GPUPOOL_NODE_LOST_AFTER_S="15", **GRACE)
    url = f"sqlite:///{c.root / 'data' / 'gpupool.db'}"
    agent_paused = False
    try:
        c.start_agent(HOST)
        borrowing_job_running(c)
        agent = c.agents[HOST]
        agent.send_signal(signal.SIGSTOP)
        agent_paused = True
        c.submit(CHECKPOINTS, tasks=1, gpus=8, tenant="bob")
        until(lambda: stored_commands(url) == 1, 30, "the checkpoint signal stored")
        c.server.send_signal(signal.SIGKILL)
        c.server.wait(10)
        assert "checkpoint" not in workload_log(c)
        c.restart()
        agent.send_signal(signal.SIGCONT)
        agent_paused = False
        exactly_one_checkpoint(c, url)
    finally:
        if agent_paused:
            c.agents[HOST].send_signal(signal.SIGCONT)
        c.close()
