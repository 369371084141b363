"""The operator's view of jobs through the API (issue 17), on SQLite and PostgreSQL: ``GET /v1/jobs`` filters,
searches, sorts and pages on the server with a total, a tenant sees only its own whatever it asks, bad
parameters are 422s naming them; ``GET /v1/jobs/{id}`` carries the ranks, the run's times and the exit code;
``GET /v1/queue`` is the configured policy's order; a job that can never run is refused at submit."""

from __future__ import annotations

from typing import Any

import pytest
from server_api_helpers import Api, make_api

from databases import Clock
from gpupool.scheduler.settings import SchedulerSettings

JOB = {"command": ["sleep", "600"], "tasks": 1, "gpus_per_task": 2}


def status(cmd: dict[str, Any], state: str, code: int | None = None) -> dict[str, Any]:
    return {
        "assignment_id": cmd["assignment_id"],
        "job_id": cmd["job_id"],
        "state": state,
        "exit_code": code,
        "at_s": 0,
    }


def submit(api: Api, who: dict[str, str], **body: Any) -> str:
    r = api.client.post("/v1/jobs", json={**JOB, **body}, headers=who)
    assert r.status_code == 201, r.text
    return str(r.json()["job"]["id"])


def listed(api: Api, who: dict[str, str], **params: Any) -> list[str]:
    r = api.client.get("/v1/jobs", params=params, headers=who)
    assert r.status_code == 200, r.text
    return [j["id"] for j in r.json()["jobs"]]


def test_the_list_filters_searches_sorts_and_pages_on_the_server(api: Api) -> None:
    alice, bob = api.tenant("alice"), api.tenant("bob")
    node = api.register("gpu-01", gpus=8)
    ids = []
    for i, name in enumerate(["train-a", "Train-B", "eval", "serve"]):
        api.clock.t += 10
        ids.append(submit(api, alice if i < 3 else bob, name=name, gpus_per_task=i + 1))
    a, b, c, d = ids
    api.srv.loop.run_cycle()  # a (1 GPU), b (2), c (3) fit on 8 GPUs; d (4) waits
    launches = {cmd["job_id"]: cmd for cmd in api.beat("gpu-01", node)}
    api.beat(
        "gpu-01", node, [status(launches[a], "running"), status(launches[b], "running"), status(launches[c], "running")]
    )
    api.clock.t += 30
    api.beat(
        "gpu-01",
        node,
        [status(launches[a], "exited", 3), status(launches[b], "running"), status(launches[c], "running")],
    )
    api.srv.loop.run_cycle()
    admin = api.admin()

    page = api.client.get("/v1/jobs", params={"limit": 2}, headers=admin).json()
    assert page["total"] == 4 and page["offset"] == 0
    # Active first, newest first; a (failed) last.
    assert listed(api, admin) == [d, c, b, a]
    assert listed(api, admin, limit=2, offset=2) == [b, a]
    assert listed(api, admin, state=["failed", "pending"]) == [d, a]
    assert listed(api, admin, active="false") == [a]
    assert listed(api, admin, q="train") == [b, a]
    assert listed(api, admin, q="j-") == [d, c, b, a]  # the start of every id
    assert listed(api, admin, q=d) == [d]
    assert listed(api, admin, sort="gpus") == [d, c, b, a]
    assert listed(api, admin, sort="name", order="asc") == [c, d, a, b]  # eval, serve, train-a, Train-B
    assert listed(api, admin, tenant="bob") == [d]
    t = api.clock.t
    assert listed(api, admin, submitted_after=t - 45, submitted_before=t - 35) == [c]  # c came 40 s ago

    # A tenant sees its own, whatever it asks for.
    assert listed(api, alice, tenant="bob") == [c, b, a]
    assert listed(api, bob) == [d]

    jobs = {j["id"]: j for j in api.client.get("/v1/jobs", headers=admin).json()["jobs"]}
    assert jobs[a]["state"] == "failed" and jobs[a]["exit_code"] == 3 and jobs[a]["runtime_s"] == pytest.approx(30)
    assert jobs[b]["state"] == "running" and jobs[b]["ended_s"] is None and jobs[b]["gpus"] == 2.0
    assert jobs[d]["queue_position"] == 1 and jobs[b]["queue_position"] is None


