"""The whole path through the real app: submit, schedule, launch on heartbeat, run, finish; on both backends."""

from __future__ import annotations

from pathlib import Path

from server_api_helpers import Api, Clock, make_api
from sqlalchemy import delete, select

from gpupool.store.rows import AllocationRow, JobRow

JOB = {"command": ["python", "-c", "print('hi')"], "tasks": 1, "gpus_per_task": 2}


def status(cmd: dict, state: str, code: int | None = None, at: float = 0.0) -> dict:
    return {
        "assignment_id": cmd["assignment_id"],
        "job_id": cmd["job_id"],
        "state": state,
        "exit_code": code,
        "at_s": at,
    }


def test_a_job_is_placed_launched_with_its_env_and_finishes(api: Api) -> None:
    alice = api.tenant("alice")
    node = api.register("gpu-01")
    r = api.client.post("/v1/jobs", json=JOB, headers=alice)
    assert r.status_code == 201, r.text
    job_id = r.json()["job"]["id"]
    assert r.json()["job"]["state"] == "pending"
    report = api.srv.loop.run_cycle()
    assert report.placed == 1
    assert api.client.get(f"/v1/jobs/{job_id}", headers=alice).json()["state"] == "placed"
    (launch,) = api.beat("gpu-01", node)
    assert launch["kind"] == "launch" and launch["argv"] == JOB["command"]
    env = launch["env"]
    assert env["GPUPOOL_JOB_ID"] == job_id and env["WORLD_SIZE"] == "1" and env["RANK"] == "0"
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(str(g) for g in launch["gpus"]) and len(launch["gpus"]) == 2
    assert env["NCCL_IB_HCA"].startswith("=mlx5_")
    assert env["MASTER_ADDR"] == "testclient"  # the address the agent registered from
    # The agent runs it: no second launch while it reports the assignment.
    assert api.beat("gpu-01", node, [status(launch, "running")]) == []
    assert api.client.get(f"/v1/jobs/{job_id}", headers=alice).json()["state"] == "running"
    assert api.beat("gpu-01", node, [status(launch, "exited", 0)]) == []
    assert api.client.get(f"/v1/jobs/{job_id}", headers=alice).json()["state"] == "finished"
    actions = [e["action"] for e in api.client.get(f"/v1/jobs/{job_id}/events", headers=alice).json()["events"]]
    assert actions == ["job.submitted", "job.placed", "job.running", "job.finished"]


def test_a_failing_rank_fails_the_job(api: Api) -> None:
    alice = api.tenant("alice")
    node = api.register("gpu-01")
    job_id = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
    api.srv.loop.run_cycle()
    (launch,) = api.beat("gpu-01", node)
    api.beat("gpu-01", node, [status(launch, "exited", 3)])
    job = api.client.get(f"/v1/jobs/{job_id}", headers=alice).json()
    assert job["state"] == "failed"


def test_cancel_of_a_running_job_stops_it_on_the_next_heartbeat(api: Api) -> None:
    alice = api.tenant("alice")
    node = api.register("gpu-01")
    job_id = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
    api.srv.loop.run_cycle()
    (launch,) = api.beat("gpu-01", node)
    api.beat("gpu-01", node, [status(launch, "running")])
    r = api.client.post(f"/v1/jobs/{job_id}/cancel", headers=alice)
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    (stop,) = api.beat("gpu-01", node, [status(launch, "running")])
    assert stop["kind"] == "stop" and stop["assignment_id"] == launch["assignment_id"]
    assert stop["grace_s"] == 30.0  # the default stop grace


def test_the_stop_grace_comes_from_the_settings(db_url: str, tmp_path: Path, clock: Clock) -> None:
    for api in make_api(db_url, tmp_path, clock, stop_grace_s=1.5):
        alice = api.tenant("alice")
        node = api.register("gpu-01")
        job_id = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
        api.srv.loop.run_cycle()
        (launch,) = api.beat("gpu-01", node)
        api.beat("gpu-01", node, [status(launch, "running")])
        assert api.client.post(f"/v1/jobs/{job_id}/cancel", headers=alice).status_code == 200
        (stop,) = api.beat("gpu-01", node, [status(launch, "running")])
        assert stop["kind"] == "stop" and stop["grace_s"] == 1.5


