"""The store's tests run twice: on SQLite in tmp_path and on the machine's PostgreSQL, each test in a fresh
schema (so pytest-xdist workers never collide). PostgreSQL missing: skipped locally, a failure when CI is set."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from databases import Clock, fresh_schema, pg_base_url
from gpupool.domain.jobs import JobSpec
from gpupool.store import Store


@pytest.fixture(scope="session")
def pg_url() -> str | None:
    return pg_base_url()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path, pg_url: str | None) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'gpupool.db'}"
        return
    with fresh_schema(pg_url, fast_commit=True) as url:
        yield url


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
