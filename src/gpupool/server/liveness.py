"""Last-seen times of nodes, kept in memory and written to the store in batches; the intake that takes the
beats, on workers of its own, and a watch of its progress.

A steady heartbeat changes nothing durable (same node state, same GPU grades), so it costs no transaction:
its time is noted here and persisted for every pending host in one write once per ``node_lost_after_s / 3``,
and always before the loop judges a node lost. The stored time lags the truth by at most that period, well
inside the lost-timeout, so a standby reading the store never sees a beating node as silent.

A node is judged lost on the server's own progress, not on the wall clock alone (``IntakeWatch``): the time
in which the heartbeat intake itself stood still (the process stopped or starved of CPU, every beat worker
busy) is not counted against a node's silence, since the node's beats may be waiting in the server's own
socket or queue. Beats (and rank reports) run on workers of their own (``BeatWorkers``), so a flood of API
requests, which holds the default thread pool, never delays them.
"""

from __future__ import annotations

import asyncio
import bisect
import contextvars
import functools
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from gpupool.store import Store

_P = ParamSpec("_P")
_T = TypeVar("_T")


class LastSeen:
    def __init__(self, store: Store, period_s: float) -> None:
        self._store = store
        self._period_s = period_s
        self._lock = threading.Lock()
        self._pending: dict[str, float] = {}
        self._flushed_at: float | None = None

    def note(self, host: str, now: float) -> None:
        """Remember a heartbeat of ``host`` at ``now``; flush every pending host when the period has passed."""
        with self._lock:
            self._pending[host] = max(now, self._pending.get(host, now))
            if self._flushed_at is None:
                self._flushed_at = now
            due = now - self._flushed_at >= self._period_s
        if due:
            self.flush(now)

    def unflushed(self) -> dict[str, float]:
        """The noted times not yet written (host -> time): fresher than the store's for those hosts."""
        with self._lock:
            return dict(self._pending)

    def flush(self, now: float) -> None:
        with self._lock:
            batch, self._pending = self._pending, {}
            self._flushed_at = now
        if batch:
            try:
                self._store.touch_nodes(batch)
            except Exception:
                with self._lock:  # not lost: the next flush writes them (a newer time wins)
                    for host, t in batch.items():
                        self._pending[host] = max(t, self._pending.get(host, t))
                raise


class BeatPace:
    """How often agents beat, and how long a silent node has before it is lost, by the fleet's size.

    As Nomad's servers pace their clients (``max_heartbeats_per_second``): past ``max_per_s x base_s`` nodes the
    interval told to agents grows with the fleet, so the server takes at most ``max_per_s`` beats a second
    whatever its size (at 50/s: 5 s up to 250 nodes, 20 s at 1,000); ``max_per_s`` 0 keeps ``base_s``. A node is
    lost after ``lost_after_s`` or three intervals, whichever is longer. Agents adopt the interval from each
    reply, so one told a longer interval may beat at it until its next reply: the longest interval told is kept
    until two of it have passed, and a shrinking fleet judges no node on an interval it never told."""

    def __init__(
        self, base_s: float, max_per_s: float, lost_after_s: float, count: Callable[[], int], clock: Callable[[], float]
    ) -> None:
        self._base_s, self._max_per_s, self._lost_after_s = base_s, max_per_s, lost_after_s
        self._count, self._clock = count, clock
        self._lock = threading.Lock()
        self._told, self._told_at = base_s, 0.0

    def _for_fleet(self) -> float:
        return self._base_s if self._max_per_s <= 0 else max(self._base_s, self._count() / self._max_per_s)

    def interval_s(self) -> float:
        """The interval to tell an agent now (a reply carries it)."""
        interval, now = self._for_fleet(), self._clock()
        with self._lock:
            if interval >= self._told or now - self._told_at > 2 * self._told:
                self._told, self._told_at = interval, now
        return interval

    def beating_s(self) -> float:
        """The longest interval an agent may still beat at: the fleet's, or a longer one told lately."""
        interval, now = self._for_fleet(), self._clock()
        with self._lock:
            if now - self._told_at <= 2 * self._told:
                interval = max(interval, self._told)
        return interval

    def lost_after_s(self) -> float:
        """How long a node may be silent before it is lost (of the server's own progress)."""
        return max(self._lost_after_s, 3 * self.beating_s())


