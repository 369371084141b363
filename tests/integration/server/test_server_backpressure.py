"""The submit path's door and backpressure, on SQLite and PostgreSQL through the real app:

- text the database cannot store is refused before the group commit (422 naming the field), and a batch that
  still meets such a value fails only that submission, never another tenant's;
- a tenant at its cap of pending jobs gets 429 TENANT_PENDING_LIMIT with Retry-After; others are unaffected;
- a full submit queue answers 503 SUBMIT_QUEUE_FULL at once instead of queueing without bound.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from server_api_helpers import Api, Clock, make_api
from sqlalchemy.engine import make_url

from gpupool.domain.errors import SubmitQueueFullError, UnstorableInputError
from gpupool.domain.jobs import JobSpec
from gpupool.server.submits import SubmitWriter
from gpupool.store import JobRecord
from gpupool.store.server_ops import Submission


def stored_ids(api: Api) -> set[str]:
    jobs = api.client.get("/v1/jobs", params={"limit": 1000}, headers=api.admin()).json()["jobs"]
    return {j["id"] for j in jobs}


def test_unstorable_text_is_refused_at_the_door_while_another_tenant_submits(api: Api) -> None:
    alice, bob = api.tenant("alice"), api.tenant("bob")
    bad_bodies = [
        ({"command": ["true"], "name": "a\x00b"}, ["body", "name"]),
        ({"command": ["tr\x00ue"]}, ["body", "command", 0]),
        ({"command": ["true"], "env": {"K": "\x00"}}, ["body", "env", "K"]),
    ]

    def good(i: int) -> int:
        return api.client.post("/v1/jobs", json={"command": ["true"], "name": f"good-{i}"}, headers=bob).status_code

    with ThreadPoolExecutor(8) as pool:
        goods = [pool.submit(good, i) for i in range(90)]
        for body, loc in bad_bodies * 3:
            r = api.client.post("/v1/jobs", json=body, headers=alice)
            assert r.status_code == 422, r.text
            assert r.json()["detail"][0]["loc"] == loc and "NUL" in r.json()["detail"][0]["msg"]
        assert [f.result() for f in goods] == [201] * 90
    jobs = api.client.get("/v1/jobs", params={"limit": 1000}, headers=api.admin()).json()["jobs"]
    assert len(jobs) == 90 and {j["tenant"] for j in jobs} == {"bob"}


def test_an_unstorable_submission_that_reaches_the_writer_fails_alone(api: Api) -> None:
    api.tenant("alice")
    api.tenant("bob")
    bad_name = "lone \ud800 surrogate"  # not UTF-8: neither database stores it (the door refuses it too)
    writer = SubmitWriter(api.srv.ops, writers=2 if api.srv.store.concurrent_writes else 1)
    try:
        futures: list[tuple[str, Future[tuple[JobRecord, bool]]]] = []
        for round_ in range(3):
            for i in range(30):
                spec = JobSpec(f"b{round_}-{i}", tenant="bob")
                futures.append((spec.job_id, writer.enqueue(Submission(spec, ("true",), {}, None, "t"))))
            spec = JobSpec(f"a{round_}", tenant="alice", name=bad_name)
            futures.append((spec.job_id, writer.enqueue(Submission(spec, ("true",), {}, None, "t"))))
        for job_id, fut in futures:
            if job_id.startswith("a"):
                assert isinstance(fut.exception(timeout=30), UnstorableInputError)
            else:
                assert fut.result(timeout=30)[1] is True
    finally:
        writer.close()
    assert stored_ids(api) == {f"b{r}-{i}" for r in range(3) for i in range(30)}


@pytest.fixture
def capped(db_url: str, tmp_path: Path, clock: Clock) -> Iterator[Api]:
    yield from make_api(db_url, tmp_path, clock, max_pending_per_tenant=3)


def test_a_tenant_at_its_pending_cap_gets_429_and_others_do_not(capped: Api) -> None:
    api = capped
    alice, bob = api.tenant("alice"), api.tenant("bob")
    made = [
        api.client.post("/v1/jobs", json={"command": ["true"]}, headers={**alice, "Idempotency-Key": f"k{i}"})
        for i in range(3)
    ]
    assert [r.status_code for r in made] == [201] * 3
    over = api.client.post("/v1/jobs", json={"command": ["true"]}, headers=alice)
    assert over.status_code == 429 and over.json()["code"] == "TENANT_PENDING_LIMIT"
    assert int(over.headers["Retry-After"]) >= 1
    # A repeat of a stored key creates nothing: it is answered with its job even at the cap.
    again = api.client.post("/v1/jobs", json={"command": ["true"]}, headers={**alice, "Idempotency-Key": "k0"})
    assert again.status_code == 200 and again.json()["job"]["id"] == made[0].json()["job"]["id"]
    assert api.client.post("/v1/jobs", json={"command": ["true"]}, headers=bob).status_code == 201
    assert len(stored_ids(api)) == 4
    # A job leaving the queue makes room (the count is re-read at most a second later).
    first = made[0].json()["job"]["id"]
    assert api.client.post(f"/v1/jobs/{first}/cancel", headers=alice).status_code == 200
    deadline = time.monotonic() + 10
    while True:
        r = api.client.post("/v1/jobs", json={"command": ["true"]}, headers={**alice, "Idempotency-Key": "k9"})
        if r.status_code == 201:
            break
        assert r.status_code == 429 and time.monotonic() < deadline, r.text
        threading.Event().wait(0.05)  # poll interval, bounded by the deadline above


@contextmanager
def write_lock_held(api: Api, db_url: str) -> Iterator[None]:
    """Another connection holds the lock the group commit needs: SQLite's write lock, or PostgreSQL's jobs table."""
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        conn = sqlite3.connect(str(url.database), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    options = dict(url.query).get("options", "")
    libpq = url.set(drivername="postgresql", query={}).render_as_string(hide_password=False)
    with psycopg.connect(libpq, options=str(options)) as conn:
        conn.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")
        yield
        conn.rollback()


def test_a_full_submit_queue_refuses_at_once_and_the_queued_are_stored_later(api: Api, db_url: str) -> None:
    api.tenant("alice")
    writer = SubmitWriter(api.srv.ops, max_queued=5)
    try:
        with write_lock_held(api, db_url):
            queued = [
                writer.enqueue(Submission(JobSpec(f"q{i}", tenant="alice"), ("true",), {}, None, "t")) for i in range(5)
            ]
            with pytest.raises(SubmitQueueFullError):
                writer.enqueue(Submission(JobSpec("q5", tenant="alice"), ("true",), {}, None, "t"))
            assert not any(f.done() for f in queued)  # still waiting on the lock, not failed
        assert all(f.result(timeout=30)[1] for f in queued)
        # Answered ones leave the queue: there is room again.
        assert writer.submit(Submission(JobSpec("q6", tenant="alice"), ("true",), {}, None, "t"))[1] is True
    finally:
        writer.close()
    assert stored_ids(api) == {f"q{i}" for i in (0, 1, 2, 3, 4, 6)}


def test_the_api_answers_a_full_queue_with_503_and_retry_after(db_url: str, tmp_path: Path, clock: Clock) -> None:
    for api in make_api(db_url, tmp_path, clock, submit_queue_max=0):
        alice = api.tenant("alice")
        r = api.client.post("/v1/jobs", json={"command": ["true"]}, headers=alice)
        assert r.status_code == 503 and r.json()["code"] == "SUBMIT_QUEUE_FULL"
        assert r.headers["Retry-After"] == "1"
        assert stored_ids(api) == set()
