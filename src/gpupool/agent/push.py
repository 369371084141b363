"""The agent's end of the commands long-poll: one thread that keeps a poll open and hands each answer over.

The thread asks the agent for the next request (``next_request``: the workloads it runs and the commands it
holds, or how long to wait before asking again), makes the HTTP call, and gives the outcome to ``handle``.
Both callbacks take the agent's lock, which the agent's own loop releases only around its HTTP calls and its
naps: so pushed commands are carried out at once even while a heartbeat is in flight, by one thread at a
time, and an assignment id is still launched at most once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from gpupool.agent.reporter import ServerClient, ServerUnavailableError
from gpupool.domain.errors import GpupoolError
from gpupool.schemas.agent import CommandsReply, CommandsRequest


@dataclass(frozen=True, slots=True)
class PollRequest:
    host: str
    token: str
    body: CommandsRequest
    wait_s: float  # how long the server said it holds a poll


@dataclass(frozen=True, slots=True)
class PollOutcome:
    """What one poll ended with: a reply, or the error the client raised; ``token`` is the node token it used
    (a refusal of an old token must not drop the one a re-registration got meanwhile)."""

    token: str
    reply: CommandsReply | None = None
    error: GpupoolError | None = None


class CommandPoller:
    def __init__(
        self,
        client: ServerClient,
        next_request: Callable[[], PollRequest | float],
        handle: Callable[[PollOutcome], None],
    ) -> None:
        self._client, self._next, self._handle = client, next_request, handle
        self._kick = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="gpupool-agent-commands", daemon=True)
        self._thread.start()

    def kick(self) -> None:
        """Ask for the next request now (the agent registered, or is closing)."""
        self._kick.set()

    def close(self) -> None:
        """No new poll after this; one in flight ends when the server answers or the client is closed."""
        self._closed = True
        self._kick.set()

    def _run(self) -> None:
        while not self._closed:
            nxt = self._next()
            if not isinstance(nxt, PollRequest):
                self._kick.wait(nxt)
                self._kick.clear()
                continue
            try:
                out = PollOutcome(nxt.token, reply=self._client.commands(nxt.host, nxt.token, nxt.body, nxt.wait_s))
            except GpupoolError as e:
                out = PollOutcome(nxt.token, error=e)
            except Exception as e:  # the client closed under a poll (the agent is exiting): an outage, not a crash
                out = PollOutcome(nxt.token, error=ServerUnavailableError(f"commands: {type(e).__name__}: {e}"))
            if not self._closed:
                self._handle(out)
