"""Crash safety: a submitter killed with SIGKILL mid-burst loses no acknowledged job and duplicates none; a placer
killed in its write of a cycle's placements stores all of them or none."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from gpupool.domain.errors import StaleVersionError
from gpupool.domain.jobs import Allocation, JobSpec, TaskAllocation
from gpupool.domain.states import JobState
from gpupool.store import Store

ACKS_BEFORE_KILL = 40


def test_kill_minus_nine_mid_burst_keeps_every_acknowledged_job_once(store: Store, db_url: str) -> None:
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("store_submitter.py")), db_url, "c"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    acked: list[str] = []
    try:
        for line in child.stdout:
            acked.append(line.strip())
            if len(acked) >= ACKS_BEFORE_KILL:
                child.send_signal(signal.SIGKILL)  # while it is busy submitting the next ones
                break
        else:
            raise AssertionError(f"the submitter stopped early: {child.stderr.read() if child.stderr else ''}")
        # Lines it printed before the signal landed were acknowledged too. Read them through the same file object:
        # its read-ahead may already hold several, which communicate() would skip by reading the pipe underneath.
        out = child.stdout.read()
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    acked += out.split()
    assert child.returncode == -signal.SIGKILL
    assert len(acked) >= ACKS_BEFORE_KILL

    # A fresh store on the same database, as a restarted server would open it.
    with Store(db_url) as again:
        again.migrate()
        with again._engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT id, idempotency_key FROM jobs WHERE tenant = 'acme'")).all()
        ids = [r[0] for r in rows]
        assert len(ids) == len(set(ids))
        assert len({r[1] for r in rows}) == len(rows)
        assert set(acked) <= set(ids), "an acknowledged job is missing after the kill"
        # At most the one submit in flight at the kill committed without being acknowledged.
        assert len(set(ids) - set(acked)) <= 1
        # A client retrying every acknowledged submit with its key gets the same jobs back, none new.
        for job_id in [*acked, f"c{len(acked)}"]:
            job, created = again.submit_job(JobSpec(job_id, tenant="acme"), f"key-{job_id}", actor="retry")
            assert job.job_id == job_id
            assert created == (job_id not in ids)
        with again._engine.connect() as conn:
            total = conn.execute(sa.text("SELECT count(*) FROM jobs")).scalar_one()
        assert total == len(set(ids) | {f"c{len(acked)}"})


@pytest.mark.parametrize("when", ["before-commit", "after-commit"])
def test_a_placer_killed_in_its_write_stores_the_whole_batch_or_none_of_it(
    store: Store, db_url: str, when: str
) -> None:
    """A whole cycle's placements are one write (``record_allocations``). The process writing it is killed with
    SIGKILL once every statement ran but before the commit: nothing of the batch is stored (every job pending at
    its version, no allocation, usage, attempt or audit), and the next leader places every job, each GPU once.
    Killed just after the commit returned (the acknowledgement): every placement is stored, and placing the
    batch again on the versions it saw is refused whole, so no GPU is given twice."""
    for n in range(4):
        store.upsert_node(f"h{n}", gpu_model="H100", gpu_count=8, actor="agent")
    ids = [f"j{i:02d}" for i in range(30)]
    for j in ids:
        store.submit_job(JobSpec(j, tenant="acme"), None, actor="u")
    child = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("store_placer.py")), db_url, when],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert child.stdout.split() == ([] if when == "before-commit" else ["stored"])
    with Store(db_url) as again:  # as a restarted server opens it
        again.migrate()
        with again._engine.connect() as conn:
            tables = ("allocations", "usage_intervals", "job_attempts")
            counts = {t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one() for t in tables}
        placed_audit = len(again.list_audit(action="job.placed", limit=1000))
        jobs = {j: again.get_job(j) for j in ids}
        if when == "before-commit":
            assert counts == dict.fromkeys(counts, 0) and placed_audit == 0
            assert {(r.state, r.version) for r in jobs.values()} == {(JobState.PENDING, 1)}
            gpus = [(f"h{g // 8}", g % 8) for g in range(30)]
            batch = [(j, 1, Allocation(j, (TaskAllocation(h, (g,)),))) for j, (h, g) in zip(ids, gpus, strict=True)]
            assert all(not isinstance(r, Exception) for r in again.record_allocations(batch, "scheduler"))
        else:
            assert counts == dict.fromkeys(counts, 30) and placed_audit == 30
            assert {(r.state, r.version) for r in jobs.values()} == {(JobState.PLACED, 2)}
            again_batch = [(j, 1, Allocation(j, (TaskAllocation("h3", (7,)),))) for j in ids]
            assert all(isinstance(r, StaleVersionError) for r in again.record_allocations(again_batch, "scheduler"))
        held = [(t.host, g) for a in again.load_state().allocations for t in a.tasks for g in t.gpus]
        assert len(held) == len(set(held)) == 30
        assert {again.get_job(j).state for j in ids} == {JobState.PLACED}
