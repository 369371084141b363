"""Heartbeats read their node, assignments and node-token check from memory (HostCache), yet see every change:
at once when this process made it, within host_cache_s when another replica did; PBKDF2 runs once per token."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from server_api_helpers import Api, Clock, make_api

from gpupool.domain.states import JobState
from gpupool.server.hostcache import HostCache
from gpupool.store import tokens
from gpupool.store.server_ops import Assignment

JOB = {"command": ["python", "-c", "print('hi')"], "tasks": 1, "gpus_per_task": 2}


def running(cmd: dict) -> dict:
    return {"assignment_id": cmd["assignment_id"], "job_id": cmd["job_id"], "state": "running", "at_s": 0.0}


def test_steady_beats_cost_no_reload_and_no_pbkdf2(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    node = api.register("gpu-01")
    api.beat("gpu-01", node)
    calls: list[str] = []
    real = tokens.verify_secret
    monkeypatch.setattr(tokens, "verify_secret", lambda s, h: calls.append(h) or real(s, h))
    loads = api.srv.gateway._hosts.loads
    for _ in range(20):
        assert api.beat("gpu-01", node) == []
    assert api.srv.gateway._hosts.loads == loads and calls == []
    # Past auth_cache_s (10 s) and host_cache_s (1 s): one snapshot reload and a hash read, still no PBKDF2.
    api.clock.t += 11
    api.beat("gpu-01", node)
    assert api.srv.gateway._hosts.loads == loads + 1 and calls == []


def test_a_new_registration_refuses_the_old_token_at_once(api: Api) -> None:
    old = api.register("gpu-01")
    api.beat("gpu-01", old)
    new = api.register("gpu-01")
    r = api.client.post("/v1/agents/gpu-01/heartbeat", json={"seq": 1, "at_s": 0.0}, headers=old)
    assert r.status_code == 401
    assert api.beat("gpu-01", new) == []


def test_a_wrong_token_is_refused_even_after_a_good_one(api: Api) -> None:
    node = api.register("gpu-01")
    other = api.register("gpu-02")
    api.beat("gpu-01", node)
    r = api.client.post("/v1/agents/gpu-01/heartbeat", json={"seq": 1, "at_s": 0.0}, headers=other)
    assert r.status_code == 401


def test_memory_settles_a_token_only_while_the_snapshot_needs_no_reload(api: Api) -> None:
    """``node_token_held`` (a poll's check on the event loop) never reads: it vouches for a verified token while
    the snapshot is younger than host_cache_s and only some ranks wait to be patched (a patch keeps the hashes),
    not once a whole reload is due; a wrong token never."""
    node = api.register("gpu-01")
    token = node["Authorization"].removeprefix("Bearer ")
    gateway, hosts = api.srv.gateway, api.srv.gateway._hosts
    assert not gateway.node_token_held("gpu-01", token)  # never verified here
    api.beat("gpu-01", node)
    loads, patches = hosts.loads, hosts.patches
    assert gateway.node_token_held("gpu-01", token) and not gateway.node_token_held("gpu-01", token + "x")
    hosts.invalidate(["some-job"])
    assert gateway.node_token_held("gpu-01", token)
    hosts.invalidate()
    assert not gateway.node_token_held("gpu-01", token)
    assert (hosts.loads, hosts.patches) == (loads, patches)  # none of these read the store
    api.beat("gpu-01", node)
    assert gateway.node_token_held("gpu-01", token)
    api.clock.t += api.srv.settings.host_cache_s
    assert not gateway.node_token_held("gpu-01", token)


def test_local_placement_cancel_and_loss_reach_the_very_next_beat(api: Api) -> None:
    alice = api.tenant("alice")
    node = api.register("gpu-01")
    assert api.beat("gpu-01", node) == []  # the snapshot is now loaded: what follows must drop it
    job_id = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
    assert api.srv.loop.run_cycle().placed == 1
    (launch,) = api.beat("gpu-01", node)
    assert launch["kind"] == "launch"
    assert api.beat("gpu-01", node, [running(launch)]) == []
    assert api.client.post(f"/v1/jobs/{job_id}/cancel", headers=alice).status_code == 200
    (stop,) = api.beat("gpu-01", node, [running(launch)])
    assert stop["kind"] == "stop"
    # Lost (silent past the timeout): the next beat sees LOST and writes the node back up.
    api.clock.t += 31
    api.srv.loop.run_cycle()
    assert api.srv.store.get_node("gpu-01").state.value == "lost"
    api.beat("gpu-01", node)
    assert api.srv.store.get_node("gpu-01").state.value == "up"


def test_placements_and_reports_patch_the_snapshot_as_a_whole_reload_would(api: Api) -> None:
    """Invariant: after a placement, a rank's start and a job's end made here, the host cache re-reads only the
    jobs they touched (no whole reload), and holds exactly what a whole reload of the store reads."""
    alice = api.tenant("alice")
    node = api.register("gpu-01")
    api.beat("gpu-01", node)
    hosts = api.srv.gateway._hosts
    loads, patches = hosts.loads, hosts.patches
    ids = {api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"] for _ in range(2)}
    assert api.srv.loop.run_cycle().placed == 2
    launches = api.beat("gpu-01", node)
    assert {c["job_id"] for c in launches} == ids and all(c["kind"] == "launch" for c in launches)
    assert api.beat("gpu-01", node, [running(c) for c in launches]) == []
    assert all(a.started for a in hosts.assignments("gpu-01"))
    done = {**running(launches[0]), "state": "exited", "exit_code": 0}
    api.beat("gpu-01", node, [done, running(launches[1])])
    patched = hosts.assignments("gpu-01")
    assert [a.job_id for a in patched] == [launches[1]["job_id"]]
    assert hosts.loads == loads and hosts.patches >= patches + 3
    hosts.invalidate()  # a whole reload from the store
    assert hosts.assignments("gpu-01") == patched and hosts.loads == loads + 1


def test_a_rank_never_launched_is_requeued_by_a_patch_as_a_whole_reload_would_see_it(api: Api) -> None:
    """The watchdog's requeue (a beat past node_lost_after_s that does not list a placed rank) re-reads only the
    jobs it moved: no whole reload of every host, and the snapshot holds what a whole reload reads."""
    alice = api.tenant("alice")
    node = api.register("gpu-01")
    hosts = api.srv.gateway._hosts
    job_id = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
    assert api.srv.loop.run_cycle().placed == 1
    (launch,) = api.beat("gpu-01", node)  # received, never run
    assert launch["kind"] == "launch"
    api.clock.t += api.srv.settings.node_lost_after_s + 1
    assert [a.job_id for a in hosts.assignments("gpu-01")] == [job_id]  # the age's reload, before the beat
    loads, patches = hosts.loads, hosts.patches
    assert api.beat("gpu-01", node) == []
    assert api.srv.store.get_job(job_id).state is JobState.PENDING
    (patched,) = hosts.assignments("gpu-01")
    assert patched.releasing and hosts.loads == loads and hosts.patches > patches  # its GPUs held until gone
    hosts.invalidate()  # a whole reload from the store
    assert hosts.assignments("gpu-01") == (patched,) and hosts.loads == loads + 1


def test_a_replica_taking_beats_sees_the_leaders_placement_within_host_cache_s(
    db_url: str, tmp_path: Path, clock: Clock
) -> None:
    for leader in make_api(db_url, tmp_path, clock):
        for standby in make_api(db_url, tmp_path, clock):
            alice = leader.tenant("alice")
            node = standby.register("gpu-01")
            assert standby.beat("gpu-01", node) == []
            leader.client.post("/v1/jobs", json=JOB, headers=alice)
            assert leader.srv.loop.run_cycle().placed == 1
            clock.t += standby.srv.settings.host_cache_s
            (launch,) = standby.beat("gpu-01", node)
            assert launch["kind"] == "launch"


def test_a_reload_due_to_age_holds_up_no_reader_but_a_local_change_is_waited_for(api: Api) -> None:
    """While one thread reloads a snapshot that is only old, other readers keep the snapshot (nothing this
    process changed is missing from it); once this process changed something, a reader waits for the read."""
    alice = api.tenant("alice")
    api.register("gpu-01")
    cache = api.srv.gateway._hosts
    assert cache.assignments("gpu-01") == ()  # loaded
    api.clock.t += 2 * api.srv.settings.host_cache_s  # past its age
    loads = cache.loads
    with cache._load_lock:  # another thread's reload under way
        reader, got = _read(cache)
        reader.join(timeout=30)
        assert not reader.is_alive() and got == [()] and cache.loads == loads  # answered at once, not reloaded
    api.client.post("/v1/jobs", json=JOB, headers=alice)
    assert api.srv.loop.run_cycle().placed == 1  # a local change: the next read must see it
    with cache._load_lock:
        reader, got = _read(cache)
        reader.join(timeout=0.3)
        assert reader.is_alive() and got == []  # waiting for the reload under way
    reader.join(timeout=30)
    ((rank,),) = got  # then read the placement
    assert rank.state is JobState.PLACED


def _read(cache: HostCache) -> tuple[threading.Thread, list[tuple[Assignment, ...]]]:
    got: list[tuple[Assignment, ...]] = []
    reader = threading.Thread(target=lambda: got.append(cache.assignments("gpu-01")))
    reader.start()
    return reader, got


def test_a_whole_reload_keeps_unchanged_ranks_and_reads_changed_ones_anew(
    db_url: str, tmp_path: Path, clock: Clock
) -> None:
    """A reload reuses the rank it made before for a row that did not change (so an unchanged host compares at
    once), and makes a new one for a row another replica changed: here the rank's start, stored by the leader."""
    for leader in make_api(db_url, tmp_path, clock):
        for standby in make_api(db_url, tmp_path, clock):
            alice = leader.tenant("alice")
            n1, n2 = standby.register("gpu-01"), standby.register("gpu-02")
            for _ in range(2):
                leader.client.post("/v1/jobs", json={**JOB, "gpus_per_task": 8}, headers=alice)
            assert leader.srv.loop.run_cycle().placed == 2
            hosts = standby.srv.gateway._hosts
            clock.t += standby.srv.settings.host_cache_s
            (l1,), (l2,) = standby.beat("gpu-01", n1), standby.beat("gpu-02", n2)
            (before1,), (before2,) = hosts.assignments("gpu-01"), hosts.assignments("gpu-02")
            leader.beat("gpu-01", n1, [running(l1)])  # stored by the other replica
            assert hosts.assignments("gpu-01") == (before1,)  # not yet: within host_cache_s
            clock.t += standby.srv.settings.host_cache_s
            loads = hosts.loads
            (after1,), (after2,) = hosts.assignments("gpu-01"), hosts.assignments("gpu-02")
            assert hosts.loads == loads + 1
            assert after1.started and not before1.started and after2 is before2
            assert l2["job_id"] == after2.job_id


def test_a_whole_reload_keeps_unchanged_node_records_and_reads_changed_ones_anew(api: Api) -> None:
    """A reload reuses the node record it made before for a row that did not change, and makes a new one for a row
    changed behind the cache's back (as another replica would): a label, a beat's time, a drain."""
    api.register("gpu-01"), api.register("gpu-02"), api.register("gpu-03")
    hosts, store = api.srv.gateway._hosts, api.srv.store
    hosts.invalidate()
    before = {h: hosts.node(h) for h in ("gpu-01", "gpu-02", "gpu-03")}
    store.set_node_labels("gpu-01", {"rack": "r7"}, [], "admin")
    store.touch_nodes({"gpu-02": api.clock.t + 5})
    hosts.invalidate()
    after = {h: hosts.node(h) for h in ("gpu-01", "gpu-02", "gpu-03")}
    assert after["gpu-03"] is before["gpu-03"]
    assert after["gpu-01"] == store.get_node("gpu-01") and ("rack", "r7") in after["gpu-01"].labels
    assert after["gpu-02"].last_heartbeat_s == api.clock.t + 5 != before["gpu-02"].last_heartbeat_s
    store.drain_node("gpu-03", "maintenance", "admin")
    hosts.invalidate()
    assert hosts.node("gpu-03") == store.get_node("gpu-03") != before["gpu-03"]
    assert hosts.node("gpu-01") is after["gpu-01"]
    assert hosts.nodes() == store.list_nodes()


def test_patches_of_a_gang_across_hosts_hold_what_a_whole_reload_reads(api: Api) -> None:
    """Each local change to a two-host gang (placed, one rank running, requeued by the watchdog when the other
    rank never ran) is a patch of the job, no whole reload, and after each the snapshot is what a fresh whole
    read gives: both hosts' ranks releasing, then one freed (the patch finds the host it was on)."""
    alice = api.tenant("alice")
    nodes = {h: api.register(h) for h in ("gpu-01", "gpu-02", "gpu-03")}
    hosts = api.srv.gateway._hosts
    fresh = HostCache(api.srv.store, api.srv.ops, 1.0, 10.0, api.clock)

    def patched_as_read(loads: int) -> None:
        fresh.invalidate()
        for h in nodes:
            assert hosts.assignments(h) == fresh.assignments(h), h
        assert hosts.loads == loads

    assert hosts.assignments("gpu-01") == ()
    job = api.client.post("/v1/jobs", json={**JOB, "tasks": 2, "gpus_per_task": 8}, headers=alice).json()["job"]
    assert api.srv.loop.run_cycle().placed == 1
    patched_as_read(hosts.loads)
    launches = {h: c for h, n in nodes.items() if (c := api.beat(h, n))}
    (first, ranked), (second, _) = launches.items()
    assert api.beat(first, nodes[first], [running(ranked[0])]) == []
    patched_as_read(hosts.loads)
    # The second rank's agent never ran it: past node_lost_after_s its beat has the watchdog requeue the gang.
    api.clock.t += api.srv.settings.node_lost_after_s + 1
    loads = len(hosts.assignments(second)) and hosts.loads  # the age's reload, before the beat
    assert api.beat(second, nodes[second]) == []
    assert api.srv.store.get_job(job["id"]).state is JobState.PENDING
    patched_as_read(loads)
    assert all(a.releasing for h in (first, second) for a in hosts.assignments(h) if a.job_id == job["id"])
    # The first rank's agent reports it gone (stopped): its GPUs are freed, its row gone from that host only.
    exited = {**running(ranked[0]), "state": "exited", "exit_code": -15}
    api.beat(first, nodes[first], [exited])
    patched_as_read(loads)
    assert [a.job_id for a in hosts.assignments(first)] == [] and len(hosts.assignments(second)) == 1


def test_a_reload_wakes_the_hosts_whose_agents_may_have_a_new_command_only(api: Api) -> None:
    """A placement and a cancel ring the rank's host (a launch, a stop); the rank's reported start does not
    (its job placed -> running gives the agent nothing new), so its waiting poll is not woken for it."""
    alice = api.tenant("alice")
    node = api.register("gpu-01")
    api.register("gpu-02")
    hosts = api.srv.gateway._hosts
    rung: list[set[str]] = []
    hosts.watch(lambda: None, lambda h: rung.append(set(h)))
    assert hosts.assignments("gpu-01") == ()
    job = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
    assert api.srv.loop.run_cycle().placed == 1
    hosts.refresh()
    assert rung[-1] == {"gpu-01"}
    (launch,) = api.beat("gpu-01", node)
    rung.clear()
    assert api.beat("gpu-01", node, [running(launch)]) == []
    assert hosts.assignments("gpu-01")[0].started and api.srv.store.get_job(job).state is JobState.RUNNING
    assert rung and all(r == set() for r in rung)  # patched, and nobody woken
    assert api.client.post(f"/v1/jobs/{job}/cancel", headers=alice).json()["state"] == "cancelled"
    hosts.refresh()
    assert rung[-1] == {"gpu-01"}
