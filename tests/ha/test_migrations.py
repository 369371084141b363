"""Migrations run under a lock, once: four ``gpupool server`` processes started at the same moment on one empty
database (a SQLite file; a PostgreSQL schema) all come up, the schema is migrated exactly once (one process
logs that it migrated, the others find it at head) and it matches the row classes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from gpupool.store.engine import alembic_config, make_engine, schema_drift
from procs import ServerProc, pg_schema, wait_for

MIGRATED = "migrated the store from"


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'gpupool.db'}"
    else:
        yield from pg_schema()


def test_four_servers_started_at_once_on_an_empty_database_migrate_once_and_all_come_up(
    empty_db: str, tmp_path: Path
) -> None:
    servers: list[ServerProc] = []
    try:
        for i in range(4):
            data = tmp_path / f"replica{i}"
            data.mkdir()
            servers.append(ServerProc(empty_db, data, tmp_path / f"replica{i}.log", wait_s=0))
        for s in servers:
            wait_for(s.answers, 120, f"replica on port {s.port} up")  # fails at once, with its log, if it died
        logs = [s.log_path.read_text() for s in servers]
        assert sum(log.count(MIGRATED) for log in logs) == 1, [log[-1500:] for log in logs]
        engine = make_engine(empty_db)
        try:
            assert schema_drift(engine) == []
            with engine.connect() as conn:
                head = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalars().all()
        finally:
            engine.dispose()
        assert head == [ScriptDirectory.from_config(alembic_config()).get_current_head()]
    finally:
        for s in servers:
            s.stop()
