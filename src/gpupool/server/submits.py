"""Group commit for submissions: concurrent submits share one transaction, each caller gets its own answer.

One commit per submit caps throughput at the database's commit rate (a WAL flush on PostgreSQL, the one write
lock on SQLite). Here requests hand their submission to a writer thread and await its future; the writer takes
everything queued while the previous batch was being written and stores it with ``ServerOps.submit_many`` in
one transaction. A caller is answered only after that commit, so an acknowledged job is durable exactly as
before, and idempotency keys are checked inside the same transaction (a repeat within one batch gets the
first job). Under light load a batch is one submission: no waiting for company. After each commit the
writer hands the batch's new jobs to ``on_stored`` (the scheduling loop), which folds them into its state
without reading them back.

Backpressure: at most ``max_queued`` submissions wait for a commit (more are refused at once with
SUBMIT_QUEUE_FULL, a 503), and a tenant may have at most ``max_pending_per_tenant`` pending jobs
(TENANT_PENDING_LIMIT, a 429). That count is read from the store at most ``count_every_s`` ago plus what this
writer stored since, so with several replicas a tenant may pass the cap by what the others took meanwhile.
A database that fails a batch for a passing reason (a failover, a lost connection, a busy file) gets the same
batch again, with backoff, for up to ``retry_s``; then every caller gets the error (a 503). Retrying is safe:
``submit_many`` recognises the submissions an unanswered commit stored.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future

from gpupool.domain.errors import GpupoolError, StoreUnavailableError, SubmitQueueFullError
from gpupool.store import JobRecord
from gpupool.store.server_ops import ServerOps, Submission

log = logging.getLogger("gpupool.server.submits")

_Item = tuple[Submission, "Future[tuple[JobRecord, bool]]"]


class SubmitWriter:
    def __init__(
        self,
        ops: ServerOps,
        *,
        max_batch: int = 512,
        on_stored: Callable[[list[JobRecord]], None] | None = None,
        writers: int = 1,
        max_queued: int = 20_000,
        max_pending_per_tenant: int = 0,
        count_every_s: float = 1.0,
        retry_s: float = 10.0,
    ) -> None:
        self._ops = ops
        # More than one writer keeps a batch being prepared while another waits on the database's round trips
        # and commit flush (PostgreSQL); a key stored by two batches at once is settled by the unique constraint.
        self._writers = max(1, writers)
        self._on_stored = on_stored  # told each batch's new jobs after their commit (the scheduling loop)
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._queued = 0  # submissions taken and not yet answered (the queue's length without its sentinels)
        self._max_queued = max_queued
        self._cap = max_pending_per_tenant  # 0: no cap
        self._count_every_s = count_every_s
        self._counted_at = float("-inf")
        self._pending: Counter[str] = Counter()  # per tenant: the last count plus what this writer stored since
        self._retry_s = retry_s
        self._stop = threading.Event()  # cuts a retry's backoff short at close
        self.batches = 0  # how many transactions stored submissions (tests and the benchmark read it)

    def submit(self, sub: Submission) -> tuple[JobRecord, bool]:
        """Store ``sub`` (see ``ServerOps.submit``); returns after its transaction committed."""
        return self.enqueue(sub).result()

    def enqueue(self, sub: Submission) -> Future[tuple[JobRecord, bool]]:
        """Queue ``sub``; the future is done once its transaction committed (or refused it)."""
        fut: Future[tuple[JobRecord, bool]] = Future()
        with self._lock:
            if self._closed:
                raise GpupoolError("the server is shutting down")
            if self._queued >= self._max_queued:
                raise SubmitQueueFullError(f"{self._queued} submissions are waiting for the database; retry shortly")
            self._queued += 1
            if not self._threads:
                for i in range(self._writers):
                    thread = threading.Thread(target=self._run, name=f"gpupool-submits-{i}", daemon=True)
                    thread.start()
                    self._threads.append(thread)
            self._queue.put((sub, fut))
        return fut

    def close(self) -> None:
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        self._stop.set()
        for _ in threads:
            self._queue.put(None)  # one each: a writer ends at the first it takes
        for thread in threads:
            thread.join(timeout=30)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
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

    def _write(self, batch: list[_Item]) -> None:
        subs = [sub for sub, _ in batch]
        try:
            results = self._store(subs)
        except Exception as e:  # the database failed the whole batch: every caller learns it, none is stored
            log.warning("a batch of %d submissions was not stored: %s", len(batch), e)
            self._answer(batch, [e] * len(batch))
            return
        with self._lock:
            self.batches += 1
        if self._on_stored is not None:
            created = [
                rec
                for sub, res in zip(subs, results, strict=True)
                if not isinstance(res, Exception) and res[1]
                for rec in _records(sub, res[0])
            ]
            if created:
                try:
                    self._on_stored(created)
                except Exception:  # a hint lost costs the loop a read; a writer lost would strand every caller
                    log.exception("handing stored jobs on failed")
        self._answer(batch, results)

    def _store(self, subs: list[Submission]) -> list[tuple[JobRecord, bool] | GpupoolError]:
        """``submit_many`` under the tenant cap, tried again while the database's failure is a passing one."""
        deadline = time.monotonic() + self._retry_s
        backoff_s = 0.05
        retrying = False
        while True:
            try:
                room = self._room(subs)
                results = self._ops.submit_many(subs, room, retrying=retrying)
            except StoreUnavailableError as e:
                retrying = True  # the commit may have happened: see submit_many
                if not e.transient or time.monotonic() + backoff_s > deadline or self._stop.is_set():
                    raise
                log.warning("the database is unavailable (%s); trying the batch again in %.2f s", e.reason, backoff_s)
                self._stop.wait(backoff_s)
                backoff_s = min(2 * backoff_s, 1.0)
                continue
            if room is not None:
                with self._lock:
                    for sub, res in zip(subs, results, strict=True):
                        if not isinstance(res, Exception) and res[1]:
                            self._pending[res[0].spec.tenant] += len(sub.jobs)  # an array: every element
            return results

    def _room(self, subs: list[Submission]) -> dict[str, int] | None:
        """How many more pending jobs each tenant of the batch may have, or None without a cap."""
        if self._cap <= 0:
            return None
        if time.monotonic() - self._counted_at >= self._count_every_s:
            counts = self._ops.pending_counts()  # outside the lock: the other writer may store meanwhile
            with self._lock:
                self._pending = Counter(counts)
                self._counted_at = time.monotonic()
        with self._lock:
            return {t: self._cap - self._pending[t] for t in {sub.spec.tenant for sub in subs}}

    def _answer(
        self, batch: list[_Item], results: list[tuple[JobRecord, bool] | GpupoolError] | list[Exception]
    ) -> None:
        with self._lock:
            self._queued -= len(batch)
        for (_, fut), res in zip(batch, results, strict=True):
            if isinstance(res, Exception):
                fut.set_exception(res)
            else:
                fut.set_result(res)


def _records(sub: Submission, first: JobRecord) -> list[JobRecord]:
    """The records of what ``sub`` created, ``first`` the stored record of its first job: an array's every
    element (stored with it in one transaction, pending at version 1, the key on the first only), so the loop
    folds the whole array in from the hint, not from a read of every element's spec."""
    if not sub.elements:
        return [first]
    return [first] + [dataclasses.replace(first, spec=spec, idempotency_key=None) for spec in sub.elements[1:]]
