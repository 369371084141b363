"""Live telemetry steers placement on the real server, and the server's decisions replay through the simulator.

A real ``gpupool server`` and four ``gpupool agent --emulate`` processes on a fabric of two leaves with two
single-homed 8-GPU hosts each (``leaf_spine(2, 1, 2)``: node001-2 under leaf-01, node003-4 under leaf-02),
so "the other leaf" exists. Faults reach the agents the way a node's hardware shows them, through the files
their real probes read: ``PortXmitWait`` growing in sysfs, a GPU's temperature in the nvidia-smi XML (both
from the emulated node's ``faults.json``), an XID line in the kernel log. Nothing of the loop is mocked.

Each scenario runs with the loop's journal on and ends by replaying it through ``gpupool sim replay``: the
same events into a fresh ``ClusterState``, driver and scheduler must give the same decisions, and the
placements the replay makes are the ones the server made.

Waits poll with deadlines. Where a scenario needs the scheduler to know something first (a leaf congested,
a GPU hot), it waits until the loop has applied the telemetry (its journal holds the events it applied).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e_cluster import Cluster, all_up, env_writer, ranks_of, ranks_when
from gpupool.domain.events import PortCountersReported, TelemetryReported
from gpupool.domain.health import HealthRules
from gpupool.fabric.generators import leaf_spine
from procs import until

FABRIC = leaf_spine(2, 1, 2, gpus_per_host=8)
LEAF = {"leaf-01": ("node001", "node002"), "leaf-02": ("node003", "node004")}
HCA = "mlx5_0"  # each host's one HCA, as its agent names it
# Above the PortXmitWait rate at which a leaf's congestion score is 1 (5e7 ticks/s), and low enough that the
# 32-bit counter does not saturate within a test (2^32 ticks last 70 s).
CONGESTED = 1.2 * HealthRules().xmit_wait_saturated_per_s


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    # No scenario here loses a node: a lost-timeout of 15 s (not the harness's 3 s) keeps the watchdog from
    # requeueing a rank a loaded machine launched late, which would add a placement to the ones compared.
    c = Cluster(tmp_path, FABRIC, journal=True, GPUPOOL_NODE_LOST_AFTER_S="15")
    try:
        yield c
    finally:
        c.close()


def start(c: Cluster, extra: dict[str, tuple[str, ...]] | None = None) -> None:
    for h in c.hosts:
        c.start_agent(h, extra=(extra or {}).get(h, ()))
    until(lambda: all_up(c), 90, "all four nodes up")


def congestion(c: Cluster, leaf: str) -> float:
    """The congestion score the loop's state holds for ``leaf``: its last two counter reports it applied."""
    reports = [e for e in c.journal_events() if isinstance(e, PortCountersReported) and e.switch == leaf]
    if len(reports) < 2:
        return 0.0
    a, b = reports[-2:]
    return HealthRules().congestion(b.port_xmit_wait - a.port_xmit_wait, b.at_s - a.at_s)


def temperature(c: Cluster, host: str, gpu: int) -> float:
    """The temperature of ``host``'s ``gpu`` the loop's state holds (its last sample applied)."""
    samples = [e for e in c.journal_events() if isinstance(e, TelemetryReported) and e.host == host]
    temps = samples[-1].gpu_temperature_c if samples else ()
    return temps[gpu] if gpu < len(temps) else 0.0


def running(c: Cluster, job: str) -> bool:
    return bool(c.job(job)["state"] == "running")


def current_ranks(c: Cluster, job: str, n: int) -> dict[str, dict[str, Any]] | None:
    """What the ranks of ``job``'s latest allocation printed, once ``n`` of them did."""
    printed = ranks_of(c, job)
    if not printed:
        return None
    latest = max(int(aid.rsplit(".", 2)[1]) for aid in printed)
    ranks = {aid: r for aid, r in printed.items() if int(aid.rsplit(".", 2)[1]) == latest}
    return ranks if len(ranks) == n else None


def hosts_of(placement: list[tuple[str, tuple[int, ...]]]) -> list[str]:
    return sorted({h for h, _ in placement})


def replays_the_same(c: Cluster, jobs: list[str]) -> None:
    """``gpupool sim replay`` of the journal: the same decisions in every cycle, and for each job the same
    placements (hosts and GPUs, in order) as the server's audit trail."""
    placed = {job: c.placements(job) for job in jobs}
    out = c.replay()
    assert out["same"], out["differences"]
    assert out["cycles"] > 0
    for job in jobs:
        replayed = [[(t["host"], tuple(t["gpus"])) for t in p["tasks"]] for p in out["placements"] if p["job"] == job]
        assert replayed == placed[job], job


