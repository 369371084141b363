"""The SQLite files under a running server: which connection a transaction may use, and when a write counts.

Write-ahead-log mode keeps its index in the ``-shm`` file, mapped shared into every process that uses the
database, and SQLite writes into that mapping from readers too (a reader's first statement after a commit
records its read mark there, and ``BEGIN IMMEDIATE`` does the same). The kernel kills a process with SIGBUS
when it writes to a mapping of a file that can no longer be written: ``chattr +i`` write-protects every mapping
of the file at once, dirty pages included (seen on Linux 6.18, ext4), and a truncated ``-shm`` faults on any
access. Nothing in the process survives that, so the store never touches the index of files it cannot write:

- Before every transaction the ``-shm`` is checked (``os.access``: an immutable file, a read-only mount or
  mode). Unwritable: a write is refused (503 ``read_only``) before it begins, and again just before its COMMIT
  (which writes the index; a freeze during the transaction's statements is caught there), and a read is made
  on a connection of its own that never maps the index (``vfs=unix-none``, read-only, ``locking_mode=EXCLUSIVE``:
  SQLite then builds the index in its own heap from the ``-wal``), so acknowledged jobs stay readable. The
  pooled connections are left open meanwhile: closing the last one would checkpoint, which writes the index.
- A replaced database file (a copy renamed over it) is a new inode. SQLite keeps one index per inode, and a
  connection to the new inode would take itself for the first user of the ``-shm`` and truncate it under the
  older connections (SIGBUS). So no connection is opened to another inode than the first. The pooled
  connections would go on committing for the old inode, which no path names any more (into the ``-wal``,
  which keeps its name: a restarted server reads those frames onto the new file, or a checkpoint copies them
  into the old inode and they are gone). So a write is refused before it begins, and checked again after its
  COMMIT: one that committed after the rename is answered 503 ``replaced``, not acknowledged (the client's
  retry with its Idempotency-Key settles whether it is stored).

What remains out of reach (docs/operations.md): a file made unwritable while a transaction is between its
check and its next write to the index still faults (a read's first statement; a COMMIT and the checkpoint after
it), as does a truncated ``-shm``, and so does closing the last connection while the files are immutable
(SQLite checkpoints on close; Python 3.11's ``sqlite3`` cannot turn that off). A fault leaves every thread's
stack in the log (faulthandler).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from urllib.parse import quote

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.pool import NullPool

from gpupool.domain.errors import StoreUnavailableError

# A connection that took longer than this to come from the pool (all of them busy) is checked again: the
# files may have changed while it waited.
_RECHECK_AFTER_S = 0.001


class SqliteFiles:
    """The checks above for the database file at ``path`` (and its ``-shm``), and the read-only engine."""

    def __init__(self, path: str, busy_timeout_ms: int) -> None:
        self.path = path
        self._shm = f"{path}-shm"
        self._busy_timeout_ms = busy_timeout_ms
        self._first: tuple[int, int] | None = None  # (device, inode) of the file the first connection opened
        self._reader: Engine | None = None
        self._lock = threading.Lock()

    def fault(self) -> StoreUnavailableError | None:
        """Why a write would be refused now (the file replaced, the index unwritable), else None."""
        try:
            self.check_same_file()
            self.check_index()
        except StoreUnavailableError as e:
            return e
        return None

    def check_same_file(self) -> None:
        """Refuse a connection or a write once ``path`` names another file than the one first opened here."""
        st = os.stat(self.path)
        here = (st.st_dev, st.st_ino)
        if self._first is None:
            self._first = here
        elif self._first != here:
            raise StoreUnavailableError(
                f"the database file {self.path} was replaced while this server had it open; restart the server "
                "to use it",
                reason="replaced",
                transient=False,
            )

    def connect(self, engine: Engine, *, write: bool) -> Connection:
        """A connection for one transaction: ``engine``'s, or for a read while the index cannot be written, one
        that never maps it. A write is refused here, before its BEGIN IMMEDIATE, once the file was replaced or
        while the index is unwritable."""
        if write:
            self.check_same_file()
        if not self._index_writable():
            if write:
                self.check_index()
            return self._read_only_engine().connect()
        asked = time.monotonic()
        conn = engine.connect()
        if time.monotonic() - asked > _RECHECK_AFTER_S and not self._index_writable():
            conn.close()  # nothing ran on it yet: no transaction, no read mark
            return self.connect(engine, write=write)
        return conn

    def _index_writable(self) -> bool:
        """Whether this process may write the ``-shm`` (a missing one is made by the next connection)."""
        return os.access(self._shm, os.W_OK) or not os.path.lexists(self._shm)

    def check_index(self) -> None:
        """Refuse a write while the index cannot be written (before its BEGIN, and again before its COMMIT)."""
        if not self._index_writable():
            raise StoreUnavailableError(
                f"the database's index {self._shm} cannot be written (read-only or immutable); writes wait for it",
                reason="read_only",
                transient=False,
            )

    def _read_only_engine(self) -> Engine:
        with self._lock:
            if self._reader is None:
                # No pool: each transaction reads the log afresh (a fault mode; the log is at most a few MB).
                self._reader = create_engine("sqlite://", creator=self._connect_read_only, poolclass=NullPool)
                event.listen(self._reader, "begin", lambda conn: conn.exec_driver_sql("BEGIN"))
            return self._reader

    def _connect_read_only(self) -> sqlite3.Connection:
        self.check_same_file()
        # unix-none takes no file locks and has no shared-memory index: in exclusive locking mode SQLite then
        # keeps the index in its heap, rebuilt from the -wal when the connection first reads. Taking no locks is
        # safe as long as nothing writes, and nothing that follows these rules writes while the index cannot be
        # written (this connection cannot: mode=ro).
        uri = f"file:{quote(self.path)}?vfs=unix-none&mode=ro"
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        for pragma in ("locking_mode=EXCLUSIVE", "mmap_size=0", f"busy_timeout={int(self._busy_timeout_ms)}"):
            conn.execute(f"PRAGMA {pragma}")
        return conn

    def dispose(self) -> None:
        with self._lock:
            if self._reader is not None:
                self._reader.dispose()
                self._reader = None
