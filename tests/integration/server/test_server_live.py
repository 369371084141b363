"""Heartbeats feed the scheduler: port counters, link states, temperatures and grades change the next placement.

The real app behind httpx on SQLite and PostgreSQL; the loop is driven by hand (``run_cycle``) with a hand
clock. The fabric is two leaves of two 8-GPU hosts (``leaf_spine(2, 1, 2)``: node001-2 under leaf-01,
node003-4 under leaf-02); hosts register with their fabric HCA's GUID, as a real agent reads it from sysfs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from server_api_helpers import Api, Clock, make_api

from gpupool.domain.errors import InputError
from gpupool.fabric import jsonio
from gpupool.fabric.generators import leaf_spine
from gpupool.sim.replay import replay_file

FABRIC = leaf_spine(2, 1, 2, gpus_per_host=8)
LEAF = {"leaf-01": ("node001", "node002"), "leaf-02": ("node003", "node004")}
GANG = {"command": ["sleep", "600"], "tasks": 2, "gpus_per_task": 8}


def setup(api: Api) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    r = api.client.put("/v1/fabric", json=jsonio.to_dict(FABRIC), headers=api.admin())
    assert r.status_code == 200, r.text
    join = api.client.post("/v1/join-tokens", json={}, headers=api.admin()).json()["token"]
    nodes = {}
    for host in FABRIC.hosts:
        hca = FABRIC.hcas[FABRIC.hca_index(host.hcas[0])]
        body = {
            "host": host.name,
            "gpus": [{"index": g.index, "model": g.model, "memory_mib": g.memory_mib} for g in host.gpus],
            "hcas": [{"name": "mlx5_0", "guid": hca.guid, "rate_gbps": 400.0}],
        }
        r = api.client.post("/v1/agents/register", json=body, headers={"Authorization": f"Bearer {join}"})
        assert r.status_code == 200, r.text
        nodes[host.name] = {"Authorization": f"Bearer {r.json()['node_token']}"}
    return api.tenant("acme"), nodes


def beat(api: Api, host: str, node: dict[str, str], **samples: Any) -> list[dict[str, Any]]:
    body = {"seq": 1, "at_s": api.clock.t, **samples}
    r = api.client.post(f"/v1/agents/{host}/heartbeat", json=body, headers=node)
    assert r.status_code == 200, r.text
    return list(r.json()["commands"])


def gpus(temps: dict[int, float] | None = None, bad: dict[int, str] | None = None) -> list[dict[str, Any]]:
    temps, bad = temps or {}, bad or {}
    return [
        {
            "index": i,
            "temperature_c": temps.get(i, 40.0),
            "utilization_pct": 0.0,
            "health": "bad" if i in bad else ("degraded" if temps.get(i, 40.0) >= 85 else "ok"),
            "reasons": [bad[i]] if i in bad else [],
        }
        for i in range(8)
    ]


def port(state: str = "up", wait: float = 0.0) -> list[dict[str, Any]]:
    return [{"hca": "mlx5_0", "state": state, "xmit_wait_per_s": wait, "errors_per_s": 0.0}]


def submit(api: Api, who: dict[str, str], body: dict[str, Any]) -> str:
    r = api.client.post("/v1/jobs", json=body, headers=who)
    assert r.status_code == 201, r.text
    return str(r.json()["job"]["id"])


def hosts_of(api: Api, job_id: str) -> list[str]:
    return sorted({a.host for a in api.srv.ops.job_assignments(job_id)})


def gpus_of(api: Api, job_id: str) -> list[int]:
    return sorted(g for a in api.srv.ops.job_assignments(job_id) for g in a.gpus)


@pytest.mark.parametrize("congested", ["leaf-01", "leaf-02"])
def test_a_congested_leaf_sends_the_next_gang_under_the_other(api: Api, congested: str) -> None:
    acme, nodes = setup(api)
    api.srv.loop.run_cycle()
    # Two beats a second apart from every host: the congested leaf's ports wait 1e8 ticks/s (2x saturation).
    for _ in range(2):
        api.clock.t += 1.0
        for leaf, hosts in LEAF.items():
            for h in hosts:
                beat(api, h, nodes[h], ports=port(wait=1e8 if leaf == congested else 0.0))
    job = submit(api, acme, GANG)
    assert api.srv.loop.run_cycle().placed == 1
    other = next(leaf for leaf in LEAF if leaf != congested)
    assert hosts_of(api, job) == list(LEAF[other])


def test_congestion_survives_a_rebuild_of_the_loops_state(api: Api) -> None:
    acme, nodes = setup(api)
    api.srv.loop.run_cycle()
    for _ in range(2):
        api.clock.t += 1.0
        for h in LEAF["leaf-02"]:
            beat(api, h, nodes[h], ports=port(wait=1e8))
    api.srv.loop.run_cycle()  # the events are folded in here...
    r = api.client.put("/v1/fabric", json=jsonio.to_dict(FABRIC), headers=api.admin())
    assert r.status_code == 200  # ...and a new fabric version makes the next cycle rebuild its state
    job = submit(api, acme, GANG)
    report = api.srv.loop.run_cycle()
    assert report.rebuilt and report.placed == 1
    assert hosts_of(api, job) == list(LEAF["leaf-01"])


def test_a_beat_that_lands_while_the_loop_rebuilds_is_applied_once(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant: each counter report reaches the loop's state once. Applied twice (once by the rebuild, once by
    the next cycle's drain) it reads as no growth in no time, and the congested leaf looks clear."""
    acme, nodes = setup(api)
    api.srv.loop.run_cycle()
    congested = lambda: [beat(api, h, nodes[h], ports=port(wait=1e8)) for h in LEAF["leaf-01"]]  # noqa: E731
    for _ in range(2):
        api.clock.t += 1.0
        congested()
    api.srv.loop.run_cycle()
    r = api.client.put("/v1/fabric", json=jsonio.to_dict(FABRIC), headers=api.admin())
    assert r.status_code == 200  # a new fabric version: the next cycle rebuilds its state from the store
    load = api.srv.store.load_state

    def beat_then_load() -> Any:  # the beat's request thread wins the race against the rebuild's read
        api.clock.t += 1.0
        congested()
        return load()

    monkeypatch.setattr(api.srv.store, "load_state", beat_then_load)
    assert api.srv.loop.run_cycle().rebuilt
    monkeypatch.undo()
    job = submit(api, acme, GANG)
    report = api.srv.loop.run_cycle()
    assert not report.rebuilt and report.placed == 1
    assert hosts_of(api, job) == list(LEAF["leaf-02"])


