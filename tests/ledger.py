"""Clients that submit through faults and remember what they were told: the ledger of acknowledged jobs that
the failover and chaos tests hold the database to ("no acknowledged job lost, none stored twice").

A client retries a submission with the same ``Idempotency-Key`` while the answer says "try again" (503 with
``Retry-After``, 429, a dropped or refused connection, a timeout), as the API tells clients to; the first 201 or
200 is the acknowledgement, recorded with the job's id and when it came. ``paced`` runs submissions on a fixed
schedule (``rate`` per second) from several threads, so a stalled server makes a backlog rather than slowing
the offered load.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

RETRY_STATUS = frozenset({429, 502, 503, 504})


@dataclass
class Ack:
    job_id: str
    sent_s: float  # monotonic: the first try
    acked_s: float  # monotonic: the answer that acknowledged it
    tries: int


@dataclass
class Ledger:
    """Every key tried, every acknowledgement, and what the clients saw on the way (thread-safe)."""

    tried: set[str] = field(default_factory=set)
    acked: dict[str, Ack] = field(default_factory=dict)
    seen: Counter[str] = field(default_factory=Counter)  # "201", "503 STORE_UNAVAILABLE", "ConnectError", ...
    refused: dict[str, str] = field(default_factory=dict)  # key -> an answer that is no retry and no ack
    lock: threading.Lock = field(default_factory=threading.Lock)

    def submit(
        self, client: httpx.Client, key: str, body: dict[str, Any], give_up_s: float = 120.0, stop: Any = None
    ) -> Ack | None:
        """POST /v1/jobs until acknowledged; None if refused for good, given up, or ``stop`` (an Event) is set."""
        with self.lock:
            self.tried.add(key)
        sent = time.monotonic()
        tries = 0
        wait_s = 0.1
        while time.monotonic() - sent < give_up_s and not (stop is not None and stop.is_set()):
            tries += 1
            try:
                r = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})
            except httpx.HTTPError as e:
                self._saw(type(e).__name__)
            else:
                if r.status_code in (200, 201):
                    ack = Ack(str(r.json()["job"]["id"]), sent, time.monotonic(), tries)
                    with self.lock:
                        self.seen[str(r.status_code)] += 1
                        self.acked[key] = ack
                    return ack
                code = _code(r)
                missing = "" if "Retry-After" in r.headers or r.status_code not in RETRY_STATUS else " no Retry-After"
                self._saw(f"{r.status_code} {code}{missing}".strip())
                if r.status_code not in RETRY_STATUS:
                    with self.lock:
                        self.refused[key] = f"{r.status_code} {r.text[:200]}"
                    return None
                wait_s = float(r.headers.get("Retry-After", wait_s))
            threading.Event().wait(min(wait_s, 1.0))  # the client's back-off between tries, not a wait for a state
            wait_s = min(2 * wait_s, 1.0)
        return None

    def _saw(self, what: str) -> None:
        with self.lock:
            self.seen[what] += 1

    def lost(self, stored: dict[str, str]) -> list[str]:
        """Acknowledged keys that ``stored`` (key -> job id, from the database) lacks or gives another id."""
        with self.lock:
            return sorted(k for k, a in self.acked.items() if stored.get(k) != a.job_id)

    def ack_times(self) -> list[float]:
        with self.lock:
            return sorted(a.acked_s for a in self.acked.values())

    def latencies(self) -> list[float]:
        with self.lock:
            return sorted(a.acked_s - a.sent_s for a in self.acked.values())


def _code(r: httpx.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        return ""
    return str(body.get("code", "")) if isinstance(body, dict) else ""


def longest_silence(acks: Sequence[float], since_s: float, until_s: float) -> float:
    """The longest time without an acknowledgement in [since_s, until_s]: how long submits were not accepted
    after a fault at ``since_s`` (the first gap counts from the fault itself)."""
    times = [since_s, *(t for t in acks if since_s < t <= until_s)]
    if len(times) == 1:
        return until_s - since_s
    return max(b - a for a, b in itertools.pairwise(times))


def paced(rate_per_s: float, count: int, workers: int, work: Callable[[int], Any], stop: threading.Event) -> None:
    """Run ``work(i)`` for i in 0..count-1 on ``workers`` threads, the i-th not before start + i/rate."""
    start = time.monotonic()
    lock = threading.Lock()
    nxt = [0]

    def run() -> None:
        while not stop.is_set():
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= count:
                return
            stop.wait(max(0.0, start + i / rate_per_s - time.monotonic()))  # the offered schedule
            work(i)

    threads = [threading.Thread(target=run, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
