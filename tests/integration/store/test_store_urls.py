"""Database URLs: libpq's multi-host form (the members of a Patroni cluster) reaches the member that takes writes,
on the machine's real PostgreSQL, past a member that refuses and one that never answers; and what the store adds
to every PostgreSQL URL (a connect timeout, an idle-in-transaction timeout) and why: a stopped client loses its
transaction, the leadership row within LEASE_IDLE_S, and a live one stalled under load keeps its own."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from databases import fresh_schema, pg_base_url
from gpupool.domain.errors import InputError, StoreUnavailableError
from gpupool.domain.jobs import JobSpec
from gpupool.store import Store
from gpupool.store.engine import CONNECT_TIMEOUT_S, make_engine, parse_url, store_fault
from gpupool.store.engine import IDLE_IN_TRANSACTION_S as IDLE_S
from gpupool.store.fencing import LEASE_IDLE_S, Fence
from procs import free_port, until


def test_the_multi_host_form_becomes_host_query_pairs_and_keeps_the_rest() -> None:
    url = parse_url("postgresql+psycopg://u:p%40ss@10.0.0.1:5432,10.0.0.2:5433,db3/gp?target_session_attrs=read-write")
    assert url.host is None and url.database == "gp" and url.username == "u" and url.password == "p@ss"
    assert url.query == {"host": ("10.0.0.1:5432", "10.0.0.2:5433", "db3"), "target_session_attrs": "read-write"}
    assert parse_url("postgresql+psycopg://u@h1:1,h2:2").query["host"] == ("h1:1", "h2:2")
    # One host, and SQLite paths with commas in them, are SQLAlchemy's own parse.
    assert parse_url("postgresql+psycopg://u@h:5/d") == make_url("postgresql+psycopg://u@h:5/d")
    assert parse_url("sqlite:////tmp/a,b/x.db").database == "/tmp/a,b/x.db"


def test_bad_host_lists_are_refused_naming_the_problem() -> None:
    with pytest.raises(InputError, match="an empty host in the host list 'h1:1,'"):
        parse_url("postgresql+psycopg://u@h1:1,/db")
    with pytest.raises(InputError, match="the port of 'h2:x' in the host list is not a number"):
        make_engine("postgresql+psycopg://u@h1:1,h2:x/db")


def test_postgres_engines_give_up_on_a_silent_member_after_5_s_unless_the_url_says_otherwise() -> None:
    assert make_engine("postgresql+psycopg://u@h/d").url.query["connect_timeout"] == str(CONNECT_TIMEOUT_S)
    assert make_engine("postgresql+psycopg://u@h1,h2/d?connect_timeout=1").url.query["connect_timeout"] == "1"


def test_a_member_list_means_the_member_that_takes_writes_unless_the_url_says_otherwise() -> None:
    assert make_engine("postgresql+psycopg://u@h1,h2/d").url.query["target_session_attrs"] == "read-write"
    assert (
        make_engine("postgresql+psycopg://u@h1,h2/d?target_session_attrs=primary").url.query["target_session_attrs"]
        == "primary"
    )
    assert "target_session_attrs" not in make_engine("postgresql+psycopg://u@h1/d").url.query


@pytest.fixture
def schema_url() -> Iterator[str]:
    with fresh_schema(pg_base_url(), fast_commit=True) as url:
        yield url


def test_a_store_on_a_member_list_uses_the_member_that_answers(schema_url: str) -> None:
    real = make_url(schema_url)
    refused = free_port()  # nothing listens there: connection refused at once
    with socket.socket() as silent:  # accepts TCP, never says a word: libpq waits for its connect timeout
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        hosts = f"127.0.0.1:{refused},127.0.0.1:{silent.getsockname()[1]},{real.host}:{real.port}"
        query = urlencode({**real.query, "target_session_attrs": "read-write", "connect_timeout": 1}, quote_via=quote)
        with Store(f"postgresql+psycopg://{real.username}@{hosts}/{real.database}?{query}") as store:
            store.migrate()
            store.create_tenant("acme", "test")
            store.submit_job(JobSpec("via-the-list", tenant="acme"), None, actor="test")
        with Store(schema_url) as direct:
            assert [j.spec.job_id for j in direct.list_jobs()] == ["via-the-list"]


def test_options_get_an_idle_in_transaction_timeout_beside_their_own() -> None:
    url = make_engine("postgresql+psycopg://u@h/d?options=-csearch_path%3Ds1").url
    assert url.query["options"] == f"-csearch_path=s1 -c idle_in_transaction_session_timeout={IDLE_S * 1000}"
    mine = "-c idle_in_transaction_session_timeout=900"
    assert make_engine(f"postgresql+psycopg://u@h/d?options={quote(mine)}").url.query["options"] == mine


def test_a_client_that_stops_inside_a_transaction_loses_its_locks_to_the_database(schema_url: str) -> None:
    """A leader paused (SIGSTOP) inside a fenced write holds the leadership row FOR SHARE; the standby's
    takeover must not wait for it as long as the pause lasts. Here a store session takes a row FOR SHARE and
    then does nothing at all: another session's UPDATE of that row goes through once PostgreSQL ends the idle
    transaction (1 s here, through the URL; IDLE_IN_TRANSACTION_S by default), and the idle session is gone."""
    real = make_url(schema_url)
    options = f"{real.query['options']} -c idle_in_transaction_session_timeout=1000"
    engine = make_engine(real.update_query_dict({"options": options}).render_as_string(hide_password=False))
    other = make_engine(schema_url)
    with other.begin() as admin:
        admin.exec_driver_sql("CREATE TABLE held (id int PRIMARY KEY, v int)")
        admin.exec_driver_sql("INSERT INTO held VALUES (1, 0)")
    conn = engine.connect()
    conn.exec_driver_sql("SELECT v FROM held WHERE id = 1 FOR SHARE")  # and then the client stops
    done = threading.Event()

    def writer() -> None:
        with other.begin() as w:
            w.exec_driver_sql("UPDATE held SET v = 1 WHERE id = 1")  # blocks while the share lock is held
        done.set()

    threading.Thread(target=writer, daemon=True).start()
    until(done.is_set, 20, "the UPDATE once the idle transaction was ended")
    with pytest.raises(sa.exc.DBAPIError, match="idle-in-transaction timeout") as woke:
        conn.exec_driver_sql("SELECT 1")  # the client resumes: its transaction is gone, and so is the session
    fault = store_fault(woke.value, engine.dialect.loaded_dbapi)  # what the store makes of it: a passing fault
    assert isinstance(fault, StoreUnavailableError) and (fault.reason, fault.transient) == ("unreachable", True)
    conn.invalidate()
    engine.dispose()
    other.dispose()


def _idle_limit(conn: sa.Connection) -> str:
    return str(conn.exec_driver_sql("SHOW idle_in_transaction_session_timeout").scalar_one())


def test_only_what_locks_the_leadership_row_has_the_short_idle_limit(schema_url: str) -> None:
    """Every statement that locks the leadership row (a takeover, a renewal, a drop, the fencing check of the
    loop's writes) runs in a transaction whose idle limit is LEASE_IDLE_S; any other transaction, the next one
    on the same pooled connection included, has the sessions' IDLE_IN_TRANSACTION_S."""
    seen: list[tuple[str, str]] = []

    def after(conn: sa.Connection, cursor: Any, statement: str, *_: Any) -> None:
        if "leadership" in statement and not statement.startswith("SELECT cluster"):  # lease(): a plain read
            limit = conn.connection.dbapi_connection.execute("SHOW idle_in_transaction_session_timeout")
            seen.append((statement.split()[0], limit.fetchone()[0]))

    with Store(schema_url) as store:
        store.migrate()
        sa.event.listen(store._engine, "after_cursor_execute", after)
        fence = store.take_lease("default", "r1", 30)
        assert fence is not None and store.renew_lease(fence, 30)
        with store._core_tx(write=True, fence=fence) as conn:
            backend = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        store.drop_lease(fence)
        assert {verb for verb, _ in seen} == {"INSERT", "UPDATE", "SELECT"}, seen
        assert {limit for _, limit in seen} == {f"{LEASE_IDLE_S}s"}, seen
        with store._core_tx(write=True) as conn:  # SET LOCAL: gone with the transaction that set it
            assert conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one() == backend
            assert _idle_limit(conn) == f"{IDLE_S}s"
    assert IDLE_S >= 6 * LEASE_IDLE_S


@pytest.mark.slow
def test_a_stall_past_the_lease_idle_limit_ends_a_fenced_transaction_but_not_an_ordinary_one(
    schema_url: str,
) -> None:
    """A live server stalled between two statements of its transactions (starved of CPU, or another thread
    collecting garbage with the GIL held: 4-7 s of wall time for 0.1 s of CPU at load 21-26 on this machine)
    for longer than LEASE_IDLE_S. Its fenced write holds the leadership row FOR SHARE: the database ends it
    within LEASE_IDLE_S, so the standby takes the lease over while the leader is still stalled, and the fenced
    write stores nothing. Its ordinary write (a registration, say) holds no lease: it commits when the stall
    ends. With 5 s for every session, as before, the ordinary write was ended as well (503 STORE_UNAVAILABLE
    "idle-in-transaction timeout")."""
    with Store(schema_url) as leader, Store(schema_url) as standby:
        leader.migrate()
        fence = leader.take_lease("default", "leader", LEASE_IDLE_S)
        assert fence is not None
        resume = threading.Event()
        backends: dict[str, int] = {}
        outcome: dict[str, str] = {}

        def stalled(name: str, fence: Fence | None) -> None:
            try:
                with leader._core_tx(write=True, fence=fence) as conn:
                    conn.execute(
                        sa.text("INSERT INTO tenants (name, weight, created_s) VALUES (:n, 1, 0)"), {"n": name}
                    )
                    backends[name] = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
                    resume.wait(60)  # the process stalls here, inside the transaction, until the test resumes it
                    conn.execute(sa.text("SELECT 1"))
                outcome[name] = "committed"
            except StoreUnavailableError as e:
                outcome[name] = e.reason

        def idle() -> set[str]:
            """Which of the two writes PostgreSQL sees idle inside its transaction."""
            with standby._core_tx(write=False) as conn:
                pids = set(
                    conn.execute(
                        sa.text("SELECT pid FROM pg_stat_activity WHERE state = 'idle in transaction'")
                    ).scalars()
                )
            return {name for name, pid in backends.items() if pid in pids}

        threads = [threading.Thread(target=stalled, args=(n, f)) for n, f in (("plain", None), ("fenced", fence))]
        for t in threads:
            t.start()
        until(lambda: idle() == {"plain", "fenced"}, 20, "both writes idle inside their transactions")
        # The lease expires; the takeover's UPDATE then waits for the stalled leader's FOR SHARE to be ended.
        took = until(lambda: standby.take_lease("default", "standby", 30), 4 * LEASE_IDLE_S, "the takeover")
        assert took.token == fence.token + 1 and not resume.is_set()  # taken over while the leader still stalls
        # The ended session's row in pg_stat_activity outlives its locks by a moment (the backend is exiting).
        until(lambda: idle() == {"plain"}, 10, "the fenced write's session gone, the ordinary one still open")
        resume.set()
        for t in threads:
            t.join(30)
        assert outcome == {"plain": "committed", "fenced": "unreachable"}
        with standby._core_tx(write=False) as conn:
            assert conn.execute(sa.text("SELECT name FROM tenants")).scalars().all() == ["plain"]
