"""Expected starts on the real server (SQLite and PostgreSQL), loop driven by hand: a pending job gets
``expected_start_s`` in the API and the dashboard's queue, from the leader's state after a cycle or, on a standby
that runs no cycles, from the store; unknown (null) behind a job nothing says the end of."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from server_api_helpers import Api, Clock, make_api

from gpupool.scheduler.projection import EXIT_LATENCY_S, LAUNCH_LATENCY_S

RUNTIME = 600.0
JOB = {"command": ["python", "-c", "print('hi')"], "tasks": 1, "gpus_per_task": 8}


def busy_host(api: Api, first: dict[str, object]) -> tuple[dict[str, str], str, str]:
    """One 8-GPU host running (placed) a first job, and a second job waiting for its GPUs."""
    alice = api.tenant("alice")
    api.register("gpu-01")
    running = api.client.post("/v1/jobs", json={**JOB, **first}, headers=alice).json()["job"]["id"]
    assert api.srv.loop.run_cycle().placed == 1
    waiting = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
    api.clock.t += 5.0
    assert api.srv.loop.run_cycle().placed == 0
    return alice, running, waiting


def expected_after(placed_at: float) -> float:
    """The waiting job's start: the running job's launch, its runtime, its exit, then the next launch."""
    return placed_at + LAUNCH_LATENCY_S + RUNTIME + EXIT_LATENCY_S + LAUNCH_LATENCY_S


def test_a_pending_job_gets_its_expected_start_from_the_leaders_state(api: Api) -> None:
    placed_at = api.clock.t
    alice, running, waiting = busy_host(api, {"estimated_runtime_s": RUNTIME})
    p = api.srv.eta.refresh()
    assert p is not None and p.at_s == api.clock.t
    job = api.client.get(f"/v1/jobs/{waiting}", headers=alice).json()
    assert job["state"] == "pending"
    assert job["expected_start_s"] == pytest.approx(expected_after(placed_at))
    listed = {j["id"]: j for j in api.client.get("/v1/jobs", headers=alice).json()["jobs"]}
    assert listed[waiting]["expected_start_s"] == job["expected_start_s"]
    assert listed[running]["expected_start_s"] is None  # not pending
    queue = api.client.get("/ui/api/queue", headers=alice).json()["jobs"]
    assert [(j["id"], j["expected_start_s"]) for j in queue] == [(waiting, round(job["expected_start_s"], 1))]


def test_a_read_wakes_the_projector_and_a_later_read_gets_the_value(api: Api) -> None:
    """No projection yet: the first read says null at once and wakes the projector's thread; the value arrives
    without any further cycle."""
    placed_at = api.clock.t
    alice, _, waiting = busy_host(api, {"estimated_runtime_s": RUNTIME})
    assert api.srv.eta.made == 0
    deadline = time.monotonic() + 20.0
    got = None
    while got is None and time.monotonic() < deadline:
        got = api.client.get(f"/v1/jobs/{waiting}", headers=alice).json()["expected_start_s"]
        time.sleep(0.02)  # a poll's pace, not a wait for something: the deadline bounds it
    assert got == pytest.approx(expected_after(placed_at))


def test_behind_a_job_with_no_estimate_the_expected_start_is_null(api: Api) -> None:
    alice, _, waiting = busy_host(api, {})
    p = api.srv.eta.refresh()
    assert p is not None and p.stopped == "idle"
    assert api.client.get(f"/v1/jobs/{waiting}", headers=alice).json()["expected_start_s"] is None


def test_the_time_limit_bounds_a_job_without_an_estimate(api: Api) -> None:
    placed_at = api.clock.t
    alice, _, waiting = busy_host(api, {"time_limit_s": RUNTIME})
    api.srv.eta.refresh()
    got = api.client.get(f"/v1/jobs/{waiting}", headers=alice).json()["expected_start_s"]
    assert got == pytest.approx(expected_after(placed_at))


def test_a_standby_replica_projects_from_the_store(db_url: str, tmp_path: Path, clock: Clock) -> None:
    """The standby runs no cycle and gets no offer: it builds the state from the store and answers the same."""
    for a in make_api(db_url, tmp_path, clock):
        for b in make_api(db_url, tmp_path, clock):
            placed_at = a.clock.t
            alice, _, waiting = busy_host(a, {"estimated_runtime_s": RUNTIME})
            assert not b.srv.loop.run_cycle().leader
            p = b.srv.eta.refresh()
            assert p is not None and p.at_s == clock.t
            got = b.client.get(f"/v1/jobs/{waiting}", headers=alice).json()["expected_start_s"]
            assert got == pytest.approx(expected_after(placed_at))


def test_reads_of_a_fresh_projection_make_no_new_one(api: Api) -> None:
    """Within ``eta_refresh_s`` of a projection, any number of reads (the API's, the dashboard's queue) answer
    from it and start nothing: a projection's cost is paid at most once per refresh period."""
    alice, _, waiting = busy_host(api, {"estimated_runtime_s": RUNTIME})
    api.srv.eta.refresh()
    for _ in range(20):
        assert api.client.get(f"/v1/jobs/{waiting}", headers=alice).json()["expected_start_s"] is not None
        assert api.client.get("/ui/api/queue", headers=alice).status_code == 200
    assert api.srv.eta.made == 1
