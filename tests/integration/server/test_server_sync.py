"""The leader's loop reads only the jobs that changed since its last cycle (``ServerOps.job_changes``): what
another replica commits between two cycles (a job submitted there, a pending job and a placed job cancelled
there) is in the leader's state at its next cycle, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from server_api_helpers import Clock, make_api

from gpupool.domain.states import JobState

JOB = {"command": ["python", "-c", "print('hi')"], "tasks": 1, "gpus_per_task": 8}


def test_changes_committed_by_another_replica_between_cycles_are_in_the_next_cycle(
    db_url: str, tmp_path: Path, clock: Clock
) -> None:
    for a in make_api(db_url, tmp_path, clock):
        for b in make_api(db_url, tmp_path, clock):
            alice = b.tenant("alice")
            a.register("gpu-01")
            assert a.srv.loop.run_cycle().leader and not b.srv.loop.run_cycle().leader
            first = b.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
            assert a.srv.loop.run_cycle().placed == 1  # submitted on B: A has no hint of it, only the store
            second = b.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
            third = b.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
            assert a.srv.loop.run_cycle().placed == 0  # the node is full
            state = a.srv.loop._state
            assert state is not None
            assert {j.job_id for j in state.snapshot().pending} == {second, third}
            for job in (first, second):
                r = b.client.post(f"/v1/jobs/{job}/cancel", headers=alice)
                assert r.status_code == 200 and r.json()["state"] == "cancelled", r.text
            a.srv.loop.run_cycle()
            state = a.srv.loop._state
            assert state is not None
            assert state.job_state(first) is JobState.CANCELLED
            assert state.job_state(second) is JobState.CANCELLED
            assert [j.job_id for j in state.snapshot().pending] == [third]
            assert a.srv.loop._db_state.get(third) is JobState.PENDING