def test_a_gang_spans_nodes_with_one_master(api: Api) -> None:
    alice = api.tenant("alice")
    nodes = {h: api.register(h, gpus=4, address=f"10.0.0.{h[-1]}") for h in ("gpu-01", "gpu-02")}
    body = {**JOB, "tasks": 2, "gpus_per_task": 4}
    job_id = api.client.post("/v1/jobs", json=body, headers=alice).json()["job"]["id"]
    assert api.srv.loop.run_cycle().placed == 1
    launches = [c for h, n in nodes.items() for c in api.beat(h, n)]
    assert sorted(c["env"]["RANK"] for c in launches) == ["0", "1"]
    assert {c["env"]["WORLD_SIZE"] for c in launches} == {"2"}
    # The address an agent gave at registration wins over the one its request came from.
    master = next(h for h, n in nodes.items() for c in api.beat(h, n) if c["env"]["RANK"] == "0")
    assert {c["env"]["MASTER_ADDR"] for c in launches} == {f"10.0.0.{master[-1]}"}
    assert len({c["env"]["MASTER_PORT"] for c in launches}) == 1
    assert {c["env"]["LOCAL_RANK"] for c in launches} == {"0"}
    assert api.client.get(f"/v1/jobs/{job_id}", headers=alice).json()["state"] == "placed"


def test_a_lost_node_requeues_its_gang_and_stops_the_stale_rank_when_it_returns(api: Api) -> None:
    alice = api.tenant("alice")
    n1 = api.register("gpu-01", gpus=4)
    n2 = api.register("gpu-02", gpus=4)
    body = {**JOB, "tasks": 2, "gpus_per_task": 4}
    job_id = api.client.post("/v1/jobs", json=body, headers=alice).json()["job"]["id"]
    api.srv.loop.run_cycle()
    (l1,) = api.beat("gpu-01", n1)
    (l2,) = api.beat("gpu-02", n2)
    api.beat("gpu-01", n1, [status(l1, "running")])
    api.beat("gpu-02", n2, [status(l2, "running")])
    assert api.client.get(f"/v1/jobs/{job_id}", headers=alice).json()["state"] == "running"
    api.clock.t += 20
    api.beat("gpu-02", n2, [status(l2, "running")])
    api.clock.t += 20  # gpu-01 silent for 40 s > 30 s
    api.srv.loop.run_cycle()
    nodes = {n["name"]: n["state"] for n in api.client.get("/v1/nodes", headers=alice).json()["nodes"]}
    assert nodes == {"gpu-01": "lost", "gpu-02": "up"}
    # The whole gang went back to the queue; gpu-02's rank is stopped although its node is fine.
    (stop,) = api.beat("gpu-02", n2, [status(l2, "running")])
    assert stop["kind"] == "stop" and stop["assignment_id"] == l2["assignment_id"]
    # gpu-01 comes back still running its old rank: it is stopped, never counted twice.
    cmds = api.beat("gpu-01", n1, [status(l1, "running")])
    assert [c["kind"] for c in cmds] == ["stop"] and cmds[0]["assignment_id"] == l1["assignment_id"]
    assert api.client.get(f"/v1/jobs/{job_id}", headers=alice).json()["state"] == "pending"
    # Both stale ranks still hold their GPUs (releasing) while their processes run: nothing is placed there.
    assert api.srv.loop.run_cycle().placed == 0
    # Their agents report them gone (killed by the stop): the GPUs are free again.
    api.beat("gpu-02", n2, [status(l2, "exited", -15)])
    api.beat("gpu-01", n1, [status(l1, "exited", -15)])
    # Placed again, under a new assignment id.
    assert api.srv.loop.run_cycle().placed == 1
    relaunch = [c for c in api.beat("gpu-01", n1) if c["kind"] == "launch"]
    assert relaunch and relaunch[0]["assignment_id"] not in (l1["assignment_id"], l2["assignment_id"])


