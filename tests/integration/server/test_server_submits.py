"""Group commit of submissions: one transaction answers each submission on its own, keys checked in the batch."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from server_api_helpers import Api

from gpupool.domain.errors import ConflictError, InputError, UnknownNameError
from gpupool.domain.jobs import JobSpec
from gpupool.domain.states import JobState
from gpupool.server.loop import coalescing_gap
from gpupool.server.submits import SubmitWriter
from gpupool.store.records import WaitWrites
from gpupool.store.server_ops import Submission


def sub(job_id: str, tenant: str = "alice", key: str | None = None, argv: tuple[str, ...] = ("true",)) -> Submission:
    return Submission(JobSpec(job_id=job_id, tenant=tenant), argv, {}, key, "test")


def test_one_batch_answers_each_submission_on_its_own(api: Api) -> None:
    api.tenant("alice")
    out = api.srv.ops.submit_many(
        [sub("j1", key="k"), sub("j2", key="k"), sub("j3", tenant="nobody"), sub("j4"), sub("j5", argv=())]
    )
    first, repeat, unknown, plain, empty = out
    assert not isinstance(first, Exception) and first[1] is True and first[0].job_id == "j1"
    assert not isinstance(repeat, Exception) and repeat == (first[0], False)  # the key's first job, not created
    assert isinstance(unknown, UnknownNameError)
    assert not isinstance(plain, Exception) and plain[1] is True
    assert isinstance(empty, InputError)
    stored = {j["id"] for j in api.client.get("/v1/jobs", headers=api.admin()).json()["jobs"]}
    assert stored == {"j1", "j4"}
    # A later batch with a stored key gets the stored job.
    (again,) = api.srv.ops.submit_many([sub("j6", key="k")])
    assert not isinstance(again, Exception) and again[0].job_id == "j1" and again[1] is False


@pytest.mark.parametrize("writers", [1, 2])
def test_concurrent_submits_through_the_writer_are_each_stored_once(api: Api, writers: int) -> None:
    api.tenant("alice")
    writer = SubmitWriter(api.srv.ops, writers=writers)  # two: batches with the same keys may commit at once
    try:
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda i: writer.submit(sub(f"c{i}", key=f"k{i % 40}")), range(120)))
    finally:
        writer.close()
    created = [r for r, made in answers if made]
    assert len(created) == 40 and len({r.job_id for r in created}) == 40
    by_key = {r.idempotency_key: r.job_id for r in created}
    assert all(by_key[r.idempotency_key] == r.job_id for r, _ in answers)  # every repeat got its key's job
    assert 1 <= writer.batches <= 120
    jobs = api.client.get("/v1/jobs", params={"limit": 1000}, headers=api.admin()).json()["jobs"]
    assert len(jobs) == 40


def test_the_fast_path_answers_like_the_route(api: Api) -> None:
    alice = api.tenant("alice")
    body = b'{"command": ["true"], "gpus_per_task": 2}'
    fast = api.client.post("/v1/jobs", content=body, headers={**alice, "Content-Type": "application/json"})
    # Another content type is not JSON to FastAPI either: the route answers, in its own 422 shape.
    routed = api.client.post("/v1/jobs", content=body, headers={**alice, "Content-Type": "text/plain"})
    assert fast.status_code == 201 and fast.json()["created"] is True
    assert fast.json()["job"]["gpus_per_task"] == 2 and fast.json()["job"]["tenant"] == "alice"
    assert routed.status_code == 422 and routed.json()["detail"][0]["loc"][0] == "body"
    charset = {**alice, "Content-Type": "application/json; charset=utf-8"}
    assert api.client.post("/v1/jobs", content=body, headers=charset).status_code == 201


def test_the_fast_path_refuses_what_the_route_refuses(api: Api) -> None:
    alice = api.tenant("alice")
    json_headers = {**alice, "Content-Type": "application/json"}
    no_token = api.client.post("/v1/jobs", json={"command": ["true"]})
    assert no_token.status_code == 401 and no_token.json()["code"] == "UNAUTHENTICATED"
    not_utf8 = api.client.post("/v1/jobs", content=b"\x80", headers=json_headers)
    assert not_utf8.status_code == 422 and not_utf8.json()["detail"][0]["type"] == "json_invalid"
    long_key = api.client.post("/v1/jobs", json={"command": ["true"]}, headers={**alice, "Idempotency-Key": "k" * 257})
    assert long_key.status_code == 422 and long_key.json()["detail"][0]["loc"][0] == "header"
    bad = api.client.post("/v1/jobs", json={"command": ["true"], "tasks": 0}, headers=alice)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "tasks"]
    assert api.client.get("/v1/jobs", headers=api.admin()).json()["jobs"] == []


def test_jobs_the_writer_stored_are_placed_from_its_hint_and_a_cancelled_one_is_not(api: Api) -> None:
    alice = api.tenant("alice")
    api.register("gpu-01")
    api.srv.loop.run_cycle()
    kept = api.client.post("/v1/jobs", json={"command": ["true"], "gpus_per_task": 2}, headers=alice).json()
    gone = api.client.post("/v1/jobs", json={"command": ["true"], "gpus_per_task": 2}, headers=alice).json()
    assert api.client.post(f"/v1/jobs/{gone['job']['id']}/cancel", headers=alice).status_code == 200
    assert api.srv.loop.run_cycle().placed == 1  # the cancelled job's hint does not bring it back
    assert api.client.get(f"/v1/jobs/{kept['job']['id']}", headers=alice).json()["state"] == "placed"
    assert api.client.get(f"/v1/jobs/{gone['job']['id']}", headers=alice).json()["state"] == "cancelled"


def test_cycles_woken_without_pause_take_at_most_their_share_of_a_core() -> None:
    assert coalescing_gap(0.001, 0.05, 0.25) == 0.05  # a cheap cycle: the minimum gap
    assert coalescing_gap(0.2, 0.05, 0.25) == pytest.approx(0.6)  # 0.2 s busy of every 0.8 s
    assert coalescing_gap(0.2, 0.05, 1.0) == 0.05
    assert coalescing_gap(0.2, 0.0, 0.0) == pytest.approx(19.8)  # clamped to 1%


def test_a_batch_the_database_refuses_is_answered_one_submission_at_a_time(api: Api) -> None:
    api.tenant("alice")
    (first,) = api.srv.ops.submit_many([sub("j1")])
    assert not isinstance(first, Exception)
    # j1's id is taken: the batch's insert fails as a whole, and each submission is then tried on its own.
    taken, fresh, keyed = api.srv.ops.submit_many([sub("j1"), sub("j2"), sub("j3", key="k")])
    assert isinstance(taken, ConflictError)
    assert not isinstance(fresh, Exception) and fresh[1] is True
    assert not isinstance(keyed, Exception) and keyed[1] is True and keyed[0].idempotency_key == "k"
    stored = {j["id"] for j in api.client.get("/v1/jobs", headers=api.admin()).json()["jobs"]}
    assert stored == {"j1", "j2", "j3"}
    events = api.client.get("/v1/jobs/j1/events", headers=api.admin()).json()["events"]
    assert [e["action"] for e in events] == ["job.submitted"]  # the refused copy left no audit event


def test_waiting_reasons_are_written_per_job_in_few_statements(api: Api) -> None:
    api.tenant("alice")
    api.srv.ops.submit_many([sub(f"w{i:04d}") for i in range(1200)])
    reasons = {f"w{i:04d}": ("no_capacity", f"needs {1 + i % 2} GPUs") for i in range(1200)}
    api.srv.ops.write_reasons(
        WaitWrites(own={r: [j for j, x in reasons.items() if x == r] for r in set(reasons.values())})
    )
    for job_id in ("w0000", "w0001", "w0600", "w1199"):
        rec = api.srv.store.get_job(job_id)
        assert (rec.reason_code, rec.reason) == reasons[job_id]
    # Only a pending job's reason is written: one that left the queue meanwhile keeps its own.
    rec = api.srv.store.get_job("w0002")
    api.srv.store.transition_job("w0002", rec.version, JobState.CANCELLED, "cancelled", "test")
    api.srv.ops.write_reasons(WaitWrites(own={("other", "changed"): ["w0002", "w0003"]}))
    assert api.srv.store.get_job("w0002").reason_code != "other"
    assert api.srv.store.get_job("w0003").reason_code == "other"


def test_a_shared_waiting_reason_is_each_pending_job_s_reason_in_the_api(api: Api) -> None:
    """Jobs pointing at a wait class read its reason (GET /v1/jobs/{id}, the jobs list); rewriting the class
    changes all of them at once; a job's own reason, or leaving the queue, takes it off the class."""
    api.tenant("alice")
    api.srv.ops.submit_many([sub(f"c{i}") for i in range(4)])
    ops, ids = api.srv.ops, ["c0", "c1", "c2", "c3"]
    ops.write_reasons(WaitWrites(classes={"k1": ("no_capacity", "full")}, joined={"k1": ids}))

    def reasons() -> dict[str, tuple[str, str]]:
        listed = api.client.get("/v1/jobs", headers=api.admin()).json()["jobs"]
        return {j["id"]: (j["reason_code"], j["reason"]) for j in listed}

    assert reasons() == dict.fromkeys(ids, ("no_capacity", "full"))
    ops.write_reasons(WaitWrites(classes={"k1": ("reserved", "fits now, but")}, own={("topology", "own"): ["c3"]}))
    got = api.client.get("/v1/jobs/c0", headers=api.admin()).json()
    assert (got["reason_code"], got["reason"]) == ("reserved", "fits now, but")
    assert reasons() == {**dict.fromkeys(ids[:3], ("reserved", "fits now, but")), "c3": ("topology", "own")}
    rec = api.srv.store.get_job("c1")
    api.srv.store.transition_job("c1", rec.version, JobState.CANCELLED, "cancelled", "test")
    ops.write_reasons(WaitWrites(dropped=["k1"]))
    assert api.srv.store.get_job("c1").reason == "cancelled"
    assert api.srv.store.get_job("c0").reason_code == ""  # its class is gone: its own (none)
    # A new loop's first write prunes the classes stored before (another leader's) and points its jobs anew.
    ops.write_reasons(WaitWrites(classes={"k1": ("no_capacity", "old")}, joined={"k1": ["c0"]}))
    ops.write_reasons(WaitWrites(classes={"k2": ("no_capacity", "new")}, joined={"k2": ["c2"]}, prune=True))
    assert api.srv.store.get_job("c0").reason_code == ""
    assert api.srv.store.get_job("c2").reason == "new"
