"""Jobs in the store: idempotent submit (also racing threads), guarded updates, the state machine, listing."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from gpupool.domain.errors import (
    ConflictError,
    InputError,
    NotFoundError,
    ParseError,
    StaleVersionError,
    TransitionError,
    UnknownNameError,
)
from gpupool.domain.jobs import JobSpec
from gpupool.domain.states import JobState
from gpupool.store import Store

Spec = Callable[..., JobSpec]


def _count(store: Store, sql: str) -> int:
    with store._engine.connect() as conn:
        return int(conn.execute(sa.text(sql)).scalar_one())


def test_submit_then_get_round_trips_the_spec(store: Store, make_spec: Spec) -> None:
    spec = make_spec("j1", tasks=4, gpus_per_task=8, name="train", submit_time_s=5.0)
    job, created = store.submit_job(spec, "key-1", actor="alice")
    assert created
    assert (job.state, job.version, job.idempotency_key) == (JobState.PENDING, 1, "key-1")
    assert store.get_job("j1") == job
    assert job.spec == spec


def test_same_key_returns_the_first_job_and_writes_nothing(store: Store, make_spec: Spec) -> None:
    first, _ = store.submit_job(make_spec("j1"), "k", actor="alice")
    again, created = store.submit_job(make_spec("j2", name="other"), "k", actor="alice")
    assert not created
    assert again == first
    assert _count(store, "SELECT count(*) FROM jobs") == 1
    assert _count(store, "SELECT count(*) FROM audit_events WHERE action = 'job.submitted'") == 1
    # Keys are per tenant: another tenant's same key is another job.
    _, created_b = store.submit_job(make_spec("j3", tenant="beta"), "k", actor="bob")
    assert created_b


def test_eight_threads_racing_on_one_key_make_one_job(store: Store, make_spec: Spec) -> None:
    barrier = threading.Barrier(8)
    results: list[tuple[str, bool]] = []
    errors: list[BaseException] = []

    def submit(i: int) -> None:
        try:
            barrier.wait()
            job, created = store.submit_job(make_spec(f"race-{i}"), "the-key", actor=f"t{i}")
            results.append((job.job_id, created))
        except BaseException as e:  # collected and asserted below, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 8
    assert sum(created for _, created in results) == 1
    assert len({job_id for job_id, _ in results}) == 1
    assert _count(store, "SELECT count(*) FROM jobs") == 1


def test_a_job_id_taken_under_another_key_is_a_conflict(store: Store, make_spec: Spec) -> None:
    store.submit_job(make_spec("j1"), "k1", actor="a")
    with pytest.raises(ConflictError, match="already exists"):
        store.submit_job(make_spec("j1"), "k2", actor="a")
    with pytest.raises(ConflictError):
        store.submit_job(make_spec("j1"), None, actor="a")


def test_unknown_tenant_is_refused_by_name(store: Store, make_spec: Spec) -> None:
    with pytest.raises(UnknownNameError, match="unknown tenant 'nobody'") as err:
        store.submit_job(make_spec("j1", tenant="nobody"), "k", actor="a")
    assert err.value.code == "UNKNOWN_NAME"
    assert _count(store, "SELECT count(*) FROM jobs") == 0


def test_bad_idempotency_key_is_input_error(store: Store, make_spec: Spec) -> None:
    with pytest.raises(InputError, match="idempotency key"):
        store.submit_job(make_spec("j1"), "", actor="a")
    with pytest.raises(InputError):
        store.submit_job(make_spec("j1"), "x" * 257, actor="a")


def test_guarded_update_with_a_stale_version_changes_nothing(store: Store, make_spec: Spec) -> None:
    job, _ = store.submit_job(make_spec("j1"), None, actor="a")
    audits = len(store.list_audit())
    with pytest.raises(StaleVersionError) as err:
        store.transition_job("j1", job.version + 1, JobState.CANCELLED, "user asked", actor="a")
    assert err.value.code == "STALE_VERSION"
    assert isinstance(err.value, ConflictError)
    assert store.get_job("j1") == job
    assert len(store.list_audit()) == audits
    cancelled = store.transition_job("j1", job.version, JobState.CANCELLED, "user asked", actor="a")
    assert (cancelled.state, cancelled.version) == (JobState.CANCELLED, 2)
    # The old version is stale now: a second writer quoting it fails.
    with pytest.raises(StaleVersionError):
        store.transition_job("j1", job.version, JobState.CANCELLED, "again", actor="b")


def test_illegal_transitions_are_refused_by_the_state_machine(store: Store, make_spec: Spec) -> None:
    job, _ = store.submit_job(make_spec("j1"), None, actor="a")
    with pytest.raises(TransitionError, match="cannot go from pending to finished"):
        store.transition_job("j1", job.version, JobState.FINISHED, "", actor="a")
    with pytest.raises(TransitionError, match="cannot go from pending to running"):
        store.transition_job("j1", job.version, JobState.RUNNING, "", actor="a")
    with pytest.raises(InputError, match="record_allocation"):
        store.transition_job("j1", job.version, JobState.PLACED, "", actor="a")
    assert store.get_job("j1").version == job.version
    with pytest.raises(NotFoundError):
        store.transition_job("nope", 1, JobState.CANCELLED, "", actor="a")


def test_list_jobs_filters_in_submit_order(store: Store, make_spec: Spec) -> None:
    for i in range(7):
        tenant = "acme" if i % 2 == 0 else "beta"
        store.submit_job(make_spec(f"j{i}", tenant=tenant, submit_time_s=float(10 - i), pool="p"), None, actor="a")
    all_ids = [j.job_id for j in store.list_jobs()]
    assert all_ids == [f"j{i}" for i in range(6, -1, -1)]
    assert [j.job_id for j in store.list_jobs(tenant="beta")] == ["j5", "j3", "j1"]
    assert [j.job_id for j in store.list_jobs(limit=3)] == all_ids[:3]
    store.transition_job("j0", 1, JobState.CANCELLED, "", actor="a")
    assert [j.job_id for j in store.list_jobs(state=JobState.CANCELLED)] == ["j0"]
    assert store.list_jobs(pool="other") == []


def test_malformed_spec_in_the_database_is_a_parse_error_naming_the_job(store: Store, make_spec: Spec) -> None:
    store.submit_job(make_spec("j1"), None, actor="a")
    store.submit_job(make_spec("j2"), None, actor="a")
    with store._engine.begin() as conn:
        conn.execute(sa.text('UPDATE jobs SET spec = \'{"job_id": "j1", "tasks": \' WHERE id = \'j1\''))
        conn.execute(sa.text('UPDATE jobs SET spec = \'{"job_id": "j2", "tasks": "many"}\' WHERE id = \'j2\''))
    with pytest.raises(ParseError, match="not valid JSON") as err:
        store.get_job("j1")
    assert err.value.source == "job j1 (spec)"
    with pytest.raises(ParseError, match="'tasks' must be an integer") as err2:
        store.get_job("j2")
    assert err2.value.source == "job j2 (spec)"


def test_every_job_change_writes_one_audit_event_with_who_and_when(
    store: Store, make_spec: Spec, clock: object
) -> None:
    job, _ = store.submit_job(make_spec("j1"), "k", actor="alice")
    store.transition_job("j1", job.version, JobState.CANCELLED, "no longer needed", actor="bob")
    events = store.list_audit(subject="job/j1")
    assert [(e.action, e.actor) for e in events] == [("job.submitted", "alice"), ("job.cancelled", "bob")]
    assert events[1].data == {"from": "pending", "to": "cancelled", "reason": "no longer needed"}
    assert all(e.at_s == 1_000.0 for e in events)


def test_pending_reason_is_stored_for_waiting_jobs_only(store: Store, make_spec: Spec) -> None:
    store.submit_job(make_spec("j1"), None, actor="a")
    store.set_job_reason("j1", "NO_LEAF", "needs 32 GPUs under one leaf; the best leaf has 24 free")
    job = store.get_job("j1")
    assert (job.reason_code, job.version) == ("NO_LEAF", 1)
    store.transition_job("j1", 1, JobState.CANCELLED, "", actor="a")
    store.set_job_reason("j1", "LATE", "x")
    assert store.get_job("j1").reason_code == ""


def test_racing_writers_quoting_one_version_let_exactly_one_through(store: Store, make_spec: Spec) -> None:
    # The read-check in Python is not the guard on PostgreSQL (READ COMMITTED): the versioned UPDATE is.
    store.submit_job(make_spec("j1"), None, actor="a")
    barrier = threading.Barrier(6)
    outcomes: list[str] = []

    def cancel(i: int) -> None:
        barrier.wait()
        try:
            store.transition_job("j1", 1, JobState.CANCELLED, f"writer {i}", actor=f"w{i}")
            outcomes.append("ok")
        except StaleVersionError:
            outcomes.append("stale")

    threads = [threading.Thread(target=cancel, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok"] + ["stale"] * 5
    assert store.get_job("j1").version == 2
    assert len(store.list_audit(subject="job/j1", action="job.cancelled")) == 1
