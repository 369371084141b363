"""Launches are built from a job's stored inputs; its spec and command, never rewritten, are parsed once per
replica (``store.launches.FixedInputs``), while what a requeue, a move or a cancel changes is read every time:
a launch never names an allocation, an attempt or a host that another replica has since replaced (SQLite and
PostgreSQL, two in-process replicas on one database)."""

from __future__ import annotations

from pathlib import Path

from server_api_helpers import Clock, make_api

from gpupool.store.launches import LaunchInputs

JOB = {"command": ["python", "-c", "print('hi')"], "tasks": 1, "gpus_per_task": 8, "env": {"A": "1"}}


def test_a_job_moved_then_cancelled_by_another_replica_is_never_launched_from_what_was_kept(
    db_url: str, tmp_path: Path, clock: Clock
) -> None:
    for leader in make_api(db_url, tmp_path, clock):
        for standby in make_api(db_url, tmp_path, clock):
            alice = leader.tenant("alice")
            n1, n2 = standby.register("gpu-01"), standby.register("gpu-02")
            leader.client.post("/v1/nodes/gpu-02/drain", json={}, headers=leader.admin())
            job = leader.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
            assert leader.srv.loop.run_cycle().placed == 1
            clock.t += standby.srv.settings.host_cache_s
            (first,) = standby.beat("gpu-01", n1)  # the standby parsed and kept the job's spec and command
            assert first["job_id"] == job and first["env"]["A"] == "1"
            first_attempt = int(first["env"].get("GPUPOOL_ATTEMPT", "0"))
            kept = standby.srv.ops._fixed.get(job)
            assert kept is not None

            # The leader moves it: the watchdog requeues the never-run rank, gpu-01 is drained, gpu-02 not.
            clock.t += leader.srv.settings.node_lost_after_s + 1
            leader.beat("gpu-01", n1)  # a node token works on any replica
            leader.beat("gpu-02", n2)
            leader.client.post("/v1/nodes/gpu-01/drain", json={}, headers=leader.admin())
            leader.client.post("/v1/nodes/gpu-02/undrain", headers=leader.admin())
            assert leader.srv.loop.run_cycle().placed == 1
            moved = _inputs(standby.srv.ops.launch_inputs([job])[job])
            ((rank, host),) = [(r.assignment_id, r.host) for r in moved.ranks]
            assert host == "gpu-02" and rank != first["assignment_id"]
            assert moved.attempt == first_attempt + 1 and standby.srv.ops._fixed.get(job) is kept  # parsed once, still
            # The standby's host cache still holds the old rank on gpu-01 (within host_cache_s): no launch.
            assert [c for c in standby.beat("gpu-01", n1) if c["kind"] == "launch"] == []
            clock.t += standby.srv.settings.host_cache_s
            (second,) = standby.beat("gpu-02", n2)
            assert second["assignment_id"] == rank and second["env"]["GPUPOOL_ATTEMPT"] == str(first_attempt + 1)

            # Cancelled by the leader: no live rank, and the standby's cache (not yet reloaded) sends no launch.
            assert leader.client.post(f"/v1/jobs/{job}/cancel", headers=alice).json()["state"] == "cancelled"
            assert _inputs(standby.srv.ops.launch_inputs([job])[job]).ranks == ()
            assert standby.srv.gateway._launches(standby.srv.gateway._hosts.assignments("gpu-02")) == []


def _inputs(got: object) -> LaunchInputs:
    assert isinstance(got, LaunchInputs), got
    return got
