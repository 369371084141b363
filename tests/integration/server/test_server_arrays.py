"""Arrays and dependencies through the real app (SQLite and PostgreSQL, the loop driven by hand): an array is
stored all or none and queried, capped and cancelled as one; dependencies name stored jobs only (arrays
expand to their elements), wait, run and end as Slurm's do, also across a server restart; bad input is a
422 naming the field, with nothing stored."""

from __future__ import annotations

from pathlib import Path

from server_api_helpers import Api, Clock, make_api

JOB = {"command": ["python", "-c", "print('hi')"], "tasks": 1, "gpus_per_task": 1}


def status(cmd: dict, state: str, code: int | None = None) -> dict:
    return {
        "assignment_id": cmd["assignment_id"],
        "job_id": cmd["job_id"],
        "state": state,
        "exit_code": code,
        "at_s": 0,
    }


def stored_jobs(api: Api) -> list[dict]:
    return list(api.client.get("/v1/jobs", headers=api.admin()).json()["jobs"])


def test_an_array_is_one_submission_capped_queried_and_cancelled_as_one(api: Api) -> None:
    alice = api.tenant("alice")
    node = api.register("gpu-01")
    r = api.client.post("/v1/jobs", json={**JOB, "array": "0-19%4"}, headers=alice)
    assert r.status_code == 201, r.text
    out = r.json()
    array_id = out["array_id"]
    assert out["jobs"] == 20 and out["job"]["id"] == f"{array_id}.0" and out["job"]["array_index"] == 0
    params = {"array": array_id, "sort": "submitted", "order": "asc"}  # index order: elements are submitted so
    elements = api.client.get("/v1/jobs", params=params, headers=alice).json()["jobs"]
    assert [j["array_index"] for j in elements] == list(range(20))
    assert api.srv.loop.run_cycle().placed == 4  # 8 free GPUs, a cap of 4
    launches = api.beat("gpu-01", node)
    assert sorted(int(c["env"]["GPUPOOL_ARRAY_INDEX"]) for c in launches) == [0, 1, 2, 3]
    assert {c["env"]["GPUPOOL_ARRAY_ID"] for c in launches} == {array_id}
    why = api.client.get(f"/v1/jobs/{array_id}.4/why", headers=alice).json()
    assert why["reason_code"] == "array_limit"
    # One element ends: exactly one more is placed.
    api.beat("gpu-01", node, [status(c, "running") for c in launches])
    api.beat("gpu-01", node, [status(launches[0], "exited", 0), *(status(c, "running") for c in launches[1:])])
    assert api.srv.loop.run_cycle().placed == 1
    summary = api.client.get(f"/v1/arrays/{array_id}", headers=alice).json()
    assert summary["size"] == 20 and summary["cap"] == 4
    assert summary["states"] == {"finished": 1, "running": 3, "placed": 1, "pending": 15}
    # Another tenant sees no array.
    assert api.client.get(f"/v1/arrays/{array_id}", headers=api.tenant("bob")).status_code == 404
    cancelled = api.client.post(f"/v1/arrays/{array_id}/cancel", headers=alice).json()
    assert cancelled["states"] == {"finished": 1, "cancelled": 19}


def test_an_array_over_the_maximum_is_refused_and_nothing_is_stored(tmp_path: Path, db_url: str) -> None:
    for api in make_api(db_url, tmp_path, Clock(), max_array_size=10):
        alice = api.tenant("alice")
        r = api.client.post("/v1/jobs", json={**JOB, "array": "0-10"}, headers=alice)
        assert r.status_code == 422
        (d,) = r.json()["detail"]
        assert d["loc"] == ["body", "array"] and "more than the 10 elements" in d["msg"]
        r = api.client.post("/v1/jobs", json={**JOB, "array": "5-1"}, headers=alice)
        assert r.status_code == 422 and "is empty" in r.text
        assert stored_jobs(api) == []
        assert api.client.post("/v1/jobs", json={**JOB, "array": "0-9"}, headers=alice).status_code == 201


def test_dependencies_name_stored_jobs_of_the_tenant_and_arrays_expand(api: Api) -> None:
    alice, bob = api.tenant("alice"), api.tenant("bob")
    first = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
    array = api.client.post("/v1/jobs", json={**JOB, "array": "0-2"}, headers=alice).json()["array_id"]
    theirs = api.client.post("/v1/jobs", json=JOB, headers=bob).json()["job"]["id"]
    before = len(stored_jobs(api))
    for name in ("j-nope", theirs):
        r = api.client.post("/v1/jobs", json={**JOB, "after": [{"kind": "afterok", "jobs": [name]}]}, headers=alice)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "after"]
        assert f"job {name!r} is not stored" in r.text
    assert len(stored_jobs(api)) == before
    body = {**JOB, "after": [{"kind": "afterok", "jobs": [first, array]}, {"kind": "afterany", "jobs": [f"{array}_1"]}]}
    r = api.client.post("/v1/jobs", json=body, headers=alice)
    assert r.status_code == 201, r.text
    spec = api.srv.store.get_job(r.json()["job"]["id"]).spec
    assert [d.job_ids for d in spec.after] == [(first, f"{array}.0", f"{array}.1", f"{array}.2"), (f"{array}.1",)]