def test_a_leaf_whose_ports_went_down_is_avoided(api: Api) -> None:
    acme, nodes = setup(api)
    api.clock.t += 1.0
    for h in LEAF["leaf-01"]:
        beat(api, h, nodes[h], ports=port("down"))
    job = submit(api, acme, GANG)
    assert api.srv.loop.run_cycle().placed == 1
    assert hosts_of(api, job) == list(LEAF["leaf-02"])


def test_a_hot_gpu_is_used_last(api: Api) -> None:
    acme, nodes = setup(api)
    api.clock.t += 1.0
    beat(api, "node003", nodes["node003"], gpus=gpus(temps={5: 88.0}))
    whole = [submit(api, acme, {**GANG, "tasks": 1}) for _ in range(3)]
    assert api.srv.loop.run_cycle().placed == 3
    assert sorted(h for j in whole for h in hosts_of(api, j)) == ["node001", "node002", "node004"]
    # Only node003 is left: each job takes the coolest GPUs that suit its size; the hot one goes last.
    for n, expect in ((4, [0, 1, 2, 3]), (3, [4, 6, 7]), (1, [5])):
        job = submit(api, acme, {**GANG, "tasks": 1, "gpus_per_task": n})
        assert api.srv.loop.run_cycle().placed == 1
        assert hosts_of(api, job) == ["node003"] and gpus_of(api, job) == expect


