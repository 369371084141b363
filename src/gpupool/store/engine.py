"""Engines for SQLite and PostgreSQL, one transaction helper, and Alembic run from code.

SQLite: WAL (readers never block the writer), a busy timeout (writers queue instead of failing), foreign keys
on, and write transactions opened with ``BEGIN IMMEDIATE`` so a transaction that reads then writes takes the
write lock up front: two such transactions can never both read the old state and then deadlock or overwrite
each other. PostgreSQL: READ COMMITTED plus guarded (versioned) updates and ``SELECT ... FOR UPDATE`` where a
check spans rows. Either way, every transaction is short and holds no network call.

Database failures leave a transaction as domain errors with stable codes (``store_fault``): what the database
cannot store is an ``UnstorableInputError`` (a 422 naming no field: the API's models refuse such text before
it gets here), and a database that cannot answer or write (unreachable, failing over, disk full, read-only
file) a ``StoreUnavailableError`` with its reason (a 503). Constraint violations pass through unchanged: the
use cases that expect them catch them. SQLite's files are checked around every transaction (``sqlite_files``):
a process that touched the mapped index of a file it can no longer write would die of SIGBUS.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session

from gpupool.domain.errors import GpupoolError, InputError, StoreUnavailableError, UnstorableInputError
from gpupool.store.rows import Base
from gpupool.store.sqlite_files import SqliteFiles

MIGRATIONS = Path(__file__).parent / "migrations"
_WRITE = "gpupool_write"


def default_url(data_dir: str | Path) -> str:
    return f"sqlite:///{Path(data_dir) / 'gpupool.db'}"


# libpq's multi-host form: scheme://[user[:password]@]host1[:port1],host2[:port2],.../db[?query]
_MULTI_HOST = re.compile(r"^(?P<head>[A-Za-z0-9+_.-]+://(?:[^/@]*@)?)(?P<hosts>[^/?@]*,[^/?@]*)(?P<tail>[/?].*)?$")
# A PostgreSQL member that neither accepts nor refuses (a paused or cut-off host) is given up after this long,
# so the next host of a multi-host URL is tried: libpq's own default is to wait forever.
CONNECT_TIMEOUT_S = 5
# A transaction left open by a client that is gone (a partition, a host that hung) is ended by PostgreSQL after
# this long idle, and with it its row locks. Not shorter: a live client stalls between two statements of its
# transaction whenever its process is starved of CPU, or another of its threads collects garbage with the GIL
# held: at load 21-26 on 2 cores such collections took 4-7 s of wall time for 0.1 s of CPU, and at the 5 s
# this once was, registrations and API writes failed with 503 "idle-in-transaction timeout". The transactions
# that hold up a takeover (those that lock the leadership row: the lease's own and the scheduling loop's fenced
# writes) set a short limit of their own (``fencing.LEASE_IDLE_S``), so a paused leader still frees that row
# within 5 s.
IDLE_IN_TRANSACTION_S = 30


def parse_url(url: str) -> URL:
    """``url`` as SQLAlchemy's URL, also in libpq's multi-host form that SQLAlchemy's parser refuses.

    ``postgresql+psycopg://u@h1:5432,h2:5433/db?target_session_attrs=read-write`` (the members of a Patroni
    cluster, say) becomes ``postgresql+psycopg://u@/db?host=h1:5432&host=h2:5433&...``, the form SQLAlchemy's
    psycopg dialect hands to libpq as its host and port lists: libpq tries the hosts in turn and keeps the first
    that answers (with ``target_session_attrs=read-write``, the one that takes writes, i.e. the primary).
    """
    try:
        found = _MULTI_HOST.match(url)
        if found is None:
            return make_url(url)
        hosts = found["hosts"].split(",")
        if not all(hosts):
            raise ValueError(f"an empty host in the host list {found['hosts']!r}")
        for host in hosts:
            _, colon, port = host.rpartition(":")
            if colon and not host.endswith("]") and not port.isdigit():
                raise ValueError(f"the port of {host!r} in the host list is not a number")
        base = make_url(found["head"] + (found["tail"] or "/"))
        return base.update_query_pairs([("host", h) for h in hosts], append=True)
    except Exception as e:  # SQLAlchemy raises ArgumentError or ValueError; name the URL's problem either way
        raise InputError(f"not a database URL: {e}", source="database URL") from None


def make_engine(url: str, *, busy_timeout_ms: int = 10_000) -> Engine:
    parsed = parse_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            # Each pooled connection would get its own empty in-memory database: nothing would persist.
            raise InputError("the store needs a SQLite file, not an in-memory database", source=url)
        engine = create_engine(parsed)
        _sqlite_setup(engine, str(parsed.database), busy_timeout_ms)
        return engine
    if backend == "postgresql":
        return create_engine(postgres_url(parsed), pool_size=10, max_overflow=20)
    shown = parsed.render_as_string(hide_password=True)
    raise InputError(f"unsupported database {backend!r}: use sqlite:///PATH or postgresql+psycopg://...", source=shown)


def postgres_url(parsed: URL) -> URL:
    """A PostgreSQL URL with what the store needs unless it says otherwise: a connect timeout
    (``CONNECT_TIMEOUT_S``), an idle-in-transaction timeout (``IDLE_IN_TRANSACTION_S``, added to libpq's
    ``options``) and, given several hosts, ``target_session_attrs=read-write``: the store writes, and libpq's
    default (``any``) would keep the first member that answers, a standby as readily as the primary."""
    extra: dict[str, str] = {}
    if "connect_timeout" not in parsed.query:
        extra["connect_timeout"] = str(CONNECT_TIMEOUT_S)
    if isinstance(parsed.query.get("host"), tuple) and "target_session_attrs" not in parsed.query:
        extra["target_session_attrs"] = "read-write"
    options = parsed.query.get("options", "")
    options = " ".join(options) if isinstance(options, tuple) else options
    if "idle_in_transaction_session_timeout" not in options:
        timeout = f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_S * 1000}"
        extra["options"] = f"{options} {timeout}".strip()
    return parsed.update_query_dict(extra)


def _sqlite_setup(engine: Engine, path: str, busy_timeout_ms: int) -> None:
    files = _FILES[engine] = SqliteFiles(path, busy_timeout_ms)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        try:
            files.check_same_file()  # never beside the first file's connections (see sqlite_files)
        except StoreUnavailableError:
            dbapi_conn.close()
            raise
        # Let us emit BEGIN ourselves: pysqlite's own implicit BEGIN is always DEFERRED.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        # Never map the database file: a file truncated or replaced under a mapping kills the process with
        # SIGBUS. 0 is this build's default; others (SQLITE_DEFAULT_MMAP_SIZE) may map, so say it.
        cur.execute("PRAGMA mmap_size=0")
        # The busy timeout first: switching a new file to WAL takes a lock that another process opening it at
        # the same moment may hold, and without a timeout that is "database is locked" at once.
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        # NORMAL in WAL mode is durable against a process crash (kill -9); only a power loss may drop the last commits.
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE) else "BEGIN")


def is_postgres(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"


# The files behind each SQLite engine (PostgreSQL engines have none): which connection a transaction uses, and
# the check of a write after its COMMIT (see sqlite_files).
_FILES: WeakKeyDictionary[Engine, SqliteFiles] = WeakKeyDictionary()


def _connect(engine: Engine, files: SqliteFiles | None, *, write: bool) -> Connection:
    """A connection for one transaction (on SQLite, the one ``files`` picks), marked if it writes."""
    conn = engine.connect() if files is None else files.connect(engine, write=write)
    if write:
        conn.execution_options(**{_WRITE: True})
    return conn


def store_files_fault(engine: Engine) -> StoreUnavailableError | None:
    """Why a write would be refused now whatever it wrote (a SQLite file replaced or not writable), or None."""
    files = _FILES.get(engine)
    return None if files is None else files.fault()


def dispose(engine: Engine) -> None:
    """Close the engine's pooled connections (and the read-only engine of its SQLite files)."""
    engine.dispose()
    files = _FILES.get(engine)
    if files is not None:
        files.dispose()


