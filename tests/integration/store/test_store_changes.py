"""The jobs' change feed the scheduling loop syncs from (migration 0015, ``ServerOps.job_changes``): every insert
and every change of a job's state or version is read once the writer has committed, whichever process wrote
it, including a transaction that began before the reader took its mark and committed after its read (on
PostgreSQL transaction ids are handed out in start order, not commit order); advisory writes (the waiting
reasons) are not changes."""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from gpupool.domain.jobs import JobSpec
from gpupool.domain.states import JobState
from gpupool.store import Store
from gpupool.store.records import WaitWrites
from gpupool.store.server_ops import ServerOps, Submission

Spec = Callable[..., JobSpec]


def _submit(ops: ServerOps, specs: list[JobSpec]) -> None:
    for out in ops.submit_many([Submission(s, ("true",), {}, None, "a") for s in specs]):
        assert not isinstance(out, Exception), out


def _ids(changes: list[object]) -> list[str]:
    return [c.job_id for c in changes]  # type: ignore[attr-defined]


def test_inserts_and_state_changes_are_read_once_committed_and_reasons_are_not(
    store: Store, make_spec: Spec, db_url: str
) -> None:
    ops = ServerOps(store)
    mark = ops.change_mark()
    _submit(ops, [make_spec("j1", submit_time_s=1.0), make_spec("j2", submit_time_s=2.0)])
    changes, mark = ops.job_changes(mark)
    assert _ids(changes) == ["j1", "j2"] and {c.state for c in changes} == {JobState.PENDING}
    assert ops.job_changes(mark)[0] == []  # nothing since
    # Advisory: neither a shared reason nor a job's own is a change the loop acts on.
    ops.write_reasons(
        WaitWrites(classes={"c1": ("RESOURCES", "waits")}, joined={"c1": ["j1"]}, own={("RESOURCES", "8 GPUs"): ["j2"]})
    )
    assert ops.job_changes(mark)[0] == []
    # Another process (its own engine and store) cancels j2: the next read has it, with its new version.
    other = Store(db_url)
    try:
        j2 = other.get_job("j2")
        other.transition_job("j2", j2.version, JobState.CANCELLED, "user asked", actor="b")
    finally:
        other.close()
    changes, mark = ops.job_changes(mark)
    assert [(c.job_id, c.state, c.version) for c in changes] == [("j2", JobState.CANCELLED, j2.version + 1)]
    assert ops.job_changes(mark)[0] == []


def test_a_write_begun_before_the_mark_and_committed_after_the_read_is_read_next(
    store: Store, make_spec: Spec, db_url: str
) -> None:
    ops = ServerOps(store)
    _submit(ops, [make_spec("early"), make_spec("late")])
    _, mark = ops.job_changes(ops.change_mark())
    writer = sa.create_engine(db_url)
    try:
        with writer.connect() as conn:
            tx = conn.begin()
            # The writer's transaction takes its id (PostgreSQL) / the write lock (SQLite) now...
            conn.execute(sa.text("UPDATE jobs SET state = 'cancelled', version = version + 1 WHERE id = 'late'"))
            # ...another writer commits meanwhile (PostgreSQL: a later id, committed first)...
            if store.concurrent_writes:
                with writer.begin() as c2:
                    c2.execute(sa.text("UPDATE jobs SET state = 'cancelled', version = version + 1 WHERE id = 'early'"))
            # ...and the loop reads before the first commits: it sees what is committed, not the open write.
            seen, mark = ops.job_changes(mark)
            assert "late" not in _ids(seen)
            tx.commit()
        changes, _ = ops.job_changes(mark)
        assert "late" in _ids(changes)
        assert {c.job_id: c.state for c in changes}["late"] is JobState.CANCELLED
    finally:
        writer.dispose()


def test_a_long_transaction_elsewhere_neither_repeats_changes_nor_hides_its_own(
    store: Store, make_spec: Spec, db_url: str
) -> None:
    """A transaction begun before the reads and left open (a slow writer, a report, a backup) must not make every
    later read return the same changes again: the loop would fold them anew each cycle. On PostgreSQL it holds a
    transaction id below every later one; its own write, once committed, is read once. (SQLite: an open read.)"""
    ops = ServerOps(store)
    _submit(ops, [make_spec("slow", submit_time_s=0.0)])
    mark = ops.change_mark()
    other = sa.create_engine(db_url)
    try:
        with other.connect() as conn:
            tx = conn.begin()
            if store.concurrent_writes:
                conn.execute(sa.text("UPDATE jobs SET version = version + 1 WHERE id = 'slow'"))
            else:
                conn.execute(sa.text("SELECT count(*) FROM jobs"))
            _submit(ops, [make_spec("j1", submit_time_s=1.0), make_spec("j2", submit_time_s=2.0)])
            changes, mark = ops.job_changes(mark)
            assert _ids(changes) == ["j1", "j2"]
            assert ops.job_changes(mark)[0] == []  # read once, though the open transaction is older
            j2 = store.get_job("j2")
            store.transition_job("j2", j2.version, JobState.CANCELLED, "user asked", actor="b")
            changes, mark = ops.job_changes(mark)
            assert [(c.job_id, c.state) for c in changes] == [("j2", JobState.CANCELLED)]
            assert ops.job_changes(mark)[0] == []
            tx.commit()
        changes, mark = ops.job_changes(mark)
        assert _ids(changes) == (["slow"] if store.concurrent_writes else [])
        assert ops.job_changes(mark)[0] == []
    finally:
        other.dispose()
