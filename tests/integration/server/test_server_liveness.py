"""Steady heartbeats cost no write: their times are kept in memory and persisted in batches, and still no
beating node is ever judged lost; a new leader gives every node a full lost-timeout."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio.to_thread
from server_api_helpers import Api, Clock, make_api


def stored_beat(api: Api, host: str) -> float | None:
    return api.srv.store.get_node(host).last_heartbeat_s


def test_a_steady_beat_is_batched_and_a_beating_node_is_never_lost(api: Api) -> None:
    node = api.register("gpu-01")
    t0 = stored_beat(api, "gpu-01")
    api.clock.t += 5
    api.beat("gpu-01", node)
    assert stored_beat(api, "gpu-01") == t0  # noted in memory, no transaction
    assert api.srv.gateway._seen.unflushed() == {"gpu-01": api.clock.t}
    api.clock.t += 10  # 10 s >= 30 / 3 since the first note: this beat flushes the batch
    api.beat("gpu-01", node)
    assert stored_beat(api, "gpu-01") == api.clock.t
    # Beating every 9 s (under the flush period): the stored time lags, yet the loop flushes before judging.
    for _ in range(5):
        api.clock.t += 9
        api.beat("gpu-01", node)
    api.srv.loop.run_cycle()
    assert api.srv.store.get_node("gpu-01").state.value == "up"
    assert (
        'gpupool_agent_heartbeat_age_seconds{node="gpu-01"} 0.0' in api.client.get("/metrics", headers=api.admin()).text
    )
    # Silent for longer than the timeout: lost; its next beat is a write that brings it back up.
    api.clock.t += 31
    api.srv.loop.run_cycle()
    assert api.srv.store.get_node("gpu-01").state.value == "lost"
    api.beat("gpu-01", node)
    assert api.srv.store.get_node("gpu-01").state.value == "up" and stored_beat(api, "gpu-01") == api.clock.t


def test_a_health_change_is_written_at_once(api: Api) -> None:
    node = api.register("gpu-01", gpus=2)
    api.clock.t += 1
    body = {"seq": 2, "at_s": api.clock.t, "gpus": [{"index": 0, "health": "ok"}, {"index": 1, "health": "bad"}]}
    assert api.client.post("/v1/agents/gpu-01/heartbeat", json=body, headers=node).status_code == 200
    rec = api.srv.store.get_node("gpu-01")
    assert [int(g) for g in rec.health] == [0, 2] and rec.last_heartbeat_s == api.clock.t


def test_a_new_leader_gives_every_node_a_full_timeout(api: Api) -> None:
    api.register("gpu-01")
    api.register("gpu-02")
    api.clock.t += 100  # both silent for 100 s, as a takeover after a long outage would find them
    api.srv.loop._leader_since = None  # just became the leader
    api.srv.loop.run_cycle()
    assert {n.state.value for n in api.srv.store.list_nodes()} == {"up"}
    api.clock.t += 31
    api.srv.loop.run_cycle()
    assert {n.state.value for n in api.srv.store.list_nodes()} == {"lost"}


def test_a_stall_of_the_intake_is_not_counted_against_a_node_and_its_progress_is(api: Api) -> None:
    """The loop judges silence on the intake's progress: 40 s without a tick of the intake (a paused or
    starved server) loses no node, before nor after the intake runs again; 31 s of its progress does."""
    watch = api.srv.beats.intake
    node = api.register("gpu-01")
    api.beat("gpu-01", node)
    watch.tick()
    api.clock.t += 40  # the intake stood still (no tick): the loop wakes first
    api.srv.loop.run_cycle()
    assert api.srv.store.get_node("gpu-01").state.value == "up"
    watch.tick()  # it runs again: the 40 s are a stall it recorded
    api.srv.loop.run_cycle()
    assert api.srv.store.get_node("gpu-01").state.value == "up"
    for _ in range(31 * 4):  # ticking on time, a quarter second apart: the node's silence counts now
        api.clock.t += 0.25
        watch.tick()
    api.srv.loop.run_cycle()
    assert api.srv.store.get_node("gpu-01").state.value == "lost"


def test_a_beat_is_answered_while_every_api_thread_is_taken(api: Api) -> None:
    """Beats run on workers of their own: with every token of the API's thread pool held (as by requests
    stuck on a slow database or agent), a heartbeat is still answered and noted, while an API route waits."""
    node = api.register("gpu-01")
    holders: list[object] = []

    async def take() -> None:
        limiter = anyio.to_thread.current_default_thread_limiter()
        holders.extend(object() for _ in range(int(limiter.total_tokens)))
        for h in holders:
            await limiter.acquire_on_behalf_of(h)

    async def give_back() -> None:
        for h in holders:
            anyio.to_thread.current_default_thread_limiter().release_on_behalf_of(h)

    portal = api.client.portal
    assert portal is not None
    portal.call(take)
    listed: list[int] = []
    waiting = threading.Thread(
        target=lambda: listed.append(api.client.get("/v1/nodes", headers=api.admin()).status_code)
    )
    try:
        waiting.start()
        beat = threading.Thread(target=api.beat, args=("gpu-01", node))
        beat.start()
        beat.join(20)
        assert not beat.is_alive(), "the heartbeat waited for the API's thread pool"
        assert api.srv.gateway._seen.unflushed() == {"gpu-01": api.clock.t}
        assert listed == []  # the API route is still waiting for a thread
    finally:
        portal.call(give_back)
        waiting.join(20)
    assert listed == [200]


def _told_interval(api: Api, host: str, node: dict[str, str]) -> float:
    body = {"seq": 1, "at_s": api.clock.t, "workloads": []}
    r = api.client.post(f"/v1/agents/{host}/heartbeat", json=body, headers=node)
    assert r.status_code == 200, r.text
    return float(r.json()["heartbeat_interval_s"])


def test_a_larger_fleet_is_told_to_beat_less_often_and_is_lost_later(db_url: str, tmp_path: Path) -> None:
    """Past heartbeat_max_per_s x heartbeat_interval_s nodes, agents are told a longer interval (beats a second
    stay at the cap), and a node is lost after three of those intervals, not node_lost_after_s (30 s)."""
    for api in make_api(db_url, tmp_path, Clock(), heartbeat_interval_s=5.0, heartbeat_max_per_s=0.2):
        nodes = {h: api.register(h) for h in ("gpu-01", "gpu-02", "gpu-03")}
        api.srv.loop.run_cycle()  # leading from now: silence counts from here
        # 3 nodes at 0.2 beats a second: every 15 s; lost after max(30, 3 x 15) = 45 s.
        assert {_told_interval(api, h, n) for h, n in nodes.items()} == {15.0}
        api.clock.t += 40  # past 30 s, within three intervals
        api.srv.loop.run_cycle()
        assert {n.state.value for n in api.srv.store.list_nodes()} == {"up"}
        api.beat("gpu-01", nodes["gpu-01"])
        api.clock.t += 6  # the others: 46 s silent
        api.srv.loop.run_cycle()
        states = {n.name: n.state.value for n in api.srv.store.list_nodes()}
        assert states == {"gpu-01": "up", "gpu-02": "lost", "gpu-03": "lost"}


def test_a_fleet_under_the_cap_beats_at_the_interval_set(db_url: str, tmp_path: Path) -> None:
    """heartbeat_max_per_s 0 (or a fleet under the cap) keeps heartbeat_interval_s and node_lost_after_s."""
    for api in make_api(db_url, tmp_path, Clock(), heartbeat_interval_s=5.0, heartbeat_max_per_s=0.0):
        nodes = {h: api.register(h) for h in ("gpu-01", "gpu-02", "gpu-03")}
        api.srv.loop.run_cycle()  # leading from now: silence counts from here
        assert {_told_interval(api, h, n) for h, n in nodes.items()} == {5.0}
        api.clock.t += 31
        api.srv.loop.run_cycle()
        assert {n.state.value for n in api.srv.store.list_nodes()} == {"lost"}
