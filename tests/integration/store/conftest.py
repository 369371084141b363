"""The store's tests run twice: on SQLite in tmp_path and on the machine's PostgreSQL, each test in a fresh
schema (so pytest-xdist workers never collide). PostgreSQL missing: skipped locally, a failure when CI is set."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpupool.domain.jobs import JobSpec
from gpupool.store import Store

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


class Clock:
    """A hand-driven clock, so times in tests are exact and nothing sleeps."""

    def __init__(self, t: float = 1_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _pg_base_url() -> str | None:
    import psycopg
    from sqlalchemy.engine import make_url

    url = os.environ.get("GPUPOOL_TEST_POSTGRES_URL", DEFAULT_PG)
    libpq = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        psycopg.connect(libpq, connect_timeout=2).close()
    except psycopg.Error as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but PostgreSQL does not answer at {url}: {e}")
        return None
    return url


@pytest.fixture(scope="session")
def pg_url() -> str | None:
    return _pg_base_url()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path, pg_url: str | None) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'gpupool.db'}"
        return
    if pg_url is None:
        pytest.skip("PostgreSQL does not answer (set GPUPOOL_TEST_POSTGRES_URL, or CI to make this a failure)")
    import psycopg
    from sqlalchemy.engine import make_url

    base = make_url(pg_url)
    libpq = base.set(drivername="postgresql").render_as_string(hide_password=False)
    schema = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        # search_path through libpq's options: the store, Alembic and raw test SQL all land in the schema.
        # synchronous_commit=off skips the server's WAL flush per commit (most of a test's DDL time); it only
        # matters if the PostgreSQL server itself crashes, which no test does (the crash test kills a client).
        options = f"-csearch_path={schema} -csynchronous_commit=off"
        yield base.update_query_dict({"options": options}).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(db_url: str, clock: Clock) -> Iterator[Store]:
    s = Store(db_url, clock=clock)
    s.migrate()
    s.create_tenant("acme", "admin")
    s.create_tenant("beta", "admin", weight=2.0)
    yield s
    s.close()


@pytest.fixture
def make_spec() -> Callable[..., JobSpec]:
    def make(job_id: str, **kw: object) -> JobSpec:
        kw.setdefault("tenant", "acme")
        return JobSpec(job_id=job_id, **kw)  # type: ignore[arg-type]

    return make