@contextmanager
def transaction(engine: Engine, *, write: bool) -> Iterator[Session]:
    """One short transaction: committed when the block ends, rolled back if it raises."""
    files = _FILES.get(engine)
    try:
        with _connect(engine, files, write=write) as conn:
            with Session(bind=conn, expire_on_commit=False, autoflush=True) as session, session.begin():
                yield session
                if write and files is not None:
                    session.flush()  # the statements first, so that the check is next to the COMMIT
                    files.check_index()  # the COMMIT writes the index
            if write and files is not None:
                files.check_same_file()  # a COMMIT into a file no path names any more is not acknowledged
    except (sa_exc.DBAPIError, sa_exc.TimeoutError, engine.dialect.loaded_dbapi.Error, UnicodeEncodeError) as e:
        _raise_fault(engine, e)
        raise


@contextmanager
def core_transaction(engine: Engine, *, write: bool) -> Iterator[Connection]:
    """``transaction`` without an ORM session: for hot paths that only run Core statements (a session's
    set-up, bookkeeping and ORM-level execution cost more than the statements themselves there)."""
    files = _FILES.get(engine)
    try:
        with _connect(engine, files, write=write) as conn:
            with conn.begin():
                yield conn
                if write and files is not None:
                    files.check_index()  # as in ``transaction``
            if write and files is not None:
                files.check_same_file()
    except (sa_exc.DBAPIError, sa_exc.TimeoutError, engine.dialect.loaded_dbapi.Error, UnicodeEncodeError) as e:
        _raise_fault(engine, e)
        raise