def test_a_job_on_a_gpu_that_turns_bad_is_signalled_requeued_whole_and_placed_elsewhere(api: Api) -> None:
    acme, nodes = setup(api)
    job = submit(api, acme, GANG)
    api.srv.loop.run_cycle()
    first = hosts_of(api, job)
    launches = {h: beat(api, h, nodes[h]) for h in first}
    running = {
        h: [{"assignment_id": c["assignment_id"], "job_id": job, "state": "running", "at_s": 0.0} for c in cmds]
        for h, cmds in launches.items()
    }
    for h in first:
        beat(api, h, nodes[h], workloads=running[h])
    assert api.client.get(f"/v1/jobs/{job}", headers=acme).json()["state"] == "running"
    sick = first[1]
    xid = {"gpu": 3, "code": 79, "at_s": api.clock.t, "message": "GPU has fallen off the bus."}
    why = "XID 79 (GPU has fallen off the bus)"
    beat(api, sick, nodes[sick], gpus=gpus(bad={3: why}), xids=[xid], workloads=running[sick])
    report = api.srv.loop.run_cycle()
    assert report.preempted == 0 and report.placed == 1  # requeued by the loop, then placed by the scheduler
    again = hosts_of(api, job)
    assert sick not in again and len(again) == 2
    # The sick host's next reply asks its rank to checkpoint, then stops it.
    cmds = beat(api, sick, nodes[sick], workloads=running[sick])
    old = running[sick][0]["assignment_id"]
    assert [(c["kind"], c["assignment_id"]) for c in cmds][:2] == [("signal", old), ("stop", old)]
    events = api.client.get(f"/v1/jobs/{job}/events", headers=acme).json()["events"]
    requeue = next(e for e in events if e["action"] == "job.pending")
    assert f"GPU 3 of {sick} turned bad ({why})" in requeue["data"]["reason"]
    assert [e["action"] for e in events][-2:] == ["job.pending", "job.placed"]
    # The XID itself is in the node's audit trail.
    audit = api.srv.store.list_audit(subject=f"node/{sick}", limit=100)
    assert any(e.action == "node.xid" and e.data["xids"][0]["code"] == 79 for e in audit)


@pytest.fixture
def journaled(db_url: str, tmp_path: Path, clock: Clock) -> Iterator[Api]:
    yield from make_api(db_url, tmp_path, clock, journal_path=str(tmp_path / "journal.jsonl"))


def test_the_journal_replays_to_the_same_decisions_through_congestion_heat_a_bad_gpu_and_a_rebuild(
    journaled: Api, tmp_path: Path
) -> None:
    """Invariant: the server's decisions are the pure scheduler's on the events the loop applied; replayed
    through ``sim.replay`` (a fresh state, driver and scheduler) every placement, preemption and reason is
    the same, across congestion, a hot GPU, a job requeued off a bad GPU and a rebuild of the loop's state."""
    api = journaled
    acme, nodes = setup(api)
    api.srv.loop.run_cycle()
    for _ in range(2):
        api.clock.t += 1.0
        for h in LEAF["leaf-01"]:
            beat(api, h, nodes[h], ports=port(wait=1e8))
    gang = submit(api, acme, GANG)
    api.srv.loop.run_cycle()
    assert hosts_of(api, gang) == list(LEAF["leaf-02"])
    running = {}
    for h in LEAF["leaf-02"]:
        cmds = beat(api, h, nodes[h])
        running[h] = [
            {"assignment_id": c["assignment_id"], "job_id": gang, "state": "running", "at_s": 0.0} for c in cmds
        ]
        beat(api, h, nodes[h], workloads=running[h])
    api.clock.t += 1.0
    beat(api, "node001", nodes["node001"], gpus=gpus(temps={2: 88.0}))
    small = submit(api, acme, {**GANG, "tasks": 1, "gpus_per_task": 7})
    api.srv.loop.run_cycle()
    assert hosts_of(api, small) == ["node002"]  # the host with a hot GPU is used last
    xid = {"gpu": 3, "code": 79, "at_s": api.clock.t, "message": "GPU has fallen off the bus."}
    beat(api, "node004", nodes["node004"], gpus=gpus(bad={3: "XID 79"}), xids=[xid], workloads=running["node004"])
    api.srv.loop.run_cycle()  # the gang is requeued; nothing is free for it while its ranks release
    assert api.client.put("/v1/fabric", json=jsonio.to_dict(FABRIC), headers=api.admin()).status_code == 200
    assert api.srv.loop.run_cycle().rebuilt
    placed = {j: tuple(sorted((a.host, a.gpus) for a in api.srv.ops.job_assignments(j))) for j in (gang, small)}

    report = replay_file(tmp_path / "journal.jsonl")
    assert report.same, [d.what for d in report.differences]
    assert report.cycles == api.srv.loop.cycles
    replayed = {a.job_id: tuple(sorted((t.host, t.gpus) for t in a.tasks)) for a in report.placements}
    assert replayed[small] == placed[small]
    assert [a.job_id for a in report.placements].count(gang) == 1  # once, under leaf-02; not again yet
    assert {t.host for a in report.placements if a.job_id == gang for t in a.tasks} == set(LEAF["leaf-02"])


