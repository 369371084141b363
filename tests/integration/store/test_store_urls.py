"""Database URLs: libpq's multi-host form (the members of a Patroni cluster) reaches the member that takes writes,
on the machine's real PostgreSQL, past a member that refuses and one that never answers."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.parse import quote, urlencode

import pytest
from sqlalchemy.engine import make_url

from databases import fresh_schema, pg_base_url
from gpupool.domain.errors import InputError
from gpupool.domain.jobs import JobSpec
from gpupool.store import Store
from gpupool.store.engine import CONNECT_TIMEOUT_S, make_engine, parse_url
from procs import free_port


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
