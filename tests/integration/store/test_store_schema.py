"""Migrations: empty database to head, the result matches the row classes, and running them again is a no-op."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.script import ScriptDirectory

from gpupool.store import Store
from gpupool.store.engine import alembic_config, make_engine, migrate, schema_drift
from gpupool.store.rows import Base
from gpupool.store.server_ops import ServerOps

HEAD = ScriptDirectory.from_config(alembic_config()).get_current_head()  # one head: the chain is linear


def test_migrate_from_empty_to_head_matches_the_models(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        assert sa.inspect(engine).get_table_names() == []
        migrate(engine)
        tables = set(sa.inspect(engine).get_table_names())
        assert tables == set(Base.metadata.tables) | {"alembic_version"}
        # What `alembic check` does: autogenerate against the migrated schema must find nothing to do.
        assert schema_drift(engine) == []
        with engine.connect() as conn:
            head = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one()
        assert head == HEAD
    finally:
        engine.dispose()


def test_migrate_twice_is_harmless_and_keeps_data(db_url: str) -> None:
    with Store(db_url) as s:
        s.migrate()
        s.create_tenant("acme", "admin")
        s.migrate()
        assert [t.name for t in s.list_tenants()] == ["acme"]


def test_drift_is_detected_when_an_index_is_missing_from_the_database(db_url: str) -> None:
    # The check above is only worth something if it can fail: drop an index and it must notice.
    engine = make_engine(db_url)
    try:
        migrate(engine)
        with engine.begin() as conn:
            conn.execute(sa.text("DROP INDEX ix_audit_events_subject"))
        assert any("ix_audit_events_subject" in repr(d) for d in schema_drift(engine))
    finally:
        engine.dispose()


def test_sqlite_runs_in_wal_mode_with_a_busy_timeout(tmp_path: object) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/x.db", busy_timeout_ms=1234)
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 1234
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    finally:
        engine.dispose()


def test_bad_database_urls_are_refused_with_a_clear_error() -> None:
    import pytest

    from gpupool.domain.errors import InputError

    with pytest.raises(InputError, match="unsupported database 'mysql'"):
        make_engine("mysql://x@y/z")
    with pytest.raises(InputError, match="not an in-memory database"):
        make_engine("sqlite://")
    with pytest.raises(InputError, match="not a database URL"):
        make_engine("::nonsense::")


def test_0002_adopts_server_tables_made_before_it_and_keeps_their_rows(db_url: str) -> None:
    # A server older than 0002 made these two tables with create_all at 0001: upgrading must keep them.
    engine = make_engine(db_url)
    try:
        migrate(engine, "0001")
        assert "server_agents" not in sa.inspect(engine).get_table_names()
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "CREATE TABLE server_agents (host VARCHAR(256) PRIMARY KEY, token_id VARCHAR(32) NOT NULL,"
                    " token_hash VARCHAR(256) NOT NULL, agent_url TEXT NOT NULL, address VARCHAR(256) NOT NULL,"
                    " inventory TEXT NOT NULL, registered_s FLOAT NOT NULL)"
                )
            )
            conn.execute(sa.text("INSERT INTO server_agents VALUES ('gpu-01', 'i', 'h', '', '', '{}', 1.0)"))
        migrate(engine)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT host FROM server_agents")).scalars().all() == ["gpu-01"]
            assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one() == HEAD
        assert {"server_agents", "server_job_commands"} <= set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_0003_gives_existing_nodes_no_admin_labels_and_keeps_their_agents(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        migrate(engine, "0002")
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO nodes (name, state, gpu_model, gpu_count, labels, health, version)"
                    " VALUES ('gpu-01', 'up', 'H100', 8, '{\"zone\": \"a\"}', '[]', 1)"
                )
            )
        migrate(engine)
        assert schema_drift(engine) == []
    finally:
        engine.dispose()
    with Store(db_url) as s:
        n = s.get_node("gpu-01")
        assert n.labels == n.agent_labels == (("zone", "a"),) and n.admin_labels == ()


def test_0013_gives_stored_jobs_their_gpu_demand_from_their_specs(db_url: str) -> None:
    """Jobs stored before 0013 sort by GPUs as new ones do: the column is filled from each spec (whole GPUs,
    a share, and a spec it cannot read as 0), and the new index is there."""
    engine = make_engine(db_url)
    try:
        migrate(engine, "0012")
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO tenants (name, weight, created_s) VALUES ('acme', 1.0, 0)"))
            specs = {
                "whole": '{"tasks": 2, "gpus_per_task": 4, "share": null}',
                "share": '{"tasks": 3, "gpus_per_task": 1, "share": {"milli_gpu": 250, "memory_mib": 0}}',
                "broken": "not json",
            }
            for job_id, spec in specs.items():
                conn.execute(
                    sa.text(
                        "INSERT INTO jobs (id, tenant, pool, name, priority, state, submit_time_s, spec, version,"
                        " reason_code, reason, created_s, updated_s, attempt, submitted_by)"
                        " VALUES (:id, 'acme', 'default', '', 2, 'pending', 1.0, :spec, 1, '', '', 1.0, 1.0, 0, '')"
                    ),
                    {"id": job_id, "spec": spec},
                )
        migrate(engine)
        assert schema_drift(engine) == []
        with engine.connect() as conn:
            got = {r[0]: r[1] for r in conn.execute(sa.text("SELECT id, gpu_milli FROM jobs"))}
        assert got == {"whole": 8000, "share": 750, "broken": 0}
        assert "ix_jobs_pool_submit" in {i["name"] for i in sa.inspect(engine).get_indexes("jobs")}
    finally:
        engine.dispose()


def test_0015_jobs_stored_before_it_have_their_later_changes_read_and_it_downgrades(db_url: str) -> None:
    """A job stored before 0015 (change_seq 0) is read by the change feed once its state changes after; down to
    0014 the triggers go with the column (a job's update still works there), and up again the schema matches."""
    engine = make_engine(db_url)
    store = None
    try:
        migrate(engine, "0014")
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO tenants (name, weight, created_s) VALUES ('acme', 1.0, 0)"))
            conn.execute(
                sa.text(
                    "INSERT INTO jobs (id, tenant, pool, name, priority, state, submit_time_s, spec, version,"
                    " reason_code, reason, created_s, updated_s, attempt, submitted_by)"
                    " VALUES ('old', 'acme', 'default', '', 2, 'pending', 1.0, '{}', 1, '', '', 1.0, 1.0, 0, '')"
                )
            )
        migrate(engine)
        assert schema_drift(engine) == []
        store = Store(db_url)
        ops = ServerOps(store)
        mark = ops.change_mark()
        assert ops.job_changes(mark)[0] == []
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE jobs SET state = 'cancelled', version = 2 WHERE id = 'old'"))
        assert [(c.job_id, c.version) for c in ops.job_changes(mark)[0]] == [("old", 2)]
        store.close()
        store = None
        with engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0014")
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE jobs SET version = 3 WHERE id = 'old'"))
        assert "change_seq" not in {c["name"] for c in sa.inspect(engine).get_columns("jobs")}
        migrate(engine)
        assert schema_drift(engine) == []
    finally:
        if store is not None:
            store.close()
        engine.dispose()
