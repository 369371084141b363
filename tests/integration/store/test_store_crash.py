"""Crash safety: a submitter killed with SIGKILL mid-burst loses no acknowledged job and duplicates none."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

from gpupool.domain.jobs import JobSpec
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
        out, _ = child.communicate()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    acked += out.split()  # lines it printed before the signal landed were acknowledged too
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