def test_congestion_on_one_leafs_ports_sends_the_next_two_host_gang_under_the_other(cluster: Cluster) -> None:
    """Invariant: a leaf whose ports report PortXmitWait growth past saturation is behind every healthy
    leaf: a gang that fits under either goes under the other (leaf-01 is the one it takes when all is calm)."""
    c = cluster
    start(c)
    for h in LEAF["leaf-01"]:
        c.faults(h, xmit_wait_per_s={HCA: CONGESTED})
    until(lambda: congestion(c, "leaf-01") >= 1.0, 30, "the loop holds leaf-01 congested")
    assert congestion(c, "leaf-02") == 0.0
    job = c.submit(env_writer(), tasks=2, gpus=8)
    until(lambda: running(c, job), 30, "the gang running")
    (placement,) = c.placements(job)
    assert hosts_of(placement) == list(LEAF["leaf-02"])
    until(lambda: ranks_when(c, job, 2), 20, "both ranks wrote their env")
    replays_the_same(c, [job])


def test_a_hot_gpu_is_used_last(cluster: Cluster) -> None:
    """Invariant: a GPU held at 88 C (degraded by its temperature) is the last one placed on: its host goes
    after every cool one, and on its host it goes after every cool GPU."""
    c = cluster
    start(c)
    c.faults("node003", temperature_c={5: 88.0})
    until(lambda: temperature(c, "node003", 5) == 88.0, 30, "the loop holds node003's GPU 5 at 88 C")
    whole = [c.submit(env_writer(), tasks=1, gpus=8) for _ in range(3)]
    until(lambda: all(running(c, j) for j in whole), 30, "three whole-host jobs running")
    assert sorted(h for j in whole for h in hosts_of(c.placements(j)[0])) == ["node001", "node002", "node004"]
    # Only node003 is left: each job takes the coolest GPUs that suit its size; the hot one goes last.
    jobs = []
    for n, expect in ((4, (0, 1, 2, 3)), (3, (4, 6, 7)), (1, (5,))):
        job = c.submit(env_writer(), tasks=1, gpus=n)
        until(lambda: running(c, job), 30, f"the {n}-GPU job running")  # noqa: B023
        assert c.placements(job) == [[("node003", expect)]]
        jobs.append(job)
    replays_the_same(c, [*whole, *jobs])


# Saves on SIGUSR1 (the checkpoint request) and exits on SIGTERM. The stop may follow the request at once,
# and Python runs pending handlers in signal-number order, so the request is handled first (without a
# SIGTERM handler the default action could kill it before its SIGUSR1 handler ran).
CHECKPOINTS = env_writer(
    "signal.signal(signal.SIGUSR1, lambda *_: print('checkpoint requested', flush=True))\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))\n"
    "while True: time.sleep(0.05)"
)


def test_a_job_on_a_gpu_planted_with_an_xid_is_signalled_requeued_and_runs_elsewhere(cluster: Cluster) -> None:
    """Invariant: a running gang holding a GPU that turns BAD is asked to checkpoint (SIGUSR1 to its rank on
    that GPU's host), requeued whole with the reason in its events, and placed again off that host."""
    c = cluster
    start(c)
    job = c.submit(CHECKPOINTS, tasks=2, gpus=8)
    until(lambda: running(c, job), 30, "the gang running")
    # A loaded machine may have the watchdog requeue a rank launched late: the ranks that count are the
    # current allocation's (assignment ids are job.allocation.rank).
    ranks = until(lambda: current_ranks(c, job, 2), 20, "both ranks wrote their env")
    old = next(aid for aid in ranks if aid.endswith(".1"))
    sick = ranks[old]["host"]
    before = len(c.placements(job))
    c.plant_xid(sick, 3)
    until(lambda: len(c.placements(job)) > before and running(c, job), 60, "requeued and running again")
    again = c.placements(job)[-1]
    assert sick not in hosts_of(again) and len(again) == 2
    # The rank on the sick host got its checkpoint request before its stop.
    log = c.root / sick / "workloads" / old / "stdout.log"
    until(lambda: "checkpoint requested" in log.read_text(), 20, "the old rank's checkpoint request")
    events = c.http.get(f"/v1/jobs/{job}/events").json()["events"]
    why = [e["data"]["reason"] for e in events if e["action"] == "job.pending"]
    assert any(f"GPU 3 of {sick} turned bad (XID 79" in w for w in why), why
    assert any(w.endswith("checkpoint signal sent, requeued whole") for w in why), why
    replays_the_same(c, [job])


def test_a_node_selector_job_runs_on_the_labelled_host(cluster: Cluster) -> None:
    """Invariant: a job whose node_selector only node003's agent-configured label matches runs there (a
    1-GPU job goes to node001 when nothing constrains it)."""
    c = cluster
    start(c, {"node003": ("--label", "zone=b")})
    until(lambda: c.nodes()["node003"]["labels"].get("zone") == "b", 30, "node003 labelled zone=b")
    free = c.submit(env_writer(), tasks=1, gpus=1)
    picky = c.submit(env_writer(), tasks=1, gpus=1, node_selector={"zone": "b"})
    until(lambda: running(c, free) and running(c, picky), 30, "both jobs running")
    assert hosts_of(c.placements(free)[0]) == ["node001"]
    assert hosts_of(c.placements(picky)[0]) == ["node003"]
    (rank,) = until(lambda: ranks_when(c, picky, 1), 20, "the job wrote its env").values()
    assert rank["host"] == "node003"  # its agent ran it
    replays_the_same(c, [free, picky])