def test_a_requeued_gang_runs_only_when_every_new_rank_started(api: Api) -> None:
    """The ranks of the first allocation must not count for the second: after the requeue, the first new
    rank to start leaves the job PLACED, so the other rank still gets its launch."""
    alice = api.tenant("alice")
    nodes = {h: api.register(h, gpus=4) for h in ("gpu-01", "gpu-02", "gpu-03")}
    body = {**JOB, "tasks": 2, "gpus_per_task": 4}
    job_id = api.client.post("/v1/jobs", json=body, headers=alice).json()["job"]["id"]
    api.srv.loop.run_cycle()
    first = {h: c for h, n in nodes.items() for c in api.beat(h, n)}
    assert len(first) == 2
    for h, c in first.items():
        api.beat(h, nodes[h], [status(c, "running")])
    assert api.client.get(f"/v1/jobs/{job_id}", headers=alice).json()["state"] == "running"
    victim = min(first)
    others = [h for h in nodes if h != victim]
    api.clock.t += 20
    for h in others:
        api.beat(h, nodes[h], [status(first[h], "running")] if h in first else [])
    api.clock.t += 20  # the victim silent for 40 s > 30 s
    api.srv.loop.run_cycle()  # lost, gang requeued; the surviving old rank still holds its GPUs (releasing)
    assert api.client.get(f"/v1/jobs/{job_id}", headers=alice).json()["state"] == "pending"
    for h in others:  # the surviving old rank is stopped and its agent reports it gone
        if h in first:
            api.beat(h, nodes[h], [status(first[h], "exited", -15)])
    api.srv.loop.run_cycle()
    assert api.client.get(f"/v1/jobs/{job_id}", headers=alice).json()["state"] == "placed"
    events = api.client.get(f"/v1/jobs/{job_id}/events", headers=alice).json()["events"]
    assert [e["action"] for e in events].count("job.placed") == 2
    launches = {}
    for h in others:
        cmds = api.beat(h, nodes[h])
        launches[h] = next(c for c in cmds if c["kind"] == "launch")
        assert launches[h]["assignment_id"] not in {c["assignment_id"] for c in first.values()}
    a, b = others
    # One new rank starts: not yet running, and the other rank's launch is still sent.
    api.beat(a, nodes[a], [status(launches[a], "running")])
    assert api.client.get(f"/v1/jobs/{job_id}", headers=alice).json()["state"] == "placed"
    again = [c for c in api.beat(b, nodes[b]) if c["kind"] == "launch"]
    assert [c["assignment_id"] for c in again] == [launches[b]["assignment_id"]]
    api.beat(b, nodes[b], [status(launches[b], "running")])
    assert api.client.get(f"/v1/jobs/{job_id}", headers=alice).json()["state"] == "running"


def test_a_drained_node_gets_no_new_work(api: Api) -> None:
    alice = api.tenant("alice")
    api.register("gpu-01")
    assert (
        api.client.post("/v1/nodes/gpu-01/drain", json={"reason": "maintenance"}, headers=api.admin()).status_code
        == 200
    )
    job_id = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
    assert api.srv.loop.run_cycle().placed == 0
    why = api.client.get(f"/v1/jobs/{job_id}/why", headers=alice).json()
    assert why["state"] == "pending" and why["reason_code"] != "" and why["reason"] != ""
    api.client.post("/v1/nodes/gpu-01/undrain", headers=api.admin())
    assert api.srv.loop.run_cycle().placed == 1


def test_the_loop_stores_a_shape_s_waiting_reason_once_and_the_api_shows_it_per_job(api: Api) -> None:
    """Jobs of one shape and runtime that wait alike point at one stored class (``server.reasons``); each
    job's reason reads the same through GET /v1/jobs/{id}, the jobs list and /why as if stored per job."""
    alice = api.tenant("alice")
    api.register("gpu-01")
    body = {**JOB, "gpus_per_task": 8}
    ids = [api.client.post("/v1/jobs", json=body, headers=alice).json()["job"]["id"] for _ in range(4)]
    assert api.srv.loop.run_cycle().placed == 1
    waiting = [j for j in ids if api.srv.store.get_job(j).state.value == "pending"]
    with api.srv.store._tx(write=False) as s:
        stored = dict(s.execute(select(JobRow.id, JobRow.wait_class).where(JobRow.id.in_(waiting))).all())
    assert len(waiting) == 3 and len(set(stored.values())) == 1 and None not in stored.values()
    listed = {j["id"]: j for j in api.client.get("/v1/jobs", headers=alice).json()["jobs"]}
    seen = set()
    for job_id in waiting:
        one = api.client.get(f"/v1/jobs/{job_id}", headers=alice).json()
        why = api.client.get(f"/v1/jobs/{job_id}/why", headers=alice).json()
        assert one["reason_code"] not in ("", None) and one["reason"] != ""
        assert (one["reason_code"], one["reason"]) == (listed[job_id]["reason_code"], listed[job_id]["reason"])
        assert (why["reason_code"], why["reason"]) == (one["reason_code"], one["reason"])
        seen.add((one["reason_code"], one["reason"]))
    assert len(seen) == 1
    # The placed job shows no waiting reason.
    (placed,) = set(ids) - set(waiting)
    assert api.client.get(f"/v1/jobs/{placed}", headers=alice).json()["reason_code"] == ""