class IntakeWatch:
    """How long the heartbeat intake stood still: time that a node's silence is not charged with.

    ``tick`` is called every ``tick_s`` by the intake itself (``BeatWorkers.watch``: the event loop, then a
    beat worker, the path a beat takes), so it comes late when the process was stopped (SIGSTOP, a paused VM),
    starved of CPU, or had every beat worker busy. Of each gap between ticks, ``tick_s`` plus as much again
    (scheduling jitter) is progress; the rest is a stall. ``stalled_s(since, now)`` is how much of [since,
    now] was stalled, counting the stall still open (no tick for longer than that: the loop may wake from a
    pause before the intake does). Before the first tick nothing is known and nothing is discounted. Stalls
    that ended more than ``keep_s`` ago are forgotten, so memory stays bounded.
    """

    def __init__(self, tick_s: float, keep_s: float, clock: Callable[[], float]) -> None:
        self.tick_s, self._keep_s, self._clock = tick_s, keep_s, clock
        self._lock = threading.Lock()
        self._last: float | None = None
        self._stalls: deque[tuple[float, float]] = deque()  # (start, end) of each stall, oldest first
        self._ticks = 0
        # ((now, ticks) it was made for, starts, ends, running sums): see ``stalled_s``
        self._memo: tuple[tuple[float, int], list[float], list[float], list[float]] | None = None

    def tick(self) -> None:
        now = self._clock()
        with self._lock:
            start = None if self._last is None else self._last + 2 * self.tick_s
            if start is not None and now > start:
                self._stalls.append((start, now))
            while self._stalls and self._stalls[0][1] < now - self._keep_s:
                self._stalls.popleft()
            self._last = now
            self._ticks += 1

    def stalled_s(self, since: float, now: float) -> float:
        """The stalled part of [since, now]. The loop asks for every node with the same ``now``: the spans up to
        ``now`` are summed once (prefix sums), then each ``since`` costs a binary search, not a pass over every
        stall (hundreds while the process starves: most of a cycle's CPU at a thousand nodes)."""
        with self._lock:
            if self._memo is None or self._memo[0] != (now, self._ticks):
                self._memo = ((now, self._ticks), *self._prefix(now))
            _, starts, ends, sums = self._memo
        at = bisect.bisect_right(ends, since)  # the first span ending after ``since``; the later ones start after it
        if at == len(ends):
            return 0.0
        return sums[-1] - sums[at] - max(0.0, since - starts[at])

    def _prefix(self, now: float) -> tuple[list[float], list[float], list[float]]:
        """The stalls clipped to ``now`` (the open one included): starts, ends and the running sum of lengths."""
        spans = list(self._stalls)
        if self._last is not None and now > self._last + 2 * self.tick_s:
            spans.append((self._last + 2 * self.tick_s, now))  # open: the intake has not ticked since
        starts, ends, sums = [], [], [0.0]
        for start, end in spans:
            end = min(end, now)
            if end > start:
                starts.append(start)
                ends.append(end)
                sums.append(sums[-1] + end - start)
        return starts, ends, sums


class BeatWorkers:
    """The agents' intake: heartbeats and rank reports run on their own ``workers`` threads (a pool of their own:
    the default one, which every sync API route shares, may be full), and ``watch`` ticks the ``IntakeWatch``
    through the same path.

    A ``concurrent.futures`` pool, awaited with ``asyncio.wrap_future``, not ``anyio.to_thread``: at a thousand
    nodes the intake hands a beat, a poll's pass (and its token check, when memory does not settle it) or a
    report to a worker some 500 times a second, and anyio's hand-off (a limiter, a cancel scope, a
    ``queue.Queue`` per worker) cost about three times the CPU of the pool's (docs/benchmarks.md, "Report intake"). The request's context (its id, for the logs) goes along.
    A request cancelled meanwhile (its client gone) leaves its call to finish on the worker."""

    def __init__(self, workers: int, intake: IntakeWatch) -> None:
        self.intake, self._workers = intake, workers
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None  # made by the first call after each close (an app's lifespans)

    async def run(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        ctx = contextvars.copy_context()
        pool = self._pool or self._open()
        return await asyncio.wrap_future(pool.submit(ctx.run, functools.partial(fn, *args, **kwargs)))

    def _open(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="gpupool-beat")
            return self._pool

    async def watch(self) -> None:
        """Tick the intake watch until cancelled (a task of the server's lifespan)."""
        while True:
            await asyncio.sleep(self.intake.tick_s)
            await self.run(self.intake.tick)

    def close(self) -> None:
        """End the workers once the calls they run return; calls not yet started are dropped."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