@contextmanager
def single_read(engine: Engine) -> Iterator[Connection]:
    """A connection for one read statement outside a transaction: on PostgreSQL (autocommit) one round trip
    instead of BEGIN, the statement and ROLLBACK. For the hot one-row reads that need no snapshot (a token's
    check on every request); anything reading two rows that must agree uses ``core_transaction``."""
    try:
        with _connect(engine, _FILES.get(engine), write=False) as conn:
            yield conn.execution_options(isolation_level="AUTOCOMMIT") if is_postgres(engine) else conn
    except (sa_exc.DBAPIError, sa_exc.TimeoutError, engine.dialect.loaded_dbapi.Error, UnicodeEncodeError) as e:
        _raise_fault(engine, e)
        raise


def _raise_fault(engine: Engine, e: BaseException) -> None:
    """Raise ``e``'s domain error, if it has one; an unreachable server also empties the connection pool, since
    after a failover every pooled connection points at the old primary (SQLAlchemy does this itself for errors
    it sees, but the hot paths run on the DB-API cursor, whose errors it never sees)."""
    fault = store_fault(e, engine.dialect.loaded_dbapi)
    if fault is None:
        return
    if isinstance(fault, StoreUnavailableError) and fault.reason == "unreachable":
        engine.dispose()
    raise fault from e


# SQLite's primary result codes (``sqlite_errorname`` minus any extended suffix): reason and transient.
_SQLITE = {
    "SQLITE_FULL": ("disk_full", False),
    "SQLITE_READONLY": ("read_only", False),
    "SQLITE_IOERR": ("io_error", False),
    "SQLITE_CANTOPEN": ("io_error", False),
    "SQLITE_CORRUPT": ("corrupt", False),
    "SQLITE_NOTADB": ("corrupt", False),
    "SQLITE_BUSY": ("busy", True),
    "SQLITE_LOCKED": ("busy", True),
}
# PostgreSQL SQLSTATEs (exact, then by class): reason and transient. A read-only transaction is a replica or
# a demoted primary, so a failover in progress.
_POSTGRES = {
    "53100": ("disk_full", False),
    "53300": ("busy", True),
    "25006": ("read_only", True),
    "57P01": ("unreachable", True),
    "57P02": ("unreachable", True),
    "57P03": ("unreachable", True),
    "25P03": ("unreachable", True),  # our idle transaction was ended (IDLE_IN_TRANSACTION_S, LEASE_IDLE_S): we stopped
    "57P05": ("unreachable", True),  # an idle session ended by the server's idle_session_timeout
    "08": ("unreachable", True),
}


