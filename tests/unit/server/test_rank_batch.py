"""The rank reports' group commit (``RankBatcher`` over ``GroupCommit``): callers that arrive while a commit runs share the next one, each
gets the outcomes of its own reports; a batch refused for one report's sake is stored one report at a time;
a database away fails every caller of the batch."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import pytest

from gpupool.domain.errors import GpupoolError, StaleVersionError, StoreUnavailableError
from gpupool.domain.states import JobState
from gpupool.server.rankbatch import RankBatcher
from gpupool.store.ranks import RankOutcome, RankReport


def _r(job: str) -> tuple[RankReport, str]:
    return RankReport(job, 1, 0, "h1", "running", None), "agent:h1"


class FakeStore:
    """``record_ranks`` that holds its first call until ``release`` is set, records every batch, and refuses a
    batch holding the job ``bad`` (as a stale version would) or every batch while ``away``."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.away = False

    def record_ranks(self, reports: Sequence[tuple[RankReport, str]]) -> list[RankOutcome]:
        jobs = [r.job_id for r, _ in reports]
        if not self.batches:
            self.entered.set()
            assert self.release.wait(10)
        self.batches.append(jobs)
        if self.away:
            raise StoreUnavailableError("database away", reason="unreachable", transient=True)
        if "bad" in jobs:
            raise StaleVersionError("job bad: changed by another writer")
        return [RankOutcome(True, True, JobState.RUNNING) for _ in jobs]


def _wait_for(cond: object, what: str) -> None:
    deadline = time.monotonic() + 10
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def _callers(batcher: RankBatcher, store: FakeStore, groups: list[list[str]]) -> list[object]:
    """The first group's reports are taken by the writer and held in its commit; the others queue behind it;
    then the commit is let go. Each caller's result (outcomes or the exception raised), in group order."""
    results: list[object] = [None] * len(groups)

    def call(i: int) -> None:
        try:
            results[i] = asyncio.run(batcher.stored([_r(j) for j in groups[i]]))
        except GpupoolError as e:
            results[i] = e

    threads = [threading.Thread(target=call, args=(0,))]
    threads[0].start()
    assert store.entered.wait(10)
    for i in range(1, len(groups)):
        threads.append(threading.Thread(target=call, args=(i,)))
        threads[-1].start()
    queued = sum(len(g) for g in groups[1:])
    _wait_for(lambda: len(batcher._commit._queue) == queued, "the callers to queue")
    store.release.set()
    for t in threads:
        t.join(10)
    return results


def test_callers_queued_behind_a_commit_share_the_next_one_and_get_their_own_outcomes() -> None:
    store = FakeStore()
    batcher = RankBatcher(store.record_ranks)
    results = _callers(batcher, store, [["j0"], ["j1", "j2"], ["j3"]])
    assert store.batches[0] == ["j0"]
    assert sorted(store.batches[1]) == ["j1", "j2", "j3"]  # one transaction for both queued callers
    assert len(store.batches) == 2 and batcher.batches == 2
    assert [len(r) for r in results] == [1, 2, 1]  # type: ignore[arg-type]


def test_a_batch_refused_for_one_report_is_stored_one_at_a_time() -> None:
    store = FakeStore()
    batcher = RankBatcher(store.record_ranks)
    results = _callers(batcher, store, [["j0"], ["j1", "bad"], ["j3"]])
    refused_batch = store.batches[1]
    assert sorted(refused_batch) == ["bad", "j1", "j3"]
    assert sorted(map(tuple, store.batches[2:])) == [("bad",), ("j1",), ("j3",)]
    one, two, three = results
    assert isinstance(one, list) and isinstance(three, list) and isinstance(three[0], RankOutcome)
    assert isinstance(two, list) and isinstance(two[0], RankOutcome) and isinstance(two[1], StaleVersionError)


def test_a_database_away_fails_every_caller_of_the_batch() -> None:
    store = FakeStore()
    store.away = True
    batcher = RankBatcher(store.record_ranks)
    results = _callers(batcher, store, [["j0"], ["j1"], ["j2"]])
    assert all(isinstance(r, StoreUnavailableError) for r in results)
    assert len(store.batches) == 2  # not retried one at a time: every report in it is as unstored as the rest
    with pytest.raises(StoreUnavailableError):
        asyncio.run(batcher.stored([_r("j4")]))


def test_a_report_request_awaiting_on_the_event_loop_gets_its_own_outcomes_or_the_batch_error() -> None:
    store = FakeStore()
    store.release.set()
    batcher = RankBatcher(store.record_ranks)
    try:
        outs = asyncio.run(batcher.stored([_r("j0"), _r("bad")]))
        assert isinstance(outs[0], RankOutcome) and isinstance(outs[1], StaleVersionError)  # refused alone
        store.away = True
        with pytest.raises(StoreUnavailableError):
            asyncio.run(batcher.stored([_r("j1")]))
    finally:
        batcher.close()
