"""Group commit: items of concurrent callers stored in one transaction, each caller answered with its own outcome.

One commit per request caps a write path at the database's commit rate (a WAL flush on PostgreSQL, the one write
lock on SQLite). Here callers queue their items and whoever holds a commit turn (at most ``writers`` at once)
takes everything queued (up to ``max_batch``) and stores it with one call of ``store``, which returns one
outcome per item, or a ``GpupoolError`` that refused that item alone. Each item's future is done only after the
commit that holds it, so an acknowledged item is durable as if stored alone. Under light load a batch is one
item: no waiting for company.

Callers queue items with ``enqueue`` and, on the event loop, await the futures (``stored``: the loop woken once
per caller, not per item); writer threads take the turn. They start with the first item and end after ``idle_s``
without one, so an idle use holds no thread and an owner never closed leaks none. (A second way, a caller on a
thread of its own taking the turn itself, is gone: at 300 nodes a writer thread's two wake-ups per report once
halved the launches acknowledged per second against it, but at 1,000 nodes a report waiting that way held a
beat worker for its commit, so a batch held at most as many reports as there were workers, and the reports
waiting on the loop instead carried more: docs/benchmarks.md, "Report intake".)

Failures: a batch the store refuses as a whole for one item's sake (a domain error: a job another replica
changed meanwhile) is stored again one item at a time, so that item alone fails. A database that fails a batch
for a passing reason (a failover, a lost connection, a busy file) gets the same batch again, with backoff, for
up to ``retry_s`` (0: not retried), ``store`` told that it retries (the first call may have committed); after
that, or for any other failure, every caller of the batch gets the error.

Backpressure: at most ``max_queued`` items wait for a commit; more are refused at once with ``full(n)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
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
        # More than one turn keeps a batch being prepared while another waits on the database's round trips and
        # commit flush (PostgreSQL); the store must settle two batches that touch the same rows.
        self._writers = max(1, writers)
        self._turn = threading.Semaphore(self._writers)
        self._max_batch = max_batch
        self._max_queued = max_queued
        self._retry_s = retry_s
        self._idle_s = idle_s
        self._cond = threading.Condition()  # guards the fields below; writer threads wait on it for items
        self._queue: deque[tuple[I, Future[O]]] = deque()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._queued = 0  # items taken and not yet answered
        self._stop = threading.Event()  # cuts a retry's backoff short at close
        self.batches = 0  # calls of ``store`` that committed (tests and benchmarks read it)

    def enqueue(self, items: Sequence[I]) -> list[Future[O]]:
        """Queue ``items`` for the writer threads; each future is done once the transaction holding its item
        committed, or with the error that refused it."""
        futs: list[Future[O]] = [Future() for _ in items]
        with self._cond:
            if self._closed:
                raise GpupoolError("the server is shutting down")
            if self._queued + len(items) > self._max_queued:
                raise self._full(self._queued)
            self._queued += len(items)
            self._queue.extend(zip(items, futs, strict=True))
            while len(self._threads) < self._writers:
                thread = threading.Thread(target=self._run, name=f"{self._name}-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
            self._cond.notify()
        return futs

    async def stored(self, items: Sequence[I]) -> list[Future[O]]:
        """``enqueue`` for a caller on the event loop: returns once every item's future is done (the loop woken
        once, by the last of them). Cancelled meanwhile, the items are stored all the same."""
        futs = self.enqueue(items)
        if not futs:
            return futs
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        left, lock = [len(futs)], threading.Lock()

        def finish() -> None:
            if not done.done():
                done.set_result(None)

        def one(_: Future[O]) -> None:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                    loop.call_soon_threadsafe(finish)

        for fut in futs:
            fut.add_done_callback(one)
        await done
        return futs

    def close(self) -> None:
        """Store what was queued, then end the writers; later items are refused."""
        with self._cond:
            self._closed = True
            threads = list(self._threads)
            self._cond.notify_all()
        self._stop.set()
        for thread in threads:
            thread.join(timeout=30)

    def _take(self) -> list[tuple[I, Future[O]]]:
        with self._cond:
            return [self._queue.popleft() for _ in range(min(self._max_batch, len(self._queue)))]

    def _run(self) -> None:
        """A writer thread: takes the turn whenever items wait; ends when idle for ``idle_s`` or closed."""
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    if not self._cond.wait(self._idle_s) and not self._queue:
                        break  # idle (a wake-up whose items another turn took is not)
                if not self._queue:
                    self._threads.remove(threading.current_thread())
                    return
            with self._turn:
                batch = self._take()
                if batch:
                    self._write(batch)

    def _write(self, batch: list[tuple[I, Future[O]]]) -> None:
        items = [item for item, _ in batch]
        outcomes: Sequence[O | Exception]
        try:
            outcomes = self._commit(items)
        except Exception as e:  # the database failed the whole batch: every caller learns it
            log.warning("%s: a batch of %d was not stored: %s", self._name, len(batch), e)
            outcomes = [e] * len(batch)
        with self._cond:
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
            with self._cond:
                self.batches += 1
            return outcomes
