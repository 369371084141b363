"""Group commit for submissions: concurrent submits share one transaction, each caller gets its own answer.

One commit per submit caps throughput at the database's commit rate (a WAL flush on PostgreSQL, the one write
lock on SQLite). Here requests hand their submission to a writer thread and await its future; the writer takes
everything queued while the previous batch was being written and stores it with ``ServerOps.submit_many`` in
one transaction. A caller is answered only after that commit, so an acknowledged job is durable exactly as
before, and idempotency keys are checked inside the same transaction (a repeat within one batch gets the
first job). Under light load a batch is one submission: no waiting for company. After each commit the
writer hands the batch's new jobs to ``on_stored`` (the scheduling loop), which folds them into its state
without reading them back.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future

from gpupool.domain.errors import GpupoolError
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
        try:
            results = self._ops.submit_many([sub for sub, _ in batch])
        except Exception as e:  # the database failed the whole batch: every caller learns it, none is stored
            log.warning("a batch of %d submissions was not stored: %s", len(batch), e)
            for _, fut in batch:
                fut.set_exception(e)
            return
        with self._lock:
            self.batches += 1
        if self._on_stored is not None:
            created = [res[0] for res in results if not isinstance(res, Exception) and res[1]]
            if created:
                try:
                    self._on_stored(created)
                except Exception:  # a hint lost costs the loop a read; a writer lost would strand every caller
                    log.exception("handing stored jobs on failed")
        for (_, fut), res in zip(batch, results, strict=True):
            if isinstance(res, Exception):
                fut.set_exception(res)
            else:
                fut.set_result(res)
