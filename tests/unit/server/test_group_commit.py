"""The one group commit (``GroupCommit``) on its own, with a store in memory: a full queue refuses at once, a passing
database failure is tried again (the store told it retries), an item refused alone fails alone, writers end when
idle and start again with the next item, and a close stores what was queued before it. (Its two uses:
``test_rank_batch.py`` here, the submit writer in ``tests/integration/server``.)"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from gpupool.domain.errors import GpupoolError, InputError, StoreUnavailableError, SubmitQueueFullError
from gpupool.server.groupcommit import GroupCommit


class Store:
    """Stores ints (doubled), refuses a negative one alone, fails the next ``away`` calls as a database away,
    and holds every call while ``gate`` is clear."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[int], bool]] = []
        self.away = 0
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, items: list[int], retrying: bool) -> list[int | GpupoolError]:
        assert self.gate.wait(10)
        self.calls.append((list(items), retrying))
        if self.away:
            self.away -= 1
            raise StoreUnavailableError("database away", reason="unreachable", transient=True)
        return [InputError("negative") if i < 0 else 2 * i for i in items]


def _gc(store: Store, **kw: object) -> GroupCommit[int, int]:
    return GroupCommit(store, name="test-gc", full=lambda n: SubmitQueueFullError(f"{n} waiting"), **kw)  # type: ignore[arg-type]


def _wait_for(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def test_a_full_queue_refuses_at_once_and_has_room_again_once_answered() -> None:
    store = Store()
    store.gate.clear()
    gc = _gc(store, max_queued=3)
    try:
        held = gc.enqueue([1, 2, 3])
        with pytest.raises(SubmitQueueFullError):
            gc.enqueue([4])
        assert not any(f.done() for f in held)
        store.gate.set()
        assert [f.result(10) for f in held] == [2, 4, 6]
        assert gc.enqueue([5])[0].result(10) == 10
    finally:
        store.gate.set()
        gc.close()


def test_a_passing_failure_is_tried_again_and_the_store_is_told_it_retries() -> None:
    store = Store()
    store.away = 2
    gc = _gc(store, retry_s=10.0)
    try:
        assert gc.enqueue([1])[0].result(10) == 2
    finally:
        gc.close()
    assert [r for _, r in store.calls] == [False, True, True]
    assert gc.batches == 1


def test_without_retry_time_a_database_away_fails_every_item_and_an_item_refused_alone_fails_alone() -> None:
    store = Store()
    store.away = 1
    gc = _gc(store)
    try:
        futs = gc.enqueue([1, 2])
        assert all(isinstance(f.exception(10), StoreUnavailableError) for f in futs)
        good, bad = gc.enqueue([3, -1])
        assert good.result(10) == 6 and isinstance(bad.exception(10), InputError)
    finally:
        gc.close()


def test_idle_writers_end_and_the_next_item_starts_one_again() -> None:
    gc = _gc(Store(), writers=2, idle_s=0.01)
    try:
        assert gc.enqueue([1])[0].result(10) == 2
        _wait_for(lambda: not gc._threads, "the idle writers to end")
        assert gc.enqueue([2])[0].result(10) == 4
    finally:
        gc.close()


def test_a_close_stores_what_was_queued_and_refuses_what_comes_after() -> None:
    store = Store()
    store.gate.clear()
    gc = _gc(store)
    futs = gc.enqueue([1, 2, 3])
    closing = threading.Thread(target=gc.close)
    closing.start()
    _wait_for(lambda: gc._closed, "the close")
    with pytest.raises(GpupoolError, match="shutting down"):
        gc.enqueue([4])
    store.gate.set()
    closing.join(10)
    assert [f.result(0) for f in futs] == [2, 4, 6]


def test_callers_awaiting_on_the_event_loop_are_answered_after_the_commit_that_holds_them_and_share_it() -> None:
    store = Store()
    store.gate.clear()
    gc = _gc(store)

    async def main() -> list[list[int]]:
        first = asyncio.ensure_future(gc.stored([1]))
        await _until(lambda: not gc._queue and gc._queued == 1)  # the writer took it and waits on the gate
        rest = [asyncio.ensure_future(gc.stored(items)) for items in ([2, 3], [-4], [])]
        await _until(lambda: gc._queued == 4)  # the first, taken, and three behind it
        assert not any(t.done() for t in (first, *rest[:2]))  # nothing answered before its commit
        store.gate.set()
        return [[f.result(0) if f.exception() is None else -1 for f in await t] for t in (first, *rest)]

    try:
        assert asyncio.run(main()) == [[2], [4, 6], [-1], []]
        # The three queued behind the first commit shared one transaction, each caller given its own outcomes.
        assert [items for items, _ in store.calls] == [[1], [2, 3, -4]]
    finally:
        gc.close()


async def _until(cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.001)
