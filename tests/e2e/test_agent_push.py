"""End to end: commands pushed to real agent processes over the commands long-poll, and the agent's recovery
when the server is killed under an open poll. Heartbeats are slowed to one a minute, so anything that
happens within a few seconds of a placement or a cancel was pushed, not carried by a beat.

Workloads append the time they started to ``<out>/<assignment id>.starts``: one line per process start, so a
second launch of an assignment would show as a second line.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e_cluster import Cluster
from procs import PY, SERVER, healthy, until

AGENTS = ("dgx001", "dgx002")
BEAT_S = 60.0  # no beat falls inside a test after the agents' first one


def starter(then: str = "time.sleep(120)") -> str:
    """A workload that prints when it started (to its log: run as root, jobs run as their tenant's user, who
    may not write into the test's directories), then ``then``."""
    return f"import time\nprint(time.time(), flush=True)\n{then}\n"


def starts(c: Cluster, job_id: str) -> dict[str, list[float]]:
    """Assignment id -> the times its workload started, for every rank of ``job_id`` (a log is appended to:
    a second start of one assignment would add a line)."""
    return {
        log.parent.name: [float(x) for x in log.read_text().split()]
        for h in AGENTS
        for log in (c.root / h / "workloads").glob(f"{job_id}.*/stdout.log")
        if log.read_text().endswith("\n")
    }


def placed_at(c: Cluster, job_id: str) -> float:
    events = c.http.get(f"/v1/jobs/{job_id}/events").json()["events"]
    return min(e["at_s"] for e in events if e["action"] == "job.placed")


@pytest.fixture
def slow_beats(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, GPUPOOL_HEARTBEAT_INTERVAL_S=str(BEAT_S), GPUPOOL_NODE_LOST_AFTER_S="600")
    try:
        for h in AGENTS:
            c.start_agent(h)
        until(lambda: {n: v["state"] for n, v in c.nodes().items()} == dict.fromkeys(AGENTS, "up"), 90, "nodes up")
        yield c
    finally:
        c.close()


def test_a_placement_and_a_cancel_reach_the_agent_without_a_heartbeat(slow_beats: Cluster) -> None:
    c = slow_beats
    job = c.submit(starter(), tasks=2, gpus=8)  # a gang: one rank on each agent
    got = until(lambda: len(s := starts(c, job)) == 2 and s, 30, "both ranks started")
    placed = placed_at(c, job)
    # Within seconds of the placement on a loaded 2-core box; a heartbeat would have taken up to a minute.
    assert all(t[0] - placed < 10.0 for t in got.values()), (placed, got)
    until(lambda: c.job(job)["state"] == "running", 15, "running")
    assert c.http.post(f"/v1/jobs/{job}/cancel").status_code == 200
    exits = [c.root / h / "workloads" / aid / "exit.json" for aid in got for h in AGENTS]
    until(lambda: sum(p.exists() for p in exits) == 2, 15, "both ranks stopped")
    assert {json.loads(p.read_text())["exit_code"] for p in exits if p.exists()} == {-signal.SIGTERM}
    assert all(len(t) == 1 for t in starts(c, job).values())


def test_a_server_killed_under_open_polls_comes_back_and_what_it_placed_meanwhile_launches_once(
    slow_beats: Cluster,
) -> None:
    """Invariant: each assignment starts exactly once across the server's death and restart; the agents
    reconnect by themselves, keep what runs, and launch what was placed while they were cut off."""
    c = slow_beats
    before = c.submit(starter(), tasks=1, gpus=1)
    until(lambda: starts(c, before), 30, "the first job started")
    until(lambda: c.job(before)["state"] == "running", 15, "running")
    # Freeze the agents with their polls open, then kill the server under them: the polls die unanswered.
    for p in c.agents.values():
        p.send_signal(signal.SIGSTOP)
    c.server.send_signal(signal.SIGKILL)
    c.server.wait(10)
    c.server = subprocess.Popen([PY, "-c", SERVER], env=c.env)
    until(lambda: healthy(c.http), 30, "server restarted")
    after = c.submit(starter(), tasks=1, gpus=1)
    until(lambda: c.job(after)["state"] == "placed", 30, "placed while the agents are away")
    for p in c.agents.values():
        p.send_signal(signal.SIGCONT)
    until(lambda: starts(c, after), 20, "the job placed meanwhile started")
    until(lambda: c.job(after)["state"] == "running", 15, "its start reported to the new server")
    assert c.job(before)["state"] == "running"  # kept, not launched again nor stopped
    assert [len(t) for t in starts(c, before).values()] == [1]
    assert [len(t) for t in starts(c, after).values()] == [1]
