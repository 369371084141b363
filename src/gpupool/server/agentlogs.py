"""Workload logs fetched from the agents for the API: signed, off the request pool, bounded in time and number.

The server reaches an agent's log server (``agent/logserver.py``) with a request signed by the node's log
key (``schemas/logsig.py``): ``log_key`` derives it from the node token's stored hash, so every replica
derives the same key and nothing more is stored; the agent got it in its registration reply. A fetch runs on
the event loop (an ``httpx.AsyncClient``), never on the thread pool the sync routes and the agents' beats
share, and takes at most ``timeout_s`` all told. At most ``slots`` fetches are in flight, an agent at most a
quarter of them: past that a 503 ``LOGS_BUSY`` at once, so an agent that never answers costs a few slots for
``timeout_s`` each and nothing else.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

import httpx

from gpupool.domain.errors import GpupoolError, OverloadedError
from gpupool.schemas import logsig

NEXT_OFFSET = "x-log-next-offset"  # the agent's header (agent/logserver.py): where the next read starts


def log_key(token_hash: str) -> str:
    """The node's log key: a function of its current node token's stored hash (a new registration, a new key)."""
    return hmac.new(token_hash.encode(), b"gpupool agent logs v1", hashlib.sha256).hexdigest()


class AgentUnreachableError(GpupoolError):
    code = "AGENT_UNREACHABLE"


class LogsBusyError(OverloadedError):
    code = "LOGS_BUSY"


@dataclass(frozen=True, slots=True)
class Fetched:
    status: int
    text: str
    next_offset: int | None


class LogFetcher:
    def __init__(self, timeout_s: float, slots: int, clock: Callable[[], float] = time.time) -> None:
        self._timeout_s = timeout_s
        self._slots = slots
        self._per_agent = max(1, slots // 4)
        self._clock = clock
        self._in_flight: dict[str, int] = {}
        self._client: httpx.AsyncClient | None = None

    async def fetch(self, host: str, base_url: str, key: str, aid: str, params: dict[str, str | int]) -> Fetched:
        """GET ``/logs/{aid}?params`` of ``host``'s agent at ``base_url``, signed with ``key``."""
        if sum(self._in_flight.values()) >= self._slots or self._in_flight.get(host, 0) >= self._per_agent:
            raise LogsBusyError(f"too many log fetches in flight (to {host}, or in all): retry in a second")
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout_s)
        target = f"/logs/{aid}?{urlencode(params)}"
        headers = {logsig.HEADER: logsig.sign(key, "GET", target, self._clock())}
        self._in_flight[host] = self._in_flight.get(host, 0) + 1
        try:
            async with asyncio.timeout(self._timeout_s):
                r = await self._client.get(base_url + target, headers=headers)
        except (httpx.HTTPError, TimeoutError) as e:
            raise AgentUnreachableError(f"the agent of {host} did not answer: {type(e).__name__}") from None
        finally:
            self._in_flight[host] -= 1
            if not self._in_flight[host]:
                del self._in_flight[host]
        after = r.headers.get(NEXT_OFFSET, "")
        return Fetched(r.status_code, r.text, int(after) if after.isdigit() else None)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
