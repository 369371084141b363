"""The server's loop feeds ``gittins`` the service of finished jobs (``CycleInputs.service_history``), from
the completions its sync sees, through the simulator's ``HistoryBuilder``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from server_api_helpers import ADMIN, Api, Clock

from gpupool.scheduler.gittins import ALL, ServiceHistory
from gpupool.scheduler.settings import SchedulerSettings
from gpupool.server.app import create_app
from gpupool.server.settings import Settings

JOB = {"command": ["python", "-c", "print('hi')"], "tasks": 1, "gpus_per_task": 2}


@pytest.fixture
def gittins_api(db_url: str, tmp_path: Path, clock: Clock) -> Iterator[Api]:
    settings = Settings(
        data_dir=str(tmp_path),
        database_url=db_url,
        admin_token=ADMIN,
        node_lost_after_s=30.0,
        scheduler=SchedulerSettings(policy="gittins"),
    )
    app = create_app(settings, clock=clock, run_loop=False)
    with TestClient(app) as client:
        yield Api(client, app.state.server, clock)


def status(cmd: dict, state: str, at: float, code: int | None = None) -> dict:
    return {
        "assignment_id": cmd["assignment_id"],
        "job_id": cmd["job_id"],
        "state": state,
        "exit_code": code,
        "at_s": at,
    }


def test_the_cycle_ranks_by_the_service_of_finished_jobs(gittins_api: Api) -> None:
    api = gittins_api
    alice = api.tenant("alice")
    node = api.register("gpu-01")
    job_id = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
    assert api.srv.loop.run_cycle().placed == 1
    first = api.srv.loop.inputs
    assert first is not None and first.service_history is not None
    assert first.service_history.counts[ALL] == 0  # nothing finished yet: the prior alone
    (launch,) = api.beat("gpu-01", node)
    api.beat("gpu-01", node, [status(launch, "running", api.clock.t)])
    api.srv.loop.run_cycle()  # the loop sees it running from now
    api.clock.t += 600.0
    api.beat("gpu-01", node, [status(launch, "exited", api.clock.t, 0)])
    assert api.client.get(f"/v1/jobs/{job_id}", headers=alice).json()["state"] == "finished"
    # A job cancelled while running (or failing) is no completion: its service says nothing of what jobs need.
    other = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
    api.srv.loop.run_cycle()
    (launch2,) = api.beat("gpu-01", node)
    api.beat("gpu-01", node, [status(launch2, "running", api.clock.t)])
    api.srv.loop.run_cycle()
    api.clock.t += 20.0
    api.beat("gpu-01", node, [status(launch2, "running", api.clock.t)])
    assert api.client.post(f"/v1/jobs/{other}/cancel", headers=alice).json()["state"] == "cancelled"
    api.srv.loop.run_cycle()
    inputs = api.srv.loop.inputs
    hist = inputs.service_history if inputs is not None else None
    assert hist is not None
    assert hist.counts[ALL] == 1 and hist.counts[2] == 1
    # 600 s on 2 GPUs: the same history the simulator's engine builds from that completion
    submit_s = api.client.get(f"/v1/jobs/{job_id}", headers=alice).json()["submit_time_s"]
    expected = ServiceHistory({2: [1200.0]}, hist.config, [(submit_s, 1200.0)])
    for attained in (0.0, 1000.0, 5000.0):
        assert hist.index(2, attained) == expected.index(2, attained)
    assert hist.index(2, 0.0) != ServiceHistory.empty(hist.config).index(2, 0.0)
