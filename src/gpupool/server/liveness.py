"""Last-seen times of nodes, kept in memory and written to the store in batches.

A steady heartbeat changes nothing durable (same node state, same GPU grades), so it costs no transaction:
its time is noted here and persisted for every pending host in one write once per ``node_lost_after_s / 3``,
and always before the loop judges a node lost. The stored time lags the truth by at most that period, well
inside the lost-timeout, so a standby reading the store never sees a beating node as silent.
"""

from __future__ import annotations

import threading

from gpupool.store import Store


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
