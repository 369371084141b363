"""The commands long-poll through the real app, on both backends: a waiting poll is answered when a placement
or a cancel is committed, commands the agent holds do not end the wait, and a heartbeat and a poll derive the
same commands. The loop is driven by hand; polls run on threads and are waited for with deadlines."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from server_api_helpers import Api, Clock, make_api

from procs import until as poll_until

JOB = {"command": ["python", "-c", "print('hi')"], "tasks": 1, "gpus_per_task": 2}


def until(cond: Callable[[], object], timeout_s: float = 10.0, what: str = "condition") -> None:
    poll_until(cond, timeout_s, what, every_s=0.01)


class Poll:
    """One commands poll on its own thread: ``result()`` waits for its answer."""

    def __init__(self, api: Api, host: str, node: dict[str, str], body: dict[str, Any]) -> None:
        self.answer: Any = None
        self.seconds = 0.0

        def run() -> None:
            t0 = time.monotonic()
            self.answer = api.client.post(f"/v1/agents/{host}/commands", json=body, headers=node)
            self.seconds = time.monotonic() - t0

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def result(self, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the poll was not answered"
        assert self.answer.status_code == 200, self.answer.text
        return list(self.answer.json()["commands"])


def keys(commands: list[dict[str, Any]]) -> list[str]:
    return sorted(f"{c['kind']}:{c['assignment_id']}" for c in commands)


def waiting(api: Api, n: int) -> Callable[[], bool]:
    return lambda: api.srv.push.bell.waiting == n


def test_registration_offers_the_long_poll_with_the_configured_wait(db_url: str, tmp_path: Path, clock: Clock) -> None:
    for api in make_api(db_url, tmp_path, clock, command_wait_s=7.5):
        join = api.client.post("/v1/join-tokens", json={}, headers=api.admin()).json()["token"]
        r = api.client.post("/v1/agents/register", json={"host": "gpu-01"}, headers={"Authorization": f"Bearer {join}"})
        assert r.json()["command_wait_s"] == 7.5


def test_a_placement_answers_a_waiting_poll_at_once(db_url: str, tmp_path: Path, clock: Clock) -> None:
    for api in make_api(db_url, tmp_path, clock, command_wait_s=60.0):
        alice = api.tenant("alice")
        node = api.register("gpu-01")
        poll = Poll(api, "gpu-01", node, {"workloads": [], "held": []})
        until(waiting(api, 1))  # parked: nothing to do yet
        job_id = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
        assert api.srv.loop.run_cycle().placed == 1
        (launch,) = poll.result()
        assert launch["kind"] == "launch" and launch["job_id"] == job_id and len(launch["gpus"]) == 2
        assert poll.seconds < 30.0  # answered by the placement, not by the 60 s wait running out
        # The heartbeat reply derives the same command (one derivation for both).
        assert api.beat("gpu-01", node) == [launch]


def test_held_commands_do_not_end_the_wait_and_a_cancel_does(db_url: str, tmp_path: Path, clock: Clock) -> None:
    for api in make_api(db_url, tmp_path, clock, command_wait_s=60.0):
        alice = api.tenant("alice")
        node = api.register("gpu-01")
        first = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
        api.srv.loop.run_cycle()
        (launch,) = Poll(api, "gpu-01", node, {"workloads": [], "held": []}).result()
        # The agent launched it and says so: nothing new, so the poll waits.
        running = {"assignment_id": launch["assignment_id"], "job_id": first, "state": "running", "at_s": 0.0}
        held = [f"launch:{launch['assignment_id']}"]
        poll = Poll(api, "gpu-01", node, {"workloads": [running], "held": held})
        until(waiting(api, 1))
        assert api.client.post(f"/v1/jobs/{first}/cancel", headers=alice).status_code == 200
        (stop,) = poll.result()
        assert stop["kind"] == "stop" and stop["assignment_id"] == launch["assignment_id"]
        # While the agent stops it (the process still alive), the stop it holds does not answer again...
        poll = Poll(api, "gpu-01", node, {"workloads": [running], "held": [f"stop:{launch['assignment_id']}"]})
        until(waiting(api, 1))
        # ...but a new placement does, with every command of the moment.
        second = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
        api.srv.loop.run_cycle()
        answer = poll.result()
        assert {c["kind"] for c in answer} == {"stop", "launch"}
        assert next(c for c in answer if c["kind"] == "launch")["job_id"] == second


def test_a_poll_woken_with_nothing_new_builds_no_launch(
    db_url: str, tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    for api in make_api(db_url, tmp_path, clock, command_wait_s=60.0):
        alice = api.tenant("alice")
        node = api.register("gpu-01")
        first = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
        api.srv.loop.run_cycle()
        (launch,) = Poll(api, "gpu-01", node, {"workloads": [], "held": []}).result()
        reads: list[list[str]] = []
        ops = api.srv.gateway._ops
        inputs = ops.launch_inputs
        monkeypatch.setattr(ops, "launch_inputs", lambda jobs, r=reads, f=inputs: r.append(list(jobs)) or f(jobs))
        # The agent holds the launch and has not reported it yet (still placed): each ring of its host wakes
        # the poll, which finds nothing new without reading the launch's inputs, and waits again.
        poll = Poll(api, "gpu-01", node, {"workloads": [], "held": [f"launch:{launch['assignment_id']}"]})
        bell = api.srv.push.bell
        for n in range(3):
            until(waiting(api, 1), what=f"the poll waiting ({n})")
            mark = bell.mark("gpu-01")
            bell.ring(["gpu-01"])  # drops the waiter at once: waiting 1 again means the poll woke and parked again
            until(lambda m=mark, b=bell: b.mark("gpu-01") > m and b.waiting == 1, what=f"the poll parked ({n})")
        assert reads == []
        # A new placement answers it with every command, the held launch built again with the new one.
        second = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
        api.srv.loop.run_cycle()
        answer = poll.result()
        assert sorted(c["job_id"] for c in answer) == sorted([first, second])
        assert reads and set(reads[-1]) == {first, second}


def test_a_beat_holding_every_command_gets_none_and_builds_no_launch(
    db_url: str, tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    for api in make_api(db_url, tmp_path, clock, command_wait_s=60.0):
        alice = api.tenant("alice")
        node = api.register("gpu-01")
        api.client.post("/v1/jobs", json=JOB, headers=alice)
        api.srv.loop.run_cycle()
        (launch,) = Poll(api, "gpu-01", node, {"workloads": [], "held": []}).result()
        reads: list[list[str]] = []
        ops = api.srv.gateway._ops
        inputs = ops.launch_inputs
        monkeypatch.setattr(ops, "launch_inputs", lambda jobs, r=reads, f=inputs: r.append(list(jobs)) or f(jobs))

        def beat(held: list[str] | None) -> list[Any]:
            body = {"seq": 1, "at_s": 0.0, "workloads": [], "held": held}
            r = api.client.post("/v1/agents/gpu-01/heartbeat", json=body, headers=node)  # noqa: B023
            assert r.status_code == 200, r.text
            return list(r.json()["commands"])

        # The agent holds the launch its poll brought (not reported yet): the beat brings nothing, reads nothing.
        assert beat([f"launch:{launch['assignment_id']}"]) == []
        assert reads == []
        # Holding nothing (its poll failed), or saying nothing (an older agent): every command, as before.
        assert beat([]) == [launch]
        assert beat(None) == [launch]
        assert len(reads) == 2


def test_a_poll_with_nothing_new_ends_after_the_wait_with_what_it_has(
    db_url: str, tmp_path: Path, clock: Clock
) -> None:
    for api in make_api(db_url, tmp_path, clock, command_wait_s=0.3):
        alice = api.tenant("alice")
        node = api.register("gpu-01")
        api.client.post("/v1/jobs", json=JOB, headers=alice)
        api.srv.loop.run_cycle()
        (launch,) = api.beat("gpu-01", node)
        poll = Poll(api, "gpu-01", node, {"workloads": [], "held": [f"launch:{launch['assignment_id']}"]})
        assert poll.result() == [launch]
        assert poll.seconds >= 0.3
        assert api.srv.push.bell.waiting == 0


def test_a_poll_needs_the_node_token(api: Api) -> None:
    api.register("gpu-01")
    r = api.client.post("/v1/agents/gpu-01/commands", json={}, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.json()["code"] == "UNAUTHENTICATED"
    node = api.register("gpu-02")
    r = api.client.post("/v1/agents/gpu-01/commands", json={}, headers=node)  # another node's token
    assert r.status_code == 401


def test_a_polls_token_is_checked_in_memory_and_a_replaced_one_is_refused(
    db_url: str, tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poll whose token memory already shows to be its host's is checked on the event loop (no worker, no read:
    ``check_node`` is not called); a wrong token, or one replaced by a registration here (at once) or on another
    replica (once ``host_cache_s`` has passed, the bound a beat's check has too), is refused with 401."""
    for api in make_api(db_url, tmp_path, clock, command_wait_s=0.05):
        for other in make_api(db_url, tmp_path, clock, command_wait_s=0.05):
            _replaced_tokens(api, other, clock, monkeypatch)


