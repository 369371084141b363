"""Group commit of submissions: one transaction answers each submission on its own, keys checked in the batch."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from server_api_helpers import Api

from gpupool.domain.errors import InputError, UnknownNameError
from gpupool.domain.jobs import JobSpec
from gpupool.server.submits import SubmitWriter
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


def test_concurrent_submits_through_the_writer_are_each_stored_once(api: Api) -> None:
    api.tenant("alice")
    writer = SubmitWriter(api.srv.ops)
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
