"""Engines for SQLite and PostgreSQL, one transaction helper, and Alembic run from code.

SQLite: WAL (readers never block the writer), a busy timeout (writers queue instead of failing), foreign keys
on, and write transactions opened with ``BEGIN IMMEDIATE`` so a transaction that reads then writes takes the
write lock up front: two such transactions can never both read the old state and then deadlock or overwrite
each other. PostgreSQL: READ COMMITTED plus guarded (versioned) updates and ``SELECT ... FOR UPDATE`` where a
check spans rows. Either way, every transaction is short and holds no network call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from gpupool.domain.errors import InputError
from gpupool.store.rows import Base

MIGRATIONS = Path(__file__).parent / "migrations"
_WRITE = "gpupool_write"


def default_url(data_dir: str | Path) -> str:
    return f"sqlite:///{Path(data_dir) / 'gpupool.db'}"


def make_engine(url: str, *, busy_timeout_ms: int = 10_000) -> Engine:
    try:
        parsed = make_url(url)
    except Exception as e:  # SQLAlchemy raises ArgumentError; name the URL's problem either way
        raise InputError(f"not a database URL: {e}", source="database URL") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            # Each pooled connection would get its own empty in-memory database: nothing would persist.
            raise InputError("the store needs a SQLite file, not an in-memory database", source=url)
        engine = create_engine(parsed)
        _sqlite_setup(engine, busy_timeout_ms)
        return engine
    if backend == "postgresql":
        return create_engine(parsed, pool_size=10, max_overflow=20)
    raise InputError(f"unsupported database {backend!r}: use sqlite:///PATH or postgresql+psycopg://...", source=url)


def _sqlite_setup(engine: Engine, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let us emit BEGIN ourselves: pysqlite's own implicit BEGIN is always DEFERRED.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cur.execute("PRAGMA foreign_keys=ON")
        # NORMAL in WAL mode is durable against a process crash (kill -9); only a power loss may drop the last commits.
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE) else "BEGIN")


def is_postgres(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"


@contextmanager
def transaction(engine: Engine, *, write: bool) -> Iterator[Session]:
    """One short transaction: committed when the block ends, rolled back if it raises."""
    with engine.connect() as conn:
        if write:
            conn.execution_options(**{_WRITE: True})
        with Session(bind=conn, expire_on_commit=False, autoflush=True) as session, session.begin():
            yield session


@contextmanager
def core_transaction(engine: Engine, *, write: bool) -> Iterator[Connection]:
    """``transaction`` without an ORM session: for hot paths that only run Core statements (a session's
    set-up, bookkeeping and ORM-level execution cost more than the statements themselves there)."""
    with engine.connect() as conn:
        if write:
            conn.execution_options(**{_WRITE: True})
        with conn.begin():
            yield conn


def alembic_config() -> Config:
    """Alembic's configuration built in code: no alembic.ini is needed at run time."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def migrate(engine: Engine, revision: str = "head") -> None:
    with engine.begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def schema_drift(engine: Engine) -> list[Any]:
    """What ``alembic check`` would report: differences between the migrated schema and the row classes."""
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(ctx, Base.metadata))
