"""Heartbeats feed the scheduler: port counters, link states, temperatures and grades change the next placement.

The real app behind httpx on SQLite and PostgreSQL; the loop is driven by hand (``run_cycle``) with a hand
clock. The fabric is two leaves of two 8-GPU hosts (``leaf_spine(2, 1, 2)``: node001-2 under leaf-01,
node003-4 under leaf-02); hosts register with their fabric HCA's GUID, as a real agent reads it from sysfs.
"""

from __future__ import annotations

from typing import Any

import pytest
from server_api_helpers import Api

from gpupool.fabric import jsonio
from gpupool.fabric.generators import leaf_spine

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
