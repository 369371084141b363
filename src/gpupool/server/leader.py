"""Leader election: only the holder of the lock runs the scheduling loop.

PostgreSQL: a session-level ``pg_try_advisory_lock`` on a dedicated connection. The lock dies with the
session, so when the leader's process dies the database frees it and a standby takes it on its next try.
The leader re-checks its connection every cycle: a leader that lost its session stops scheduling at once.
SQLite: one server per database file, so that server is the leader.
"""

from __future__ import annotations

import contextlib
import logging
import zlib

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.exc import DBAPIError

from gpupool.store.engine import parse_url, postgres_url

log = logging.getLogger("gpupool.server.leader")


def lock_key(url: str) -> int:
    """One key per database and schema: replicas of one deployment share it; test databases do not collide."""
    return zlib.crc32(url.encode()) & 0x7FFFFFFF


class LeaderLock:
    def __init__(self, url: str) -> None:
        parsed = parse_url(url)
        self._postgres = parsed.get_backend_name() == "postgresql"
        self._key = lock_key(url)
        self._engine: Engine | None = create_engine(postgres_url(parsed)) if self._postgres else None
        self._conn: Connection | None = None
        self._held = not self._postgres

    @property
    def held(self) -> bool:
        return self._held

    def hold(self) -> bool:
        """True while this process is the leader: keeps the lock, or tries to take it."""
        if self._engine is None:
            return True
        try:
            if self._conn is None:
                self._conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            if self._held:
                self._conn.execute(text("SELECT 1"))  # the session (and so the lock) is still alive
                return True
            got = bool(self._conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": self._key}).scalar())
            if got:
                log.info("took the leader lock (key %d)", self._key)
            self._held = got
            return got
        except DBAPIError as e:
            log.warning("leader lock connection failed: %s", type(e).__name__)
            self._drop()
            return False

    def _drop(self) -> None:
        self._held = False
        if self._conn is not None:
            with contextlib.suppress(DBAPIError):
                self._conn.invalidate()
            self._conn = None

    def release(self) -> None:
        if self._conn is not None and self._held:
            with contextlib.suppress(DBAPIError):
                self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self._key})
        self._drop()
        self._held = not self._postgres
        if self._engine is not None:
            self._engine.dispose()
