"""The part every store use case shares: the engine, the clock, one-transaction helper, and the audit writer."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Self

from sqlalchemy import Connection, insert, select, text
from sqlalchemy.orm import Session

from gpupool.domain.errors import ParseError, StoreUnavailableError, UnknownNameError
from gpupool.store.engine import (
    core_transaction,
    dispose,
    is_postgres,
    make_engine,
    migrate,
    store_files_fault,
    transaction,
)
from gpupool.store.fencing import Fence, check_fence
from gpupool.store.rows import AuditRow, TenantRow


def dumps(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def loads(text: str, source: str) -> Any:
    """JSON from a column; a malformed document is a ParseError naming the record, not a driver traceback."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(f"stored JSON is malformed: {e.msg}", source=source, line=e.lineno) from None


@lru_cache(maxsize=4096)
def gpu_indices(text: str) -> tuple[int, ...]:
    """An allocation's stored GPU indices (a JSON list), parsed once per distinct text (a pure function of it:
    a host's few hundred subsets of its GPUs), since every host's ranks are read once per ``host_cache_s``."""
    indices = loads(text, "allocated GPUs")
    if not isinstance(indices, list):
        raise ParseError("stored GPU indices are not a JSON list", source="allocated GPUs")
    try:
        return tuple(int(g) for g in indices)
    except (TypeError, ValueError):
        raise ParseError("stored GPU indices are not integers", source="allocated GPUs") from None


class StoreBase:
    """Owns the engine. Thread-safe: every method opens its own short transaction on a pooled connection."""

    def __init__(self, url: str, *, clock: Callable[[], float] = time.time, busy_timeout_ms: int = 10_000) -> None:
        self.url = url
        self._engine = make_engine(url, busy_timeout_ms=busy_timeout_ms)
        self._clock = clock
        self._postgres = is_postgres(self._engine)
        # SQLite has one writer at a time anyway. Queueing this process's writers on a lock avoids SQLite's
        # busy handler, which sleeps in growing steps (up to 100 ms) and wastes most of a busy second.
        # Other processes on the same file still wait through busy_timeout.
        self._sqlite_writer = None if self._postgres else threading.Lock()
        # The outcome of the latest write transaction (see ``write_fault``): when it ended, and its fault if the
        # database could not take it.
        self._wrote_at = float("-inf")
        self._write_fault: StoreUnavailableError | None = None

    @property
    def concurrent_writes(self) -> bool:
        """Whether write transactions run side by side (PostgreSQL), or one at a time (SQLite's one lock)."""
        return self._postgres

    def migrate(self) -> tuple[str | None, str | None]:
        """Bring the schema to the newest migration (Alembic upgrade head) under a lock; safe to run on every
        start, by several servers at once. The revision before and after."""
        return migrate(self._engine)

    def close(self) -> None:
        dispose(self._engine)

    def write_fault(self, max_age_s: float = 1.0) -> StoreUnavailableError | None:
        """Why the latest write transaction failed (its reason), or None if it committed (or failed on its own
        data, which a working database refuses too).

        Real writes are the best witness: a full disk may still take a small write into reused log space
        while every submit fails. Without one in the last ``max_age_s`` a probe write is made: SQLite rewrites
        its header's ``user_version`` (unused by the schema), which meets a read-only file or a failing disk;
        PostgreSQL assigns a transaction id, which a replica or a demoted primary refuses. A SQLite file that
        every write would find replaced or unwritable is reported at once, whatever the latest write found.
        """
        files_fault = store_files_fault(self._engine)
        if files_fault is not None:
            return files_fault
        if time.monotonic() - self._wrote_at > max_age_s:
            try:
                with self._core_tx(write=True) as conn:
                    if self._postgres:
                        conn.execute(text("SELECT txid_current()"))
                    else:
                        version = int(conn.execute(text("PRAGMA user_version")).scalar_one())
                        conn.execute(text(f"PRAGMA user_version = {(version + 1) % 1_000_000}"))
            except StoreUnavailableError:
                pass  # recorded by _core_tx
        return self._write_fault

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self, *, write: bool, fence: Fence | None = None) -> Iterator[Session]:
        """One short transaction in an ORM session. ``fence``: a write of the scheduling loop, refused
        (StaleLeaderError) unless that lease is still the current one (its check is the first statement)."""
        with self._writing(write), transaction(self._engine, write=write) as session:
            if fence is not None:
                check_fence(session, fence, self._postgres)
            yield session

    @contextmanager
    def _core_tx(self, *, write: bool, fence: Fence | None = None) -> Iterator[Connection]:
        """``_tx`` for Core statements only: a bare connection in one transaction, no ORM session."""
        with self._writing(write), core_transaction(self._engine, write=write) as conn:
            if fence is not None:
                check_fence(conn, fence, self._postgres)
            yield conn

    @contextmanager
    def _writing(self, write: bool) -> Iterator[None]:
        """Around a write transaction: its outcome recorded, and on SQLite this process's writers queued."""
        if not write:
            yield
        elif self._sqlite_writer is not None:
            with self._track(), self._sqlite_writer:
                yield
        else:
            with self._track():
                yield

    @contextmanager
    def _track(self) -> Iterator[None]:
        """Record a write transaction's outcome for ``write_fault``."""
        try:
            yield
        except StoreUnavailableError as e:
            self._write_fault = e
            raise
        except BaseException:
            self._write_fault = None
            raise
        else:
            self._write_fault = None
        finally:
            self._wrote_at = time.monotonic()

    def _audit(self, s: Session, actor: str, action: str, subject: str, data: dict[str, Any], at_s: float) -> None:
        s.execute(insert(AuditRow).values(at_s=at_s, actor=actor, action=action, subject=subject, data=dumps(data)))

    @staticmethod
    def _require_tenant(s: Session, tenant: str) -> None:
        if s.scalar(select(TenantRow.name).where(TenantRow.name == tenant)) is None:
            raise UnknownNameError(f"unknown tenant {tenant!r}")
