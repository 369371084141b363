"""End to end: the real server process and four real ``gpupool agent`` processes (emulated DGX H100 nodes of
a one-SU SuperPOD) on loopback; workloads are real child processes that print what they were given.

Run as root the agents isolate as a real node does (each job as its tenant's user, in its own cgroup): the
jobs run a Python any user may execute and print to their logs, which the test reads in the agents' state
directories; their working directories sit in a directory others may enter (``--work-dir``).

Short heartbeats (0.2 s) and a short lost-timeout (3 s) keep it quick; every wait polls with a deadline.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e_cluster import HOSTS, LOST_AFTER_S, Cluster, all_up, env_writer, ranks_of, ranks_when, start_gang
from gpupool.fabric.export.nccl import nccl_ib_hca
from gpupool.fabric.parsers.nvidia_smi import parse_query_xml
from gpupool.store import Store
from procs import until


@contextlib.contextmanager
def four_nodes(root: Path, **settings: str) -> Iterator[Cluster]:
    c = Cluster(root, **settings)
    try:
        for h in HOSTS:
            c.start_agent(h)
        until(lambda: all_up(c), 90, "nodes")
        yield c
    finally:
        c.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with four_nodes(tmp_path) as c:
        yield c


def test_gang_starts_on_two_hosts_with_ranks_and_rail_hcas(cluster: Cluster) -> None:
    c = cluster
    _, first = start_gang(c)
    ranks = sorted(first.values(), key=lambda r: int(r["env"]["RANK"]))
    assert [r["env"]["RANK"] for r in ranks] == ["0", "1"]
    assert {r["env"]["WORLD_SIZE"] for r in ranks} == {"2"}
    assert {r["env"]["MASTER_ADDR"] for r in ranks} == {"127.0.0.1"}
    assert len({r["env"]["MASTER_PORT"] for r in ranks}) == 1
    hosts = [r["host"] for r in ranks]
    assert len(set(hosts)) == 2  # one rank per 8-GPU host
    for r in ranks:
        # The GPUs by UUID, in PCI bus order: the index of each in the node's nvidia-smi listing.
        smi = parse_query_xml((c.root / r["host"] / "node" / "nvidia-smi-q.xml").read_text())
        uuids = [g.uuid for g in smi.gpus]
        gpus = [uuids.index(u) for u in r["env"]["CUDA_VISIBLE_DEVICES"].split(",")]
        assert r["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert gpus == list(range(8)) and r["env"]["LOCAL_RANK"] == "0"
        # Each rank's NCCL_IB_HCA names exactly its GPUs' rail HCAs, as the emulated node names them.
        assert r["env"]["NCCL_IB_HCA"] == nccl_ib_hca(c.fabric, r["host"], gpus)
        names = {n.split(":")[0] for n in r["env"]["NCCL_IB_HCA"].lstrip("=").split(",")}
        node_hcas = {h["name"] for h in c.nodes()[r["host"]]["hcas"]}
        assert names == node_hcas and len(names) == 8


def test_kill9_agent_node_is_lost_and_the_gang_is_requeued_whole_elsewhere(cluster: Cluster) -> None:
    c = cluster
    job, first = start_gang(c)
    victim, survivor = [r["host"] for r in sorted(first.values(), key=lambda r: int(r["env"]["RANK"]))]
    c.agents[victim].send_signal(signal.SIGKILL)
    t_kill = time.monotonic()
    until(lambda: c.nodes()[victim]["state"] == "lost", 15, "node lost")
    assert time.monotonic() - t_kill < LOST_AFTER_S + 3.0
    # Requeued whole: both ranks run again, neither on the lost node; the surviving old rank was stopped.
    try:
        again = until(lambda: ranks_when(c, job, 4), 30, "the gang re-launched")
    except AssertionError:
        events = c.http.get(f"/v1/jobs/{job}/events").json()["events"]
        pytest.fail(f"not re-launched: {c.job(job)}; events {[(e['action'], e['data']) for e in events]}")
    new = [r for aid, r in again.items() if aid not in first]
    assert sorted(r["env"]["RANK"] for r in new) == ["0", "1"]
    assert victim not in {r["host"] for r in new} and len({r["host"] for r in new}) == 2
    until(lambda: c.job(job)["state"] == "running", 15, "running again")
    old_survivor = next(aid for aid, r in first.items() if r["host"] == survivor)
    exit_file = c.root / survivor / "workloads" / old_survivor / "exit.json"
    until(exit_file.exists, 15, "the old rank on the surviving node stopped")
    assert json.loads(exit_file.read_text())["exit_code"] == -signal.SIGTERM


def test_an_xid_planted_in_the_kernel_log_drains_that_gpu(cluster: Cluster) -> None:
    c = cluster
    host = "dgx003"
    c.plant_xid(host, 3)  # "NVRM: Xid (PCI:0000:5d:00): 79, ..." in its kernel log
    until(lambda: c.nodes()[host]["gpus"][3]["health"] == "bad", 15, "GPU 3 graded bad")
    assert [g["health"] for g in c.nodes()[host]["gpus"]].count("bad") == 1
    # Drained: an 8-GPU task no longer fits on that node, whatever else is free.
    jobs = [c.submit(env_writer(), tasks=1, gpus=8) for _ in range(4)]
    until(lambda: sum(c.job(j)["state"] == "running" for j in jobs) == 3, 30, "three 8-GPU jobs running")
    # "running" comes when the agent has launched the process; its env file follows a moment later.
    running = [j for j in jobs if c.job(j)["state"] == "running"]
    until(lambda: all(ranks_when(c, j, 1) for j in running), 20, "the three running jobs wrote their env")
    placed = {r["host"] for j in jobs for r in ranks_of(c, j).values()}
    assert placed == set(HOSTS) - {host}


def _store(c: Cluster) -> Store:
    """The cluster's database, read beside the server (its audit says when a node was judged lost)."""
    return Store(f"sqlite:///{c.root / 'data' / 'gpupool.db'}")