def store_fault(e: BaseException, dbapi: Any) -> GpupoolError | None:
    """The domain error for a database failure, or None for one the use cases handle (constraint violations)."""
    if isinstance(e, sa_exc.TimeoutError):  # every pooled connection stayed in use for the pool's whole timeout
        return StoreUnavailableError(f"the database is unavailable (busy): {e}", reason="busy", transient=True)
    orig = e.orig if isinstance(e, sa_exc.DBAPIError) else e
    if isinstance(orig, (UnicodeEncodeError, dbapi.DataError)):
        return UnstorableInputError(f"the database cannot store this value: {orig}", source="body")
    if isinstance(orig, dbapi.IntegrityError) or not isinstance(orig, dbapi.Error):
        return None
    name = getattr(orig, "sqlite_errorname", None)
    if name is not None:
        found = _SQLITE.get("_".join(str(name).split("_")[:2]))
    else:
        state = getattr(orig, "sqlstate", None)
        found = None if state is None else _POSTGRES.get(state, _POSTGRES.get(state[:2]))
        if found is None and isinstance(orig, (dbapi.OperationalError, dbapi.InterfaceError)):
            found = ("unreachable", True)  # no SQLSTATE: the client lost or never had its connection
    if found is None:
        return None
    reason, transient = found
    return StoreUnavailableError(f"the database is unavailable ({reason}): {orig}", reason=reason, transient=transient)


def alembic_config() -> Config:
    """Alembic's configuration built in code: no alembic.ini is needed at run time."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


# pg_advisory_xact_lock's first key: the migrations' own lock class (the second is the schema's name hashed).
_MIGRATION_LOCK = 0x6770_6D67  # "gpmg"
# A migration's own idle-in-transaction limit: a migrator that stopped still frees the lock for the next starter.
MIGRATION_IDLE_S = 120


def migrate(engine: Engine, revision: str = "head") -> tuple[str | None, str | None]:
    """Bring the schema to ``revision`` in one transaction under a lock, so servers started at once on one
    database migrate it once: the first runs the migrations, the others wait for it, then find nothing to do.
    Returns the revision before and after (equal when there was nothing to do).

    PostgreSQL: a transaction-level advisory lock on the schema (held to the commit, so the next one reads the
    migrated ``alembic_version``); the schema is the migrations' target, so replicas share it whatever their
    URLs say. SQLite: ``BEGIN IMMEDIATE`` (the file's one write lock, waited for through the busy timeout); a
    deferred transaction would fail at once with ``database is locked`` when a second starter tries to write.
    A database that cannot be reached or written (the server's first contact with it) is a
    ``StoreUnavailableError`` with its reason, not a driver traceback.
    """
    try:
        with engine.connect() as conn:
            conn.execution_options(**{_WRITE: True})
            with conn.begin():
                if is_postgres(engine):
                    # Alembic reads its scripts between statements: on a loaded machine that outlasted the
                    # sessions' 5 s idle-in-transaction limit and the database ended the migration.
                    conn.execute(text(f"SET LOCAL idle_in_transaction_session_timeout = {MIGRATION_IDLE_S * 1000}"))
                    conn.execute(
                        text("SELECT pg_advisory_xact_lock(:k, hashtext(current_schema()))"), {"k": _MIGRATION_LOCK}
                    )
                before = MigrationContext.configure(conn).get_current_revision()
                cfg = alembic_config()
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
                after = MigrationContext.configure(conn).get_current_revision()
    except (sa_exc.DBAPIError, engine.dialect.loaded_dbapi.Error) as e:
        _raise_fault(engine, e)
        raise
    return before, after


def schema_drift(engine: Engine) -> list[Any]:
    """What ``alembic check`` would report: differences between the migrated schema and the row classes."""
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(ctx, Base.metadata))