def test_a_tenant_over_its_quota_waits_with_quota_exceeded(api: Api) -> None:
    alice = api.tenant("alice")
    api.register("gpu-01")
    api.register("gpu-02")
    r = api.client.put("/v1/tenants/alice/quotas", json={"pool": "default", "nominal_gpus": 8}, headers=api.admin())
    assert r.status_code == 200, r.text
    body = {**JOB, "gpus_per_task": 8}
    ids = [api.client.post("/v1/jobs", json=body, headers=alice).json()["job"]["id"] for _ in range(2)]
    assert api.srv.loop.run_cycle().placed == 1  # 16 GPUs free, but alice may hold 8
    # Both were submitted at the same instant: which one goes first is the id's tie-break.
    whys = [api.client.get(f"/v1/jobs/{j}/why", headers=alice).json() for j in ids]
    assert sorted(w["state"] for w in whys) == ["pending", "placed"]
    (why,) = [w for w in whys if w["state"] == "pending"]
    assert why["reason_code"] == "quota_exceeded", why
    # A bigger quota lets it run on the next cycle.
    api.client.put("/v1/tenants/alice/quotas", json={"pool": "default", "nominal_gpus": 16}, headers=api.admin())
    assert api.srv.loop.run_cycle().placed == 1


def test_why_of_a_deadline_job_carries_the_admission_answer(api: Api) -> None:
    alice = api.tenant("alice")
    api.register("gpu-01")
    now = api.clock.t
    hopeless = {**JOB, "gpus_per_task": 8, "estimated_runtime_s": 3600, "deadline_s": now + 600}
    fine = {**JOB, "gpus_per_task": 8, "estimated_runtime_s": 600, "deadline_s": now + 86_400}
    blocker = api.client.post("/v1/jobs", json={**JOB, "gpus_per_task": 8}, headers=alice).json()["job"]["id"]
    api.srv.loop.run_cycle()
    assert api.client.get(f"/v1/jobs/{blocker}", headers=alice).json()["state"] == "placed"
    late = api.client.post("/v1/jobs", json=hopeless, headers=alice).json()["job"]["id"]
    ok = api.client.post("/v1/jobs", json=fine, headers=alice).json()["job"]["id"]
    api.srv.loop.run_cycle()
    why_late = api.client.get(f"/v1/jobs/{late}/why", headers=alice).json()
    assert why_late["deadline"] == "infeasible" and "late by" in why_late["deadline_detail"], why_late
    why_ok = api.client.get(f"/v1/jobs/{ok}/why", headers=alice).json()
    assert why_ok["deadline"] == "feasible" and why_ok["earliest_finish_s"] > now, why_ok


CALENDAR = """
timezone = "UTC"
default_pool = "training"

[[pool]]
name = "inference"
hosts = ["gpu-01"]
share = 1.0
share_outside = 0.0
windows = [{ days = "mon-sun", start = "08:00", end = "20:00" }]
"""


