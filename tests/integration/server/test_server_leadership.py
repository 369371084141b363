"""Two replicas' scheduling loops on one database (SQLite and PostgreSQL), driven by hand: one leads; after a
takeover the old leader, which still believes it leads (its renewal is not due), has its next write refused
by the database, places nothing and becomes a standby, while the new leader places the job."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from server_api_helpers import Clock, make_api

JOB = {"command": ["python", "-c", "print('hi')"], "tasks": 1, "gpus_per_task": 2}


def tokens_by_job(engine: sa.Engine) -> dict[str, int | None]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT job_id, leader_token FROM allocations")).all()
    return {str(j): t for j, t in rows}


def test_a_leader_whose_lease_was_taken_over_has_its_next_write_refused(
    db_url: str, tmp_path: Path, clock: Clock
) -> None:
    # Renewals far apart: the old leader will not find out by renewing; only the fencing check can stop it.
    for a in make_api(db_url, tmp_path, clock, lease_renew_s=500.0):
        for b in make_api(db_url, tmp_path, clock, lease_renew_s=500.0):
            alice = a.tenant("alice")
            a.register("gpu-01")
            assert a.srv.loop.run_cycle().leader and a.srv.loop.is_leader
            assert not b.srv.loop.run_cycle().leader and not b.srv.loop.is_leader
            first = a.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
            assert a.srv.loop.run_cycle().placed == 1
            engine = a.srv.store._engine
            # On the database's clock A's lease is over (A was cut off past its expiry): B takes over.
            with engine.begin() as conn:
                conn.execute(sa.text("UPDATE leadership SET expires_s = 0"))
            assert b.srv.loop.run_cycle().leader
            second = a.client.post("/v1/jobs", json=JOB, headers=alice).json()["job"]["id"]
            assert a.srv.loop.is_leader  # it still believes so: no renewal was due
            report = a.srv.loop.run_cycle()  # it tries to place the new job: the database refuses
            assert not report.leader and report.placed == 0 and not a.srv.loop.is_leader
            assert a.client.get(f"/v1/jobs/{second}", headers=alice).json()["state"] == "pending"
            assert b.srv.loop.run_cycle().placed == 1
            lease = b.srv.store.lease("default")
            assert lease is not None and lease.holder == b.srv.loop._leader.holder
            assert tokens_by_job(engine) == {first: lease.token - 1, second: lease.token}
            assert not a.srv.loop.run_cycle().leader  # and stays a standby while B renews