def test_job_detail_has_its_ranks_and_human_facts(api: Api) -> None:
    alice = api.tenant("alice")
    nodes = {h: api.register(h, gpus=8) for h in ("gpu-01", "gpu-02")}
    job = submit(api, alice, tasks=2, gpus_per_task=8, name="gang")
    api.srv.loop.run_cycle()
    cmds = {h: [c for c in api.beat(h, n) if c["job_id"] == job] for h, n in nodes.items()}
    api.beat("gpu-01", nodes["gpu-01"], [status(cmds["gpu-01"][0], "running")])
    got = api.client.get(f"/v1/jobs/{job}", headers=alice).json()
    assert got["state"] == "placed"
    ranks = {r["rank"]: r for r in got["ranks"]}
    assert {r["host"] for r in ranks.values()} == {"gpu-01", "gpu-02"}
    assert all(len(r["gpus"]) == 8 for r in ranks.values())
    started = next(r for r in ranks.values() if r["host"] == "gpu-01")
    assert started["state"] == "started" and started["started_s"] == api.clock.t
    assert next(r for r in ranks.values() if r["host"] == "gpu-02")["state"] == "placed"
    # Once over, its rows are gone; the ranks still say where it ran.
    api.beat("gpu-02", nodes["gpu-02"], [status(cmds["gpu-02"][0], "running")])
    api.beat("gpu-01", nodes["gpu-01"], [status(cmds["gpu-01"][0], "exited", 0)])
    api.beat("gpu-02", nodes["gpu-02"], [status(cmds["gpu-02"][0], "exited", 0)])
    for h, n in nodes.items():
        api.beat(h, n)  # the processes gone: the releasing ranks are freed
    done = api.client.get(f"/v1/jobs/{job}", headers=alice).json()
    assert done["state"] == "finished" and done["exit_code"] == 0
    assert sorted((r["host"], r["state"]) for r in done["ranks"]) == [("gpu-01", "ended"), ("gpu-02", "ended")]


def test_the_queue_is_the_configured_policys_order(db_url: str, tmp_path: Any) -> None:
    """With ``sjf`` the queue shows the shortest job first, though another has a higher priority and came first."""
    clock = Clock()
    gen = make_api(db_url, tmp_path, clock, scheduler=SchedulerSettings(policy="sjf"))
    api = next(gen)
    try:
        alice = api.tenant("alice")
        api.register("gpu-01", gpus=8)
        holds = submit(api, alice, gpus_per_task=8, estimated_runtime_s=5)
        clock.t += 1
        long_high = submit(api, alice, gpus_per_task=8, estimated_runtime_s=1000, priority="high")
        clock.t += 1
        short = submit(api, alice, gpus_per_task=8, estimated_runtime_s=10)
        before = api.client.get("/v1/queue", headers=alice).json()
        assert before["as_of_s"] is None and before["policy"] == "sjf"  # no cycle yet: submit order, no positions
        assert [j["id"] for j in before["jobs"]] == [holds, long_high, short]
        api.srv.loop.run_cycle()
        q = api.client.get("/v1/queue", headers=alice).json()
        assert q["as_of_s"] == clock.t and q["total"] == 2
        assert [(j["id"], j["queue_position"]) for j in q["jobs"]] == [(short, 1), (long_high, 2)]
        assert api.client.get(f"/v1/jobs/{short}", headers=alice).json()["queue_position"] == 1
        assert (
            api.client.get("/v1/queue", params={"limit": 1, "offset": 1}, headers=alice).json()["jobs"][0]["id"]
            == long_high
        )
        assert api.client.get("/v1/queue", headers=api.tenant("bob")).json()["jobs"] == []
    finally:
        gen.close()


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"offset": -1}, "offset"),
        ({"sort": "size"}, "sort"),
        ({"order": "up"}, "order"),
        ({"state": "done"}, "state"),
        ({"active": "maybe"}, "active"),
        ({"submitted_after": "yesterday"}, "submitted_after"),
        ({"submitted_after": 10, "submitted_before": 5}, "submitted_after"),
        ({"q": ""}, "q"),
    ],
)
def test_a_bad_parameter_is_a_422_naming_it(api: Api, params: dict[str, Any], name: str) -> None:
    r = api.client.get("/v1/jobs", params=params, headers=api.admin())
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][:2] == ["query", name]  # a repeated one adds its index


