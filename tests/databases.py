"""The two databases every store and server test runs on: SQLite in a temporary folder, and the machine's
PostgreSQL with one fresh schema per test (so pytest-xdist workers never collide). PostgreSQL missing:
skipped locally, a failure when CI is set. Also the hand clock those tests drive."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from sqlalchemy.engine import make_url

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


class Clock:
    """A hand-driven clock, so times in tests are exact and nothing sleeps."""

    def __init__(self, t: float = 1_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def pg_base_url() -> str | None:
    """The PostgreSQL URL to test on, or None when nothing answers there (a failure instead when CI is set)."""
    url = os.environ.get("GPUPOOL_TEST_POSTGRES_URL", DEFAULT_PG)
    try:
        psycopg.connect(_libpq(url), connect_timeout=2).close()
    except psycopg.Error as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but PostgreSQL does not answer at {url}: {e}")
        return None
    return url


@contextmanager
def fresh_schema(pg_url: str | None, *, fast_commit: bool = False) -> Iterator[str]:
    """A URL whose connections all land in a new schema (search_path through libpq's options), dropped after.

    ``fast_commit`` turns off the server's WAL flush per commit (most of a test's DDL time); it only matters if
    the PostgreSQL server itself crashes, which no test does (crash tests kill clients and our server).
    """
    if pg_url is None:
        pytest.skip("PostgreSQL does not answer (set GPUPOOL_TEST_POSTGRES_URL, or CI to make this a failure)")
    schema = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(_libpq(pg_url), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    options = f"-csearch_path={schema}" + (" -csynchronous_commit=off" if fast_commit else "")
    try:
        yield make_url(pg_url).update_query_dict({"options": options}).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(_libpq(pg_url), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
