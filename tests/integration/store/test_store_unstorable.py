"""What the database cannot store fails only its own submission: a batch the database refuses is tried again
one submission at a time (on PostgreSQL a NUL in a job name raised DataError and failed every job of its
group commit, other tenants' included)."""

from __future__ import annotations

from gpupool.domain.errors import UnstorableInputError
from gpupool.domain.jobs import JobSpec
from gpupool.store import Store
from gpupool.store.server_ops import ServerOps, Submission


def unstorable_names(store: Store) -> list[str]:
    # A lone surrogate is not UTF-8 on either database; PostgreSQL's text also holds no NUL (SQLite's does).
    return ["lone \ud800 surrogate", *(["nul \x00 inside"] if store.concurrent_writes else [])]


def test_one_unstorable_submission_in_a_batch_fails_alone(store: Store) -> None:
    ops = ServerOps(store)
    bad_names = unstorable_names(store)
    batch: list[Submission] = []
    good: list[str] = []
    for round_ in range(3):
        for i in range(30):
            batch.append(Submission(JobSpec(f"b{round_}-{i}", tenant="beta"), ("true",), {}, f"k{round_}-{i}", "t"))
            good.append(f"b{round_}-{i}")
        name = bad_names[round_ % len(bad_names)]
        batch.append(Submission(JobSpec(f"a{round_}", tenant="acme", name=name), ("true",), {}, None, "t"))
    out = ops.submit_many(batch)
    by_id = {sub.spec.job_id: res for sub, res in zip(batch, out, strict=True)}
    for job_id in good:
        res = by_id[job_id]
        assert not isinstance(res, Exception) and res[1] is True, (job_id, res)
    for round_ in range(3):
        res = by_id[f"a{round_}"]
        assert isinstance(res, UnstorableInputError) and res.code == "UNSTORABLE_INPUT", res
        assert f"a{round_}" in res.message  # names the job it refused
    stored = {j.job_id for j in store.list_jobs(limit=1000)}
    assert stored == set(good)
    # The good ones are whole: command and audit event written with each.
    stored_inputs = ops.launch_inputs(["b2-29"])["b2-29"]  # what its launch reads: the job and its command
    assert not isinstance(stored_inputs, Exception) and stored_inputs.argv == ("true",)
    assert [e.action for e in store.list_audit(subject="job/b0-0")] == ["job.submitted"]
