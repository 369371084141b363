"""Durable agent commands (SQLite and PostgreSQL, two in-process replicas driven by hand): a checkpoint signal
the leader's cycle decides (a quota reclaim with a grace period) is stored, not kept in the leader's memory;
the other replica, the one the agent talks to, sends it on every reply until the agent lists its id as
executed, then never again; it is stored under the leader's lease token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from server_api_helpers import Api, Clock, make_api

JOB = {"command": ["python", "-c", "print('hi')"], "tasks": 1, "gpus_per_task": 8}


def beat(api: Api, host: str, node: dict[str, str], workloads: list[dict[str, Any]], **extra: Any) -> list[Any]:
    body = {"seq": 1, "at_s": api.clock.t, "workloads": workloads, **extra}
    r = api.client.post(f"/v1/agents/{host}/heartbeat", json=body, headers=node)
    assert r.status_code == 200, r.text
    return list(r.json()["commands"])


def stored_commands(api: Api) -> list[tuple[str, int | None]]:
    with api.srv.store._engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT host, leader_token FROM agent_commands WHERE done_s IS NULL")).all()
    return [(str(h), t) for h, t in rows]


def test_a_checkpoint_signal_is_stored_and_sent_by_any_replica_until_the_agent_reports_it_done(
    db_url: str, tmp_path: Path, clock: Clock
) -> None:
    for leader in make_api(db_url, tmp_path, clock):
        for other in make_api(db_url, tmp_path, clock):
            alice, bob = leader.tenant("alice"), leader.tenant("bob")
            for tenant, nominal in (("alice", 0), ("bob", 8)):
                body = {"pool": "default", "nominal_gpus": nominal, "cohort": "lab"}
                r = leader.client.put(f"/v1/tenants/{tenant}/quotas", json=body, headers=leader.admin())
                assert r.status_code == 200, r.text
            node = other.register("gpu-01")
            # Alice borrows bob's idle 8 GPUs with a preemptible job.
            leader.client.post("/v1/jobs", json={**JOB, "preemptible": True}, headers=alice)
            assert leader.srv.loop.run_cycle().placed == 1
            clock.t += other.srv.settings.host_cache_s
            (launch,) = beat(other, "gpu-01", node, [])
            running = [{"assignment_id": launch["assignment_id"], "job_id": launch["job_id"], "state": "running"}]
            running[0]["at_s"] = clock.t
            beat(other, "gpu-01", node, running, executed=[])
            # Bob wants his quota back: alice's job is asked to checkpoint first (the grace: 300 s).
            leader.client.post("/v1/jobs", json=JOB, headers=bob)
            assert leader.srv.loop.run_cycle().preempted == 0
            lease = leader.srv.store.lease("default")
            assert lease is not None and stored_commands(leader) == [("gpu-01", lease.token)]
            # Decided again (a new leader's cycle, its predecessor's signal not yet carried out): not doubled.
            (again,) = leader.srv.store.queue_signals([launch["assignment_id"]])
            assert stored_commands(leader) == [("gpu-01", lease.token)]
            clock.t += other.srv.settings.host_cache_s
            for _ in range(3):  # the other replica repeats it while the agent has not carried it out
                (sig,) = beat(other, "gpu-01", node, running, executed=[])
                assert (sig["kind"], sig["assignment_id"]) == ("signal", launch["assignment_id"])
            assert sig["command_id"] == again.command_id != ""
            # Carried out: listed as executed, marked done, and sent no more by either replica.
            assert beat(other, "gpu-01", node, running, executed=[sig["command_id"]]) == []
            assert stored_commands(leader) == []
            # Decided again after it was carried out (a new leader, the rank still in its grace): the rank was
            # signalled already, so nothing is stored or sent (it was stored and sent a second time before).
            assert leader.srv.store.queue_signals([launch["assignment_id"]]) == []
            assert stored_commands(leader) == []
            clock.t += leader.srv.settings.host_cache_s
            leader.srv.loop.run_cycle()  # the same (job, preemption time): not signalled again
            assert beat(leader, "gpu-01", node, running, executed=[]) == []
            assert beat(other, "gpu-01", node, running, executed=[]) == []


def test_an_older_agent_gets_a_stored_signal_once(api: Api) -> None:
    """An agent that reports nothing executed (a protocol field it does not know) gets each signal once, as
    before: the signal is marked done as it is sent."""
    alice, bob = api.tenant("alice"), api.tenant("bob")
    for tenant, nominal in (("alice", 0), ("bob", 8)):
        body = {"pool": "default", "nominal_gpus": nominal, "cohort": "lab"}
        assert api.client.put(f"/v1/tenants/{tenant}/quotas", json=body, headers=api.admin()).status_code == 200
    node = api.register("gpu-01")
    api.client.post("/v1/jobs", json={**JOB, "preemptible": True}, headers=alice)
    api.srv.loop.run_cycle()
    (launch,) = api.beat("gpu-01", node)
    running = [{"assignment_id": launch["assignment_id"], "job_id": launch["job_id"], "state": "running", "at_s": 0}]
    api.beat("gpu-01", node, running)
    api.client.post("/v1/jobs", json=JOB, headers=bob)
    api.srv.loop.run_cycle()
    (sig,) = api.beat("gpu-01", node, running)
    assert sig["kind"] == "signal"
    assert api.beat("gpu-01", node, running) == [] and stored_commands(api) == []