def _replaced_tokens(api: Api, other: Api, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    checks: list[str] = []
    real = api.srv.gateway.check_node
    monkeypatch.setattr(api.srv.gateway, "check_node", lambda h, t: checks.append(h) or real(h, t))

    def polled(node: dict[str, str]) -> int:
        return int(api.client.post("/v1/agents/gpu-01/commands", json={}, headers=node).status_code)

    old = api.register("gpu-01")
    intruder = api.register("gpu-02")
    assert polled(old) == 200 and checks == ["gpu-01"]  # verified once, on a worker
    assert polled(old) == 200 and polled(old) == 200 and checks == ["gpu-01"]  # then from memory
    assert polled(intruder) == 401 and checks == ["gpu-01"] * 2  # another node's token: checked, refused

    other.node_tokens.update(api.node_tokens)
    new = other.register("gpu-01")  # another replica gives gpu-01 a new token
    clock.t += api.srv.settings.host_cache_s  # this replica's snapshot of the hashes is now due a reload
    assert not api.srv.gateway.node_token_held("gpu-01", old["Authorization"].removeprefix("Bearer "))
    assert polled(old) == 401
    assert polled(new) == 200 and polled(new) == 200
    checks.clear()

    api.node_tokens.update(other.node_tokens)
    newest = api.register("gpu-01")  # a new token here: the one before is refused at once
    assert polled(new) == 401 and checks == ["gpu-01"]
    assert polled(newest) == 200 and checks == ["gpu-01"] * 2
    clock.t += api.srv.settings.host_cache_s  # once the snapshot holds the new hash, from memory again
    assert polled(newest) == 200
    checks.clear()
    assert polled(newest) == 200 and checks == []
