"""Group commit: items of concurrent callers stored in one transaction, each caller answered with its own outcome.

One commit per request caps a write path at the database's commit rate (a WAL flush on PostgreSQL, the one write
lock on SQLite). Here callers queue their items and await futures; a writer thread takes everything queued while
the previous batch was being written (up to ``max_batch``) and stores it with one call of ``store``, which returns
one outcome per item, or a ``GpupoolError`` that refused that item alone. A future is done only after the commit
that holds its item, so an acknowledged item is durable as if stored alone. Under light load a batch is one
item: no waiting for company. Async callers (the submit route) await the future on the event loop; threads (the
agents' beat workers) block on it.

Failures: a batch the store refuses as a whole for one item's sake (a domain error: a job another replica
changed meanwhile) is stored again one item at a time, so that item alone fails. A database that fails a batch
for a passing reason (a failover, a lost connection, a busy file) gets the same batch again, with backoff, for
up to ``retry_s`` (0: not retried), ``store`` told that it retries (the first call may have committed); after
that, or for any other failure, every caller of the batch gets the error.

Backpressure: at most ``max_queued`` items wait for a commit; more are refused at once with ``full(n)``. The
writers start with the first item and end after ``idle_s`` without one (the next item starts them again), so an
idle use holds no thread and an owner that is never closed leaks none.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Generic, TypeVar

from gpupool.domain.errors import GpupoolError, StoreUnavailableError

log = logging.getLogger("gpupool.server.groupcommit")

I = TypeVar("I")  # noqa: E741 - an item as queued
O = TypeVar("O")  # noqa: E741 - its outcome once stored

# (items, retrying) -> one outcome or refusing error per item, stored in one transaction.
StoreFn = Callable[[list[I], bool], Sequence[O | GpupoolError]]


class GroupCommit(Generic[I, O]):
    def __init__(
        self,
        store: StoreFn[I, O],
        *,
        name: str,
        full: Callable[[int], Exception],
        writers: int = 1,
        max_batch: int = 512,
        max_queued: int = 20_000,
        retry_s: float = 0.0,
        idle_s: float = 5.0,
    ) -> None:
        self._store = store
        self._name = name  # of the writer threads
        self._full = full
        # More than one writer keeps a batch being prepared while another waits on the database's round trips
        # and commit flush (PostgreSQL); the store must settle two batches that touch the same rows.
        self._writers = max(1, writers)
        self._max_batch = max_batch
        self._max_queued = max_queued
        self._retry_s = retry_s
        self._idle_s = idle_s
        self._queue: queue.SimpleQueue[tuple[I, Future[O]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._queued = 0  # items taken and not yet answered
        self._stop = threading.Event()  # cuts a retry's backoff short at close
        self.batches = 0  # calls of ``store`` that committed (tests and benchmarks read it)

    def enqueue(self, items: Sequence[I]) -> list[Future[O]]:
        """Queue ``items`` (together, so that they share a batch while it has room); each future is done once
        the transaction holding its item committed, or with the error that refused it."""
        futs: list[Future[O]] = [Future() for _ in items]
        if not futs:
            return futs
        with self._lock:
            if self._closed:
                raise GpupoolError("the server is shutting down")
            if self._queued + len(items) > self._max_queued:
                raise self._full(self._queued)
            self._queued += len(items)
            while len(self._threads) < self._writers:
                thread = threading.Thread(target=self._run, name=f"{self._name}-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
            for item, fut in zip(items, futs, strict=True):
                self._queue.put((item, fut))
        return futs

    def close(self) -> None:
        """Store what was queued, then end the writers; later items are refused."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
            for _ in threads:
                self._queue.put(None)  # one each: a writer ends at the first it takes
        self._stop.set()
        for thread in threads:
            thread.join(timeout=30)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            try:
                first = self._queue.get(timeout=self._idle_s)
            except queue.Empty:
                with self._lock:  # enqueue puts under this lock: an empty queue here stays this writer's to leave
                    if self._queue.empty():
                        self._threads.remove(threading.current_thread())
                        return
                continue
            if first is None:
                return
            batch = [first]
            while len(batch) < self._max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True  # finish what was queued before the close, then end
                    break
                batch.append(item)
            self._write(batch)

    def _write(self, batch: list[tuple[I, Future[O]]]) -> None:
        items = [item for item, _ in batch]
        outcomes: Sequence[O | Exception]
        try:
            outcomes = self._commit(items)
        except Exception as e:  # the database failed the whole batch: every caller learns it
            log.warning("%s: a batch of %d was not stored: %s", self._name, len(batch), e)
            outcomes = [e] * len(batch)
        with self._lock:
            self._queued -= len(batch)
        for (_, fut), out in zip(batch, outcomes, strict=True):
            if isinstance(out, Exception):
                fut.set_exception(out)
            else:
                fut.set_result(out)

    def _commit(self, items: list[I]) -> Sequence[O | GpupoolError]:
        """The batch stored, or one item at a time if refused for one item's sake."""
        try:
            return self._retried(items)
        except StoreUnavailableError:
            raise
        except GpupoolError as e:
            if len(items) == 1:
                return [e]
            log.info("%s: a batch of %d was refused (%s): storing them one at a time", self._name, len(items), e)
            return [out for item in items for out in self._commit([item])]

    def _retried(self, items: list[I]) -> Sequence[O | GpupoolError]:
        """``store``, called again while the database's failure is a passing one, for up to ``retry_s``."""
        deadline = time.monotonic() + self._retry_s
        backoff_s = 0.05
        retrying = False
        while True:
            try:
                outcomes = self._store(items, retrying)
            except StoreUnavailableError as e:
                retrying = True  # the commit may have happened: the store is told
                if not e.transient or time.monotonic() + backoff_s > deadline or self._stop.is_set():
                    raise
                log.warning("the database is unavailable (%s); trying the batch again in %.2f s", e.reason, backoff_s)
                self._stop.wait(backoff_s)
                backoff_s = min(2 * backoff_s, 1.0)
                continue
            with self._lock:
                self.batches += 1
            return outcomes
