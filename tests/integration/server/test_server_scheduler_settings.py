"""A server started with the ``scheduler`` settings of a file and the environment runs with them: backfill
reserves for the head of the queue and lets only short jobs through; preemption by attained service takes a
long-running job's GPUs for a new one. The real app, store and scheduling loop (driven one cycle at a time)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from server_api_helpers import ADMIN, Api, Clock

from gpupool.server.app import create_app
from gpupool.server.settings import load_settings


def _api(db_url: str, tmp_path: Path, clock: Clock, yaml_text: str, env: dict[str, str]) -> Iterator[Api]:
    f = tmp_path / "server.yaml"
    f.write_text(yaml_text, encoding="utf-8")
    settings = replace(load_settings(f, env=env), data_dir=str(tmp_path), database_url=db_url, admin_token=ADMIN)
    app = create_app(settings, clock=clock, run_loop=False)
    with TestClient(app) as client:
        yield Api(client, app.state.server, clock)


@pytest.fixture
def backfill_api(db_url: str, tmp_path: Path, clock: Clock) -> Iterator[Api]:
    yield from _api(db_url, tmp_path, clock, "scheduler:\n  policy: fifo\n  backfill: easy\n", {})


@pytest.fixture
def service_api(db_url: str, tmp_path: Path, clock: Clock) -> Iterator[Api]:
    text = "scheduler:\n  policy: las\n  las_thresholds_gpu_s: [100]\n  preemption_by_service: true\n"
    yield from _api(db_url, tmp_path, clock, text, {"GPUPOOL_SCHEDULER__PREEMPTION_MIN_RUNTIME_S": "0"})


def _job(gpus: int, runtime_s: float | None = None, *, preemptible: bool = False) -> dict[str, object]:
    return {
        "command": ["sleep", "1"],
        "gpus_per_task": gpus,
        "estimated_runtime_s": runtime_s,
        "preemptible": preemptible,
    }


def _start(api: Api, host: str, node: dict[str, str]) -> list[dict[str, object]]:
    """The agent reports every launch it was sent as running; the statuses it keeps reporting."""
    running = [
        {"assignment_id": cmd["assignment_id"], "job_id": cmd["job_id"], "state": "running", "exit_code": None,
         "at_s": api.clock.t}
        for cmd in api.beat(host, node)
        if cmd.get("kind", "launch") == "launch"
    ]  # fmt: skip
    api.beat(host, node, running)
    return running


def test_easy_backfill_from_the_settings_file_reserves_for_the_head_and_lets_only_short_jobs_through(
    backfill_api: Api,
) -> None:
    api = backfill_api
    assert api.srv.settings.scheduler.backfill.value == "easy"
    alice = api.tenant("alice")
    node = api.register("gpu-01")  # 8 GPUs

    def submit(gpus: int, runtime_s: float) -> str:
        api.clock.t += 1.0  # one job a second: fifo's order is the submission order
        r = api.client.post("/v1/jobs", json=_job(gpus, runtime_s), headers=alice)
        assert r.status_code == 201, r.text
        return str(r.json()["job"]["id"])

    half = submit(4, 1000.0)
    assert api.srv.loop.run_cycle().placed == 1
    _start(api, "gpu-01", node)
    api.srv.loop.run_cycle()
    api.clock.t += 10.0
    head, long, short = submit(8, 100.0), submit(4, 5000.0), submit(4, 100.0)
    report = api.srv.loop.run_cycle()
    assert report.placed == 1
    state = {j: api.client.get(f"/v1/jobs/{j}", headers=alice).json() for j in (half, head, long, short)}
    assert state[head]["reason_code"] == "waiting_for_reservation", state[head]
    assert state[long]["reason_code"] == "reserved", state[long]  # would run past the head's reservation
    assert state[short]["state"] == "placed"  # ends before the reservation starts: backfilled


def test_preemption_by_service_from_the_settings_takes_a_long_running_jobs_gpus(service_api: Api) -> None:
    api = service_api
    s = api.srv.settings.scheduler
    assert (s.policy, s.preemption_by_service, s.preemption_min_runtime_s) == ("las", True, 0.0)
    alice = api.tenant("alice")
    node = api.register("gpu-01")
    old = api.client.post("/v1/jobs", json=_job(8, preemptible=True), headers=alice).json()["job"]["id"]
    assert api.srv.loop.run_cycle().placed == 1
    running = _start(api, "gpu-01", node)
    api.srv.loop.run_cycle()  # the loop sees it running from now
    api.clock.t += 20.0  # 8 GPUs x 20 s: past the 100 GPU-s threshold, LAS queue 1
    api.beat("gpu-01", node, running)
    new = api.client.post("/v1/jobs", json=_job(8), headers=alice).json()["job"]["id"]
    report = api.srv.loop.run_cycle()
    assert report.preempted == 1
    assert api.client.get(f"/v1/jobs/{old}", headers=alice).json()["state"] == "pending"
    why = api.client.get(f"/v1/jobs/{new}", headers=alice).json()
    assert why["reason_code"] == "preempting", why
    events = api.client.get(f"/v1/jobs/{old}/events", headers=alice).json()["events"]
    assert any("attained_service" in str(e["data"]) for e in events), events
    # The victim's GPUs stay held (releasing) until its agent reports the process gone; then the next cycle
    # places the new job on them.
    assert api.srv.loop.run_cycle().placed == 0
    api.beat("gpu-01", node, [{**r, "state": "exited", "exit_code": -15, "at_s": api.clock.t} for r in running])
    assert api.srv.loop.run_cycle().placed == 1
    assert api.client.get(f"/v1/jobs/{new}", headers=alice).json()["state"] == "placed"
