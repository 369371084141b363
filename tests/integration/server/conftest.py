"""Server API tests run on SQLite and on the machine's PostgreSQL (a fresh schema per test), through httpx
against the real app. The loop is driven by hand (``srv.loop.run_cycle()``) with a hand clock: no sleeps."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from server_api_helpers import Api, Clock, make_api, pg_base_url
from sqlalchemy.engine import make_url


@pytest.fixture(scope="session")
def pg_url() -> str | None:
    return pg_base_url()


@pytest.fixture
def pg_schema_url(pg_url: str | None) -> Iterator[str]:
    if pg_url is None:
        pytest.skip("PostgreSQL does not answer (set GPUPOOL_TEST_POSTGRES_URL, or CI to make this a failure)")
    base = make_url(pg_url)
    libpq = base.set(drivername="postgresql").render_as_string(hide_password=False)
    schema = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield base.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'gpupool.db'}"
    return str(request.getfixturevalue("pg_schema_url"))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def api(db_url: str, tmp_path: Path, clock: Clock) -> Iterator[Api]:
    yield from make_api(db_url, tmp_path, clock)