def test_a_dependency_waits_runs_after_its_job_and_a_broken_one_cancels_with_a_reason(api: Api) -> None:
    alice = api.tenant("alice")
    node = api.register("gpu-01")
    a = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
    ok = api.client.post("/v1/jobs", json={**JOB, "after": [{"kind": "afterok", "jobs": [a]}]}, headers=alice)
    notok = api.client.post("/v1/jobs", json={**JOB, "after": [{"kind": "afternotok", "jobs": [a]}]}, headers=alice)
    ok_id, notok_id = ok.json()["job"]["id"], notok.json()["job"]["id"]
    assert api.srv.loop.run_cycle().placed == 1
    assert api.client.get(f"/v1/jobs/{ok_id}/why", headers=alice).json()["reason_code"] == "dependency"
    (launch,) = api.beat("gpu-01", node)
    api.beat("gpu-01", node, [status(launch, "running")])
    api.beat("gpu-01", node, [status(launch, "exited", 0)])
    assert api.srv.loop.run_cycle().placed == 1
    assert api.client.get(f"/v1/jobs/{ok_id}", headers=alice).json()["state"] == "placed"
    broken = api.client.get(f"/v1/jobs/{notok_id}", headers=alice).json()
    assert broken["state"] == "cancelled" and broken["reason_code"] == "dependency_never_satisfied"
    assert broken["reason"] == f"dependency never satisfied: afternotok: job {a} ended finished"


def test_a_dependency_on_a_job_that_ended_before_the_server_started_is_judged_from_the_store(
    tmp_path: Path, db_url: str
) -> None:
    """Invariant: a dependency's verdict comes from what is stored, not from one process's memory: a job
    that ended before this server started is read back when a pending job names it."""
    for api in make_api(db_url, tmp_path, Clock()):
        alice = api.tenant("alice")
        a = api.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
        assert api.client.post(f"/v1/jobs/{a}/cancel", headers=alice).json()["state"] == "cancelled"
    for api in make_api(db_url, tmp_path, Clock()):  # a new server on the same database
        alice = api.tenant("alice")
        api.register("gpu-01")
        any_id = api.client.post("/v1/jobs", json={**JOB, "after": [{"kind": "afterany", "jobs": [a]}]}, headers=alice)
        ok_id = api.client.post("/v1/jobs", json={**JOB, "after": [{"kind": "afterok", "jobs": [a]}]}, headers=alice)
        assert api.srv.loop.run_cycle().placed == 1
        assert api.client.get(f"/v1/jobs/{any_id.json()['job']['id']}", headers=alice).json()["state"] == "placed"
        ended = api.client.get(f"/v1/jobs/{ok_id.json()['job']['id']}", headers=alice).json()
        assert ended["state"] == "cancelled" and f"job {a} ended cancelled" in ended["reason"]


def test_an_array_past_the_tenants_pending_cap_is_refused_whole(tmp_path: Path, db_url: str) -> None:
    """Invariant: an array is stored all or none: one that would pass the tenant's cap stores no element."""
    for api in make_api(db_url, tmp_path, Clock(), max_pending_per_tenant=5):
        alice = api.tenant("alice")
        r = api.client.post("/v1/jobs", json={**JOB, "array": "0-5"}, headers=alice)
        assert r.status_code == 429 and r.json()["code"] == "TENANT_PENDING_LIMIT"
        assert stored_jobs(api) == []
        assert api.client.post("/v1/jobs", json={**JOB, "array": "0-4"}, headers=alice).status_code == 201
        assert len(stored_jobs(api)) == 5


def test_the_loop_folds_in_every_element_of_an_array_from_the_submit_hint_without_reading_specs(api: Api) -> None:
    """The group commit hands the loop what it stored: every element of an array (not only the first), so the
    sync places them all without reading any spec back (it read every element's spec but the first)."""
    alice = api.tenant("alice")
    api.register("gpu-01")
    assert api.srv.loop.run_cycle().rebuilt  # the state is built: the next cycle syncs
    read: list[str] = []
    specs = api.srv.ops.specs

    def counted(job_ids: list[str]) -> object:
        read.extend(job_ids)
        return specs(job_ids)

    api.srv.ops.specs = counted  # type: ignore[method-assign]
    assert api.client.post("/v1/jobs", json={**JOB, "array": "0-5"}, headers=alice).status_code == 201
    report = api.srv.loop.run_cycle()
    assert not report.rebuilt and report.placed == 6
    assert read == []
