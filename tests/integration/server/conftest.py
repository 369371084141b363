"""Server API tests run on SQLite and on the machine's PostgreSQL (a fresh schema per test), through httpx
against the real app. The loop is driven by hand (``srv.loop.run_cycle()``) with a hand clock: no sleeps."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from server_api_helpers import Api, Clock, make_api

from databases import fresh_schema, pg_base_url


@pytest.fixture(scope="session")
def pg_url() -> str | None:
    return pg_base_url()


@pytest.fixture
def pg_schema_url(pg_url: str | None) -> Iterator[str]:
    with fresh_schema(pg_url) as url:
        yield url


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
