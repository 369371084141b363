"""The leadership lease and its fencing, on SQLite and PostgreSQL: one holder per cluster name, judged on the
database's clock; a takeover bumps the token; every write made with a stale token is refused and stores
nothing, while the current token's writes pass and carry it."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from gpupool.domain.errors import StaleLeaderError, StoreUnavailableError
from gpupool.domain.jobs import Allocation, JobSpec, TaskAllocation
from gpupool.domain.states import JobState, NodeState
from gpupool.server.leader import LeaderLease
from gpupool.store import ServerOps, Store
from gpupool.store.fencing import Fence
from gpupool.store.records import WaitWrites
from procs import until

Spec = Callable[..., JobSpec]


def expired(store: Store, cluster: str = "default") -> bool:
    lease = store.lease(cluster)
    return lease is not None and not lease.live


def test_one_holder_until_the_lease_expires_then_a_takeover_bumps_the_token(store: Store) -> None:
    a = store.take_lease("default", "replica-a", 0.3)
    assert a is not None and a.token == 1
    assert store.take_lease("default", "replica-b", 30) is None  # live: nobody else takes it
    assert store.renew_lease(a, 0.3)
    until(lambda: expired(store), 10, "the lease to expire on the database's clock")
    assert not store.renew_lease(a, 30)  # expired: the old holder cannot renew its way back in
    b = store.take_lease("default", "replica-b", 30)
    assert b is not None and b.token == 2
    lease = store.lease("default")
    assert lease is not None and (lease.holder, lease.token, lease.live) == ("replica-b", 2, True)
    assert not store.renew_lease(a, 30)
    # Even the same replica id gets a new token once its lease ran out: a new term, never the old one back.
    store.drop_lease(b)
    c = store.take_lease("default", "replica-b", 30)
    assert c is not None and c.token == 3


def test_cluster_names_are_separate_leases(store: Store) -> None:
    assert store.take_lease("east", "r1", 30) is not None
    assert store.take_lease("west", "r2", 30) is not None
    assert store.take_lease("east", "r2", 30) is None


def test_a_dropped_lease_is_taken_at_once(store: Store) -> None:
    a = store.take_lease("default", "r1", 30)
    assert a is not None
    store.drop_lease(a)
    assert store.take_lease("default", "r2", 30) is not None


def _alloc_tokens(store: Store) -> list[int | None]:
    with store._engine.connect() as conn:
        return list(conn.execute(sa.text("SELECT leader_token FROM allocations ORDER BY job_id")).scalars())


def test_every_loop_write_under_a_stale_token_is_refused_and_stores_nothing(store: Store, make_spec: Spec) -> None:
    store.upsert_node("h1", gpu_model="H100", gpu_count=8, actor="agent")
    ops = ServerOps(store)
    old = store.take_lease("default", "old-leader", 0.3)
    assert old is not None
    a, _ = store.submit_job(make_spec("a"), None, actor="u")
    placed = store.record_allocation("a", a.version, Allocation("a", (TaskAllocation("h1", (0,)),)), "s", fence=old)
    b, _ = store.submit_job(make_spec("b"), None, actor="u")
    until(lambda: expired(store), 10, "the old leader's lease to expire")
    new = store.take_lease("default", "new-leader", 30)
    assert new is not None and new.token == old.token + 1
    refused: list[Callable[[], object]] = [
        lambda: store.record_allocation("b", b.version, Allocation("b", (TaskAllocation("h1", (1,)),)), "s", fence=old),
        lambda: store.release_allocation("a", placed.version, "s", reason="preempted", fence=old),
        lambda: store.transition_job("b", b.version, JobState.CANCELLED, "x", "s", fence=old),
        lambda: store.transition_node("h1", NodeState.LOST, "no heartbeat", "s", fence=old),
        lambda: ops.write_reasons(WaitWrites(own={("no_capacity", "full"): ["b"]}), fence=old),
    ]
    for write in refused:
        with pytest.raises(StaleLeaderError, match="no longer old-leader's"):
            write()
    assert store.get_job("a").state is JobState.PLACED and store.get_job("b").state is JobState.PENDING
    assert store.get_job("b").reason == "" and store.get_node("h1").state is NodeState.UP
    assert _alloc_tokens(store) == [old.token]
    # The current token's writes pass, and the placement and its audit event carry it.
    store.record_allocation("b", b.version, Allocation("b", (TaskAllocation("h1", (1,)),)), "s", fence=new)
    assert _alloc_tokens(store) == [old.token, new.token]
    placed_events = store.list_audit(action="job.placed")
    assert sorted(e.data["leader_token"] for e in placed_events) == [old.token, new.token]
    # A fence naming the right token but another holder is no better.
    with pytest.raises(StaleLeaderError):
        ops.write_reasons(WaitWrites(classes={"x": ("a", "b")}), fence=Fence("default", "someone-else", new.token))


def test_postgres_a_takeover_waits_for_a_fenced_write_in_flight(store: Store, make_spec: Spec) -> None:
    """The check takes the lease row FOR SHARE: a takeover cannot commit while a fenced transaction that passed
    the check is open, so each fenced write lands wholly before the takeover or is refused after it."""
    if not store._postgres:
        pytest.skip("SQLite serialises all writers with one lock: a takeover cannot overlap any write")
    old = store.take_lease("default", "old", 0.3)
    assert old is not None
    inside, release = threading.Event(), threading.Event()
    taken: list[Fence | None] = []

    def fenced_write() -> None:
        with store._tx(write=True, fence=old) as s:
            s.execute(sa.text("UPDATE jobs SET reason = 'x' WHERE id = 'nobody'"))
            inside.set()
            release.wait(30)

    writer = threading.Thread(target=fenced_write)
    writer.start()
    try:
        until(inside.is_set, 10, "the fenced transaction open")
        until(lambda: expired(store), 10, "the lease to expire while the write is open")
        taker = threading.Thread(target=lambda: taken.append(store.take_lease("default", "new", 30)))
        taker.start()

        def taker_waits_on_the_lease_row() -> bool:
            with store._engine.connect() as conn:
                waiting = conn.execute(
                    sa.text(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND query LIKE 'UPDATE leadership SET holder%'"
                    )
                ).scalar_one()
            return int(waiting) == 1

        until(taker_waits_on_the_lease_row, 10, "the takeover blocked by the fenced transaction")
        assert taken == []
        release.set()
        writer.join(10)
        taker.join(10)
        assert len(taken) == 1 and taken[0] is not None and taken[0].token == old.token + 1
    finally:
        release.set()
        writer.join(10)


def test_a_pool_with_every_connection_held_is_a_busy_database_not_a_crash(store: Store) -> None:
    """Invariant: a request (or the lease's renewal) that finds every pooled connection in use past the pool's
    timeout gets the store's passing fault (``busy``: a 503 on the API, a renewal tried again), not a driver
    error that ends a thread; nothing is written, and once a connection is free the same call works."""
    engine = store._engine
    engine.pool._timeout = 0.2  # type: ignore[attr-defined]  # the pool's wait (30 s by default), short here
    held: list[sa.Connection] = []
    try:
        while True:  # every connection the pool will give
            try:
                held.append(engine.connect())
            except sa.exc.TimeoutError:
                break
        with pytest.raises(StoreUnavailableError) as refused:
            store.take_lease("default", "replica-a", 30)
        assert (refused.value.reason, refused.value.transient) == ("busy", True)
    finally:
        for conn in held:
            conn.close()
    assert store.lease("default") is None  # the refused call stored nothing
    assert store.take_lease("default", "replica-a", 30) is not None


class _FailsOnce:
    """The store, but its second lease renewal raises what no renewal expects (a bug, a driver's surprise)."""

    def __init__(self, store: Store) -> None:
        self._store, self.renewals = store, 0

    def take_lease(self, *args: object) -> Fence | None:
        return self._store.take_lease(*args)  # type: ignore[arg-type]

    def drop_lease(self, fence: Fence) -> None:
        self._store.drop_lease(fence)

    def renew_lease(self, fence: Fence, ttl_s: float) -> bool:
        self.renewals += 1
        if self.renewals == 2:
            raise RuntimeError("an unexpected failure")
        return self._store.renew_lease(fence, ttl_s)


def test_the_renewal_thread_outlives_a_renewal_that_raises(store: Store) -> None:
    """Invariant: one renewal that fails in an unexpected way costs no leadership: the thread logs it and goes on
    renewing, so the lease is still held long after its ttl (the thread used to end, and the lease lapsed)."""
    proxy = _FailsOnce(store)
    lease = LeaderLease(proxy, "default", ttl_s=1.0, renew_s=0.1)  # type: ignore[arg-type]
    assert lease.hold() is not None
    lease.start()
    try:
        until(lambda: proxy.renewals >= 30, 20, "renewals well past the one that raised (3 s of them)")
        assert lease.held
    finally:
        lease.release()