def test_a_pool_window_takes_its_host_back_checkpoint_first_then_stop(api: Api) -> None:
    monday_0700 = 1_736_146_800.0  # 2025-01-06 07:00 UTC: inference's window is closed, training owns gpu-01
    api.clock.t = monday_0700
    alice = api.tenant("alice")
    node = api.register("gpu-01")
    r = api.client.put("/v1/pools/inference", json={"calendar_toml": CALENDAR}, headers=api.admin())
    assert r.status_code == 200, r.text
    # Preemptible: a pool reclaims only those (a service, not preemptible, keeps its host until it ends).
    body = {**JOB, "pool": "training", "preemptible": True}
    job_id = api.client.post("/v1/jobs", json=body, headers=alice).json()["job"]["id"]
    assert api.srv.loop.run_cycle().placed == 1
    (launch,) = api.beat("gpu-01", node)
    running = [status(launch, "running")]
    api.beat("gpu-01", node, running)
    api.srv.loop.run_cycle()
    assert api.beat("gpu-01", node, running) == []  # nothing to do while training owns the host
    # 08:00: the window opens and gpu-01 is inference's. The borrower is asked to checkpoint, once.
    api.clock.t = monday_0700 + 3600 + 30
    api.beat("gpu-01", node, running)
    assert api.srv.loop.run_cycle().preempted == 0
    (signal,) = api.beat("gpu-01", node, running)
    assert signal["kind"] == "signal" and signal["signal"] == "checkpoint"
    assert signal["assignment_id"] == launch["assignment_id"]
    api.srv.loop.run_cycle()
    assert api.beat("gpu-01", node, running) == []
    # The grace (300 s from the window's start) ends: preempted, requeued, and the rank is stopped.
    api.clock.t = monday_0700 + 3600 + 301
    api.beat("gpu-01", node, running)
    assert api.srv.loop.run_cycle().preempted == 1
    (stop,) = api.beat("gpu-01", node, running)
    assert stop["kind"] == "stop" and stop["assignment_id"] == launch["assignment_id"]
    why = api.client.get(f"/v1/jobs/{job_id}/why", headers=alice).json()
    assert why["state"] == "pending"
    events = api.client.get(f"/v1/jobs/{job_id}/events", headers=alice).json()["events"]
    assert any("pool_window_closed" in str(e["data"]) for e in events), events


def test_a_gpu_graded_bad_by_its_agent_takes_no_whole_node_job(api: Api) -> None:
    alice = api.tenant("alice")
    nodes = {h: api.register(h, gpus=4) for h in ("gpu-01", "gpu-02")}
    api.srv.loop.run_cycle()  # the state exists before the grade changes: the change is folded in, not rebuilt
    grades = [{"index": i, "health": "bad" if i == 2 else "ok"} for i in range(4)]
    body = {"seq": 2, "at_s": api.clock.t, "gpus": grades}
    assert api.client.post("/v1/agents/gpu-01/heartbeat", json=body, headers=nodes["gpu-01"]).status_code == 200
    ids = [
        api.client.post("/v1/jobs", json={**JOB, "gpus_per_task": 4}, headers=alice).json()["job"]["id"]
        for _ in range(2)
    ]
    assert api.srv.loop.run_cycle().placed == 1
    launches = {h: api.beat(h, n) for h, n in nodes.items()}
    assert launches["gpu-01"] == [] and len(launches["gpu-02"]) == 1  # only the healthy node took a 4-GPU job
    states = sorted(api.client.get(f"/v1/jobs/{j}", headers=alice).json()["state"] for j in ids)
    assert states == ["pending", "placed"]


def test_a_cycle_stores_hundreds_of_placements_in_one_write_each_gpu_once(api: Api) -> None:
    """A cycle's placements are written in one transaction (``Store.record_allocations``): 300 in one cycle are all
    stored, each with its own GPU, their audit events carry the lease token, and the next cycle has nothing left
    to place."""
    alice = api.tenant("alice")
    for n in range(38):
        api.register(f"gpu-{n:02d}")
    ids = []
    for i in range(300):
        r = api.client.post("/v1/jobs", json={**JOB, "gpus_per_task": 1, "name": f"j{i}"}, headers=alice)
        assert r.status_code == 201, r.text
        ids.append(r.json()["job"]["id"])
    report = api.srv.loop.run_cycle()
    assert report.placed == 300 and report.waiting == 0
    store = api.srv.store
    assert {store.get_job(j).state.value for j in ids} == {"placed"}
    gpus = [(t.host, g) for a in store.load_state().allocations for t in a.tasks for g in t.gpus]
    assert len(gpus) == len(set(gpus)) == 300
    placed = store.list_audit(action="job.placed", limit=1000)
    tokens = {e.data.get("leader_token") for e in placed}
    assert len(placed) == 300 and len(tokens) == 1 and None not in tokens  # one leader's, all of them
    assert api.srv.loop.run_cycle().placed == 0