def test_a_decision_the_scheduler_would_not_make_is_reported_with_its_cycle(journaled: Api, tmp_path: Path) -> None:
    """The replay is a check that can fail: a journal whose recorded placement was edited (the server
    deciding something the scheduler does not) gives a difference naming the job and both placements."""
    api = journaled
    acme, _ = setup(api)
    job = submit(api, acme, {**GANG, "tasks": 1})
    api.srv.loop.run_cycle()
    (host,) = hosts_of(api, job)
    other = next(h.name for h in FABRIC.hosts if h.name != host)
    path = tmp_path / "journal.jsonl"
    lines = path.read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "decided")
    lines[last] = lines[last].replace(f'"host":"{host}"', f'"host":"{other}"')
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join(lines) + "\n")
    report = replay_file(edited)
    assert [(d.line, d.what) for d in report.differences] == [
        (last + 1, f"job {job}: the server {other} GPUs 0,1,2,3,4,5,6,7, the replay {host} GPUs 0,1,2,3,4,5,6,7")
    ]


@pytest.fixture
def full_disk(db_url: str, tmp_path: Path, clock: Clock) -> Iterator[Api]:
    yield from make_api(db_url, tmp_path, clock, journal_path="/dev/full")


def test_a_journal_that_cannot_be_written_stops_and_the_loop_goes_on(
    full_disk: Api, caplog: pytest.LogCaptureFixture
) -> None:
    """Invariant: the journal never stops scheduling. On a full disk (/dev/full refuses every write) the loop
    logs once that the journal stops, and places as before."""
    api = full_disk
    acme, _ = setup(api)
    jobs = [submit(api, acme, {**GANG, "tasks": 1}) for _ in range(2)]
    with caplog.at_level("ERROR", logger="gpupool.server.journal"):
        assert api.srv.loop.run_cycle().placed == 2
        assert api.srv.loop.run_cycle().placed == 0
    assert [hosts_of(api, j) != [] for j in jobs] == [True, True]
    stops = [r.getMessage() for r in caplog.records if "stops here" in r.getMessage()]
    assert len(stops) == 1 and "/dev/full" in stops[0] and "No space left on device" in stops[0]


def test_a_journal_path_that_cannot_be_opened_is_one_error_naming_the_setting(tmp_path: Path, clock: Clock) -> None:
    with pytest.raises(InputError, match=r"journal_path .*/missing/journal\.jsonl: cannot open the journal"):
        next(
            make_api(
                f"sqlite:///{tmp_path / 'db'}",
                tmp_path,
                clock,
                journal_path=str(tmp_path / "missing" / "journal.jsonl"),
            )
        )
