"""Submissions' group commit: concurrent submits share one transaction (``groupcommit.GroupCommit`` over
``ServerOps.submit_many``), each caller answered after the commit with its own job.

Idempotency keys are checked inside the batch's transaction (a repeat within one batch gets the first job), and
``submit_many`` recognises, when the batch is given again after a passing database failure, the submissions an
unanswered commit stored. After each commit the batch's new jobs go to ``on_stored`` (the scheduling loop),
which folds them into its state without reading them back.

Backpressure: at most ``max_queued`` submissions wait for a commit (more are refused at once with
SUBMIT_QUEUE_FULL, a 503), and a tenant may have at most ``max_pending_per_tenant`` pending jobs
(TENANT_PENDING_LIMIT, a 429). That count is read from the store at most ``count_every_s`` ago plus what this
writer stored since, so with several replicas a tenant may pass the cap by what the others took meanwhile.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future

from gpupool.domain.errors import GpupoolError, SubmitQueueFullError
from gpupool.server.groupcommit import GroupCommit
from gpupool.store import JobRecord
from gpupool.store.server_ops import ServerOps, Submission

log = logging.getLogger("gpupool.server.submits")

Stored = tuple[JobRecord, bool]  # the job (the first of an array), and whether this submission created it


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
        self._on_stored = on_stored  # told each batch's new jobs after their commit (the scheduling loop)
        self._cap = max_pending_per_tenant  # 0: no cap
        self._count_every_s = count_every_s
        self._lock = threading.Lock()  # the counts below: more than one writer stores at once
        self._counted_at = float("-inf")
        self._pending: Counter[str] = Counter()  # per tenant: the last count plus what this writer stored since
        self._commit: GroupCommit[Submission, Stored] = GroupCommit(
            self._store,
            name="gpupool-submits",
            full=lambda n: SubmitQueueFullError(f"{n} submissions are waiting for the database; retry shortly"),
            writers=writers,  # a key stored by two batches at once is settled by the unique constraint
            max_batch=max_batch,
            max_queued=max_queued,
            retry_s=retry_s,
        )

    @property
    def batches(self) -> int:
        """Transactions that stored submissions (tests and the benchmark read it)."""
        return self._commit.batches

    def submit(self, sub: Submission) -> Stored:
        """Store ``sub`` (see ``ServerOps.submit``); returns after its transaction committed."""
        return self.enqueue(sub).result()

    def enqueue(self, sub: Submission) -> Future[Stored]:
        """Queue ``sub``; the future is done once its transaction committed (or refused it)."""
        return self._commit.enqueue([sub])[0]

    def close(self) -> None:
        self._commit.close()

    def _store(self, subs: list[Submission], retrying: bool) -> list[Stored | GpupoolError]:
        """``submit_many`` under the tenant cap; the new jobs handed to the loop."""
        room = self._room(subs)
        results = self._ops.submit_many(subs, room, retrying=retrying)
        created = [
            (sub, res[0]) for sub, res in zip(subs, results, strict=True) if not isinstance(res, Exception) and res[1]
        ]
        if room is not None:
            with self._lock:
                for sub, rec in created:
                    self._pending[rec.spec.tenant] += len(sub.jobs)  # an array: every element
        if self._on_stored is not None and created:
            try:
                self._on_stored([r for sub, rec in created for r in _records(sub, rec)])
            except Exception:  # a hint lost costs the loop a read; a writer lost would strand every caller
                log.exception("handing stored jobs on failed")
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


def _records(sub: Submission, first: JobRecord) -> list[JobRecord]:
    """The records of what ``sub`` created, ``first`` the stored record of its first job: an array's every
    element (stored with it in one transaction, pending at version 1, the key on the first only), so the loop
    folds the whole array in from the hint, not from a read of every element's spec."""
    if not sub.elements:
        return [first]
    return [first] + [dataclasses.replace(first, spec=spec, idempotency_key=None) for spec in sub.elements[1:]]