def test_a_launch_the_host_cache_still_holds_but_the_store_no_longer_does_is_not_sent(api: Api) -> None:
    """The host cache is up to host_cache_s old: another replica may have requeued or cancelled the job since
    it was read. A beat in that window gets no launch for the stale assignment (it raised IndexError, a 500,
    in the chaos run) and the agent's other commands still come."""
    alice = api.tenant("alice")
    node = api.register("gpu-01")
    api.client.post("/v1/jobs", json=JOB, headers=alice)
    api.srv.loop.run_cycle()
    (launch,) = api.beat("gpu-01", node)  # the cache now holds the assignment
    with api.srv.store._tx(write=True) as s:  # another replica's write, which this one's cache has not seen
        s.execute(delete(AllocationRow).where(AllocationRow.job_id == launch["job_id"]))
    assert api.beat("gpu-01", node) == []


def test_a_job_cancelled_before_its_launch_is_reported_keeps_its_gpus_until_its_agent_says_it_is_gone(
    api: Api,
) -> None:
    """Invariant: no GPU handed over while a process may run on it. The launch went out, the agent may have
    carried it out, and the cancel came before any report of it (0.1 s after a launch is enough on a busy node):
    the rank holds its GPUs (releasing). A beat that does not list it frees them only when it was built two
    beats after the cancel, by the server's clock: the agent says which reply it had carried out, or (an older
    agent) the beat's arrival stands in. A beat built earlier may predate the launch's arrival."""
    alice = api.tenant("alice")
    node = api.register("gpu-01", gpus=2)
    body = {**JOB, "gpus_per_task": 2}
    old = api.client.post("/v1/jobs", json=body, headers=alice).json()["job"]["id"]
    api.srv.loop.run_cycle()
    (launch,) = api.beat("gpu-01", node)
    new = api.client.post("/v1/jobs", json=body, headers=alice).json()["job"]["id"]
    cancelled_at = api.clock.t
    assert api.client.post(f"/v1/jobs/{old}/cancel", headers=alice).json()["state"] == "cancelled"
    assert api.srv.loop.run_cycle().placed == 0  # held: the launch may have been carried out
    settle = 2 * api.srv.settings.heartbeat_interval_s
    # Beats that list nothing, but were built before the agent could have received the launch: not proof.
    api.clock.t += settle + 1
    assert api.beat("gpu-01", node, [], seen_server_s=cancelled_at - 1) == []
    assert api.beat("gpu-01", node, [], seen_server_s=cancelled_at + settle - 1) == []
    assert api.srv.loop.run_cycle().placed == 0
    # Built after it carried out a reply sent two beats after the cancel: the rank is gone, its GPUs are free.
    assert api.beat("gpu-01", node, [], seen_server_s=cancelled_at + settle + 0.5) == []
    assert api.srv.loop.run_cycle().placed == 1
    assert api.client.get(f"/v1/jobs/{new}", headers=alice).json()["state"] == "placed"
    assert launch["job_id"] == old


def test_an_older_agent_s_beat_counts_by_its_arrival_two_beats_after_the_stop(api: Api) -> None:
    """An agent that does not say which reply it carried out: a beat that does not list the stopped rank frees
    its GPUs only when it arrives two beats after the stop."""
    alice = api.tenant("alice")
    node = api.register("gpu-01", gpus=2)
    body = {**JOB, "gpus_per_task": 2}
    old = api.client.post("/v1/jobs", json=body, headers=alice).json()["job"]["id"]
    api.srv.loop.run_cycle()
    api.beat("gpu-01", node)
    api.client.post("/v1/jobs", json=body, headers=alice)
    api.client.post(f"/v1/jobs/{old}/cancel", headers=alice)
    settle = 2 * api.srv.settings.heartbeat_interval_s
    api.clock.t += settle - 1
    api.beat("gpu-01", node, [])
    assert api.srv.loop.run_cycle().placed == 0
    api.clock.t += 2
    api.beat("gpu-01", node, [])
    assert api.srv.loop.run_cycle().placed == 1
