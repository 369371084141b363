"""Commands pushed to agents as soon as they are committed: per-host doorbells and the commands long-poll.

An agent holds ``POST /v1/agents/{host}/commands`` open. The handler derives the host's commands with the
gateway's one function (``AgentGateway.commands``, which heartbeat replies use too); while none is new to
the agent it awaits the host's doorbell. A waiting poll holds an asyncio future, not a thread, so a
thousand agents cost a thousand small objects on the event loop.

Who rings a host: the host cache, after every reload, rings each host whose agent may have a new command
(a placement, a preemption, a cancel, a requeue, a job that ended, made by this replica or any other; not a
rank's reported start or end, which gives its agent nothing new). Every
local write that touches assignments already invalidates that cache; the invalidation also kicks the
``Refresher`` thread, which reloads at once while polls wait, so a placement rings its hosts within one
read of the store after it commits. While polls wait the refresher also reloads every ``host_cache_s``:
changes another replica made ring within that time (one read for all hosts, not one per waiting agent).
A checkpoint signal is stored (``store.commands``) and rings its host the same way, through the reload.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence, Set

from starlette.types import Receive

from gpupool.schemas.agent import Command, CommandsReply, SignalCommand, WorkloadStatus, command_key
from gpupool.server.liveness import BeatWorkers

log = logging.getLogger("gpupool.server.push")
_MIN_GAP_S = 0.01  # between two reloads of the refresher: a burst of placements costs one read, not hundreds


class Doorbell:
    """A counter per host, bumped by ``ring`` from any thread; ``wait`` resumes when it moves past a mark."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rings: dict[str, int] = {}
        self._waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]] = {}
        self._waiting = 0  # the waiters' count, kept as they come and go (the refresher asks on every pass)

    def mark(self, host: str) -> int:
        with self._lock:
            return self._rings.get(host, 0)

    @property
    def waiting(self) -> int:
        with self._lock:
            return self._waiting

    def ring(self, hosts: Iterable[str]) -> None:
        woken: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        with self._lock:
            for h in hosts:
                self._rings[h] = self._rings.get(h, 0) + 1
                woken.extend(self._waiters.pop(h, ()))
            self._waiting -= len(woken)
        for loop, fut in woken:
            loop.call_soon_threadsafe(_resolve, fut)

    async def wait(self, host: str, mark: int, timeout_s: float) -> bool:
        """True when ``host`` was rung since ``mark`` (perhaps before this call), False after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        entry = (loop, fut)
        with self._lock:
            if self._rings.get(host, 0) != mark:
                return True
            self._waiters.setdefault(host, []).append(entry)
            self._waiting += 1
        try:
            await asyncio.wait_for(fut, timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                mine = self._waiters.get(host, [])
                if entry in mine:  # still listed: not rung (a timeout, a cancel)
                    mine.remove(entry)
                    self._waiting -= 1
                    if not mine:
                        del self._waiters[host]


async def _hung_up(receive: Receive) -> None:
    # The request body has been read: the next ASGI message is the client's disconnect.
    while (await receive())["type"] != "http.disconnect":
        pass


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class Refresher:
    """One thread per replica: reloads the host cache when this replica changed it or every ``period_s``, and
    only while polls wait (without them a reload would be work nobody reads: heartbeats reload on their own)."""

    def __init__(self, reload: Callable[[], object], bell: Doorbell, period_s: float) -> None:
        self._reload, self._bell, self._period_s = reload, bell, period_s
        self._kick = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def kick(self) -> None:
        self._kick.set()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpupool-push", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._kick.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._kick.wait(self._period_s)
            self._kick.clear()
            if self._stop.is_set() or not self._bell.waiting:
                continue
            try:
                self._reload()
            except Exception:  # a failed read (database away) must not end the thread: heartbeats still carry commands
                log.exception("host cache reload for pushed commands failed")
            self._stop.wait(_MIN_GAP_S)


class CommandPush:
    """The long-poll's server side: ``poll`` answers when a command the agent does not hold exists, or after
    ``wait_s`` with every current command (held ones too, as a heartbeat reply would). A pass woken for a change
    that gives the agent nothing new builds no launch (``AgentGateway.commands`` with ``held``). Each pass derives
    on the beat workers (``workers``), the agents' intake: their hand-off costs a third of anyio's."""

    def __init__(
        self,
        derive: Callable[[str, Sequence[WorkloadStatus], Sequence[str] | None, Set[str] | None], list[Command] | None],
        bell: Doorbell,
        refresher: Refresher,
        workers: BeatWorkers,
        wait_s: float,
        clock: Callable[[], float],
    ) -> None:
        self._derive, self.bell, self.refresher, self._workers = derive, bell, refresher, workers
        self.wait_s, self._clock = wait_s, clock

    async def answer(
        self,
        host: str,
        workloads: Sequence[WorkloadStatus],
        held: Iterable[str],
        receive: Receive,
        executed: Sequence[str] | None = None,
    ) -> CommandsReply | None:
        """``poll``, ended early (None) when the agent hangs up: a poll whose agent died or restarted must not
        linger for ``wait_s`` (nor hold up a server's shutdown, which waits for open requests)."""
        poll = asyncio.ensure_future(self.poll(host, workloads, held, executed))
        gone = asyncio.ensure_future(_hung_up(receive))
        try:
            await asyncio.wait((poll, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if poll.done():
            return poll.result()
        poll.cancel()
        return None

    async def poll(
        self,
        host: str,
        workloads: Sequence[WorkloadStatus],
        held: Iterable[str],
        executed: Sequence[str] | None = None,
    ) -> CommandsReply:
        known = set(held)
        deadline = time.monotonic() + self.wait_s
        while True:
            # Marked before deriving: a ring that lands while the commands are being derived ends the wait at once.
            mark = self.bell.mark(host)
            final = deadline - time.monotonic() <= 0  # the timeout's answer: every current command, held ones too
            commands = await self._workers.run(self._derive, host, workloads, executed, None if final else known)
            # None: nothing the agent does not hold (found without building a launch). A signal derived is one
            # the agent has not carried out (or, to an older agent, is sent once).
            if commands is not None and (
                final or any(isinstance(c, SignalCommand) or command_key(c) not in known for c in commands)
            ):
                return CommandsReply(commands=tuple(commands), server_time_s=self._clock())
            left = deadline - time.monotonic()
            if left > 0:
                await self.bell.wait(host, mark, left)