def _lost(store: Store) -> dict[str, float]:
    """Node -> when it was first judged lost (the server's clock)."""
    out: dict[str, float] = {}
    for e in store.list_audit(action="node.lost", limit=1000):
        out.setdefault(e.subject.removeprefix("node/"), e.at_s)
    return out


def _beat_since(store: Store, t: float, hosts: set[str]) -> bool:
    return all((n.last_heartbeat_s or 0.0) > t for n in store.list_nodes() if n.name in hosts)


def test_a_server_paused_past_the_lost_timeout_declares_no_node_lost_and_a_paused_agent_is(tmp_path: Path) -> None:
    """The lost-timeout runs on the server's own progress: paused (SIGSTOP) for twice the timeout, then
    resumed, the server counts the pause against no node, though its loop may look before its intake has
    taken the beats waiting in its socket; every node goes on beating and none is lost. An agent paused
    then is: a lost-timeout after its last beat, and a period of the loop. The lease outlasts the pause, so
    the loop keeps its term (a new term would give every node a full timeout of its own)."""
    with four_nodes(tmp_path, GPUPOOL_LEASE_TTL_S="30") as c, _store(c) as store:
        _pause_the_server(c, store)
        c.agents["dgx002"].send_signal(signal.SIGSTOP)
        stopped = time.time()
        try:
            lost_at = until(lambda: _lost(store).get("dgx002"), 30, "the paused agent's node lost")
            assert LOST_AFTER_S - 0.5 < lost_at - stopped < LOST_AFTER_S + 1.0  # its last beat: up to 0.2 s before
        finally:
            c.agents["dgx002"].send_signal(signal.SIGCONT)


def _pause_the_server(c: Cluster, store: Store) -> None:
    c.server.send_signal(signal.SIGSTOP)
    try:
        threading.Event().wait(2 * LOST_AFTER_S)  # the fault itself: a pause of twice the lost-timeout
    finally:
        c.server.send_signal(signal.SIGCONT)
    resumed = time.time()
    until(lambda: _beat_since(store, resumed + LOST_AFTER_S, set(HOSTS)), 30, "every node beating after the pause")
    assert _lost(store) == {}


IGNORE_TERM = (
    "import signal, sys, time\n"
    "def note(*_):\n"
    "    print('got SIGTERM at', time.monotonic(), flush=True)\n"
    "signal.signal(signal.SIGTERM, note)\n"
    "print('ready', flush=True)\n"
    "while True: time.sleep(0.01)\n"
)


@pytest.mark.slow
def test_a_cancelled_job_gets_sigterm_then_sigkill_after_the_grace(cluster: Cluster) -> None:
    c = cluster
    job = c.submit(IGNORE_TERM, tasks=1, gpus=1)
    until(lambda: c.job(job)["state"] == "running", 30, "running")
    logs = lambda: c.http.get(f"/v1/jobs/{job}/logs", params={"rank": 0}).json().get("text", "")  # noqa: E731
    until(lambda: "ready" in logs(), 10, "workload ready (through the server's log route)")
    assert c.http.post(f"/v1/jobs/{job}/cancel").status_code == 200
    records = until(lambda: [f for h in HOSTS for f in (c.root / h / "workloads").glob("*/exit.json")], 15, "killed")
    assert json.loads(records[0].read_text())["exit_code"] == -signal.SIGKILL
    out = (records[0].parent / "stdout.log").read_text()
    assert "got SIGTERM" in out  # it was asked first, and killed only when it ignored the request