def test_a_job_that_can_never_run_is_refused_at_submit_and_nothing_is_stored(api: Api) -> None:
    alice = api.tenant("alice")
    # No node yet: nothing is knowable, the job is taken.
    assert api.client.post("/v1/jobs", json={**JOB, "tasks": 99}, headers=alice).status_code == 201
    for h in ("gpu-01", "gpu-02"):
        api.register(h, gpus=8)

    def refused(body: dict[str, Any], code: str, words: str) -> None:
        before = api.client.get("/v1/jobs", headers=api.admin()).json()["total"]
        r = api.client.post("/v1/jobs", json={**JOB, **body}, headers=alice)
        assert r.status_code == 422 and r.json()["code"] == code, r.text
        assert words in r.json()["message"]
        assert api.client.get("/v1/jobs", headers=api.admin()).json()["total"] == before

    refused({"tasks": 3, "gpus_per_task": 8}, "UNSCHEDULABLE", "the 2 registered node(s) have 16 GPUs")
    refused({"gpus_per_task": 16}, "UNSCHEDULABLE", "the largest registered node has 8")
    refused({"gpu_models": ["NVIDIA B200"]}, "NO_MATCHING_NODES", "GPU models on nodes: NVIDIA H100 80GB HBM3")
    # Elastic: it may start on its fewest tasks.
    ok = {"tasks": 4, "gpus_per_task": 8, "min_tasks": 2, "scaling": "linear"}
    assert api.client.post("/v1/jobs", json={**JOB, **ok}, headers=alice).status_code == 201
    # Pools: any name while none is in use; once one is, only defined ones.
    assert api.client.post("/v1/jobs", json={**JOB, "pool": "anything"}, headers=alice).status_code == 201
    calendar = 'timezone = "UTC"\ndefault_pool = "training"\n'
    assert (
        api.client.put("/v1/pools/training", json={"calendar_toml": calendar}, headers=api.admin()).status_code == 200
    )
    refused({"pool": "anything"}, "UNKNOWN_POOL", "the defined pools: training")
    assert api.client.post("/v1/jobs", json={**JOB, "pool": "training"}, headers=alice).status_code == 201


def test_a_cancelled_job_is_active_while_its_ranks_release_their_gpus(api: Api) -> None:
    """Active means holding or wanting GPUs: a job cancelled while running stays in the active list (its rank
    ``releasing``) until its agent confirms the process gone, then leaves it."""
    alice = api.tenant("alice")
    node = api.register("gpu-01", gpus=8)
    job = submit(api, alice)
    api.srv.loop.run_cycle()
    (launch,) = api.beat("gpu-01", node)
    api.beat("gpu-01", node, [status(launch, "running")])
    assert api.client.post(f"/v1/jobs/{job}/cancel", headers=alice).json()["state"] == "cancelled"
    assert listed(api, alice, active="true") == [job] and listed(api, alice, active="false") == []
    (rank,) = api.client.get(f"/v1/jobs/{job}", headers=alice).json()["ranks"]
    assert rank["state"] == "releasing" and rank["releasing_s"] == api.clock.t
    api.beat("gpu-01", node, [status(launch, "exited", -15)])  # stopped: its agent says the process is gone
    assert listed(api, alice, active="true") == [] and listed(api, alice, active="false") == [job]
