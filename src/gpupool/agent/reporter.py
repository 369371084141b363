"""The agent's side of the protocol (``gpupool.schemas.agent``): typed calls to the server, and retry pacing.

``ServerClient`` turns each HTTP outcome into one of three errors the agent loop acts on differently:
``ServerUnavailableError`` (no answer, or a 5xx: wait with backoff and try again),
``NodeUnknownError`` (401/404 on a node call: the server forgot this node or its token; register again)
and ``RegistrationRefusedError`` (the join token is refused: an operator must fix the configuration).
A reply that does not parse as the protocol says is a ``ProtocolError``; fields and command kinds it does
not know (a newer server) are ignored and logged once each (``gpupool.schemas.agent``: one protocol
version apart works; further is refused at registration). ``Backoff`` paces retries:
exponential, capped, with seeded jitter so that a thousand agents cut off together do not return together.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx
import numpy as np
from pydantic import BaseModel, ValidationError

from gpupool.domain.errors import GpupoolError, InputError
from gpupool.schemas.agent import (
    PROTOCOL_VERSION,
    CommandsReply,
    CommandsRequest,
    HeartbeatReply,
    HeartbeatRequest,
    RegisterReply,
    RegisterRequest,
    ReportRequest,
    accepts,
    unknown_fields,
)

_M = TypeVar("_M", bound=BaseModel)
PREFIX = "/v1/agents"
log = logging.getLogger("gpupool.agent.reporter")


class ServerUnavailableError(GpupoolError):
    """The server did not answer, or answered with a server-side error: retry later."""

    code = "SERVER_UNAVAILABLE"


class NameTakenError(ServerUnavailableError):
    """The server refused the registration for now (409): the name belongs to a live node (this node, restarted
    without its kept token, until the server judges it lost), or the join token has no new node left."""

    code = "NAME_TAKEN"


class NodeUnknownError(GpupoolError):
    """The server does not know this node or its token any more (401/404): register again."""

    code = "NODE_UNKNOWN"


class RegistrationRefusedError(GpupoolError):
    """The server refused the join token or the inventory: retrying the same request cannot help."""

    code = "REGISTRATION_REFUSED"


class ProtocolError(GpupoolError):
    """The server answered with something the protocol does not allow (a refused request, a malformed reply)."""

    code = "PROTOCOL_ERROR"


def _detail(resp: httpx.Response) -> str:
    text = resp.text.strip().replace("\n", " ")
    return f"HTTP {resp.status_code}: {text[:200]}" if text else f"HTTP {resp.status_code}"


class ServerClient:
    """One HTTP connection pool to the server. ``transport`` lets a benchmark hand in an in-process app."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 5.0,
        transport: httpx.BaseTransport | None = None,
        ca_bundle: Path | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # An https server is checked against ``ca_bundle`` when given (a private CA), else the usual public CAs.
        verify: ssl.SSLContext | bool = True
        if ca_bundle is not None:
            try:
                verify = ssl.create_default_context(cafile=str(ca_bundle))
            except (OSError, ssl.SSLError) as e:
                raise InputError(f"not a readable PEM CA bundle: {e}", source=str(ca_bundle)) from None
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, transport=transport, verify=verify)
        self._ignored: set[tuple[str, ...]] = set()  # unknown fields already logged

    def close(self) -> None:
        self._http.close()

    def _post(self, path: str, token: str, body: BaseModel, read_s: float | None = None) -> httpx.Response:
        timeout = httpx.USE_CLIENT_DEFAULT if read_s is None else httpx.Timeout(self._http.timeout.connect, read=read_s)
        try:
            resp = self._http.post(
                PREFIX + path,
                content=body.model_dump_json(),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
                timeout=timeout,
            )
        except httpx.HTTPError as e:  # refused, reset, timed out, DNS: the server is not there for us now
            raise ServerUnavailableError(f"{self.base_url}{PREFIX}{path}: {type(e).__name__}: {e}") from e
        if resp.status_code >= 500 or resp.status_code in (408, 429):
            raise ServerUnavailableError(f"{self.base_url}{PREFIX}{path}: {_detail(resp)}")
        return resp

    def _parse(self, resp: httpx.Response, model: type[_M], path: str) -> _M:
        try:
            reply = model.model_validate_json(resp.content)
        except ValidationError as e:
            raise ProtocolError(f"{path}: reply is not a {model.__name__}: {e.errors()[:1]}") from e
        names = unknown_fields(reply)
        if names and names not in self._ignored:
            self._ignored.add(names)
            log.warning("%s: ignored what this agent does not know (a newer server): %s", path, ", ".join(names))
        return reply

    def register(self, join_token: str, req: RegisterRequest) -> RegisterReply:
        resp = self._post("/register", join_token, req)
        if resp.status_code in (401, 403):
            raise RegistrationRefusedError(f"token refused: {_detail(resp)}")
        if resp.status_code == 409:
            raise NameTakenError(f"registration refused for now: {_detail(resp)}")
        if resp.status_code >= 400:
            raise RegistrationRefusedError(f"registration refused: {_detail(resp)}")
        reply = self._parse(resp, RegisterReply, "/register")
        if not accepts(reply.protocol):
            raise RegistrationRefusedError(
                f"the server speaks protocol {reply.protocol}, this agent {PROTOCOL_VERSION}: "
                "more than one version apart; upgrade the older side"
            )
        return reply

    def _node_call(
        self, host: str, what: str, node_token: str, body: BaseModel, read_s: float | None = None
    ) -> httpx.Response:
        resp = self._post(f"/{host}/{what}", node_token, body, read_s)
        if resp.status_code in (401, 403, 404, 410):
            raise NodeUnknownError(f"{what}: {_detail(resp)}")
        if resp.status_code >= 400:
            raise ProtocolError(f"{what} refused: {_detail(resp)}")
        return resp

    def heartbeat(self, host: str, node_token: str, req: HeartbeatRequest) -> HeartbeatReply:
        return self._parse(self._node_call(host, "heartbeat", node_token, req), HeartbeatReply, "heartbeat")

    def report(self, host: str, node_token: str, req: ReportRequest) -> None:
        self._node_call(host, "reports", node_token, req)

    def commands(self, host: str, node_token: str, req: CommandsRequest, wait_s: float) -> CommandsReply:
        """The commands long-poll: the server holds it up to ``wait_s``; past that plus the client's own timeout
        an unanswered poll counts as an outage (a paused server, a silently dropped connection)."""
        read_s = wait_s + (self._http.timeout.read or 5.0)
        return self._parse(self._node_call(host, "commands", node_token, req, read_s), CommandsReply, "commands")


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """Delay before retry n (0-based): ``min(cap_s, base_s * factor**n)``, scaled by a draw in [1-jitter, 1]."""

    base_s: float = 0.5
    factor: float = 2.0
    cap_s: float = 30.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.base_s <= 0 or self.factor < 1 or self.cap_s < self.base_s or not 0 <= self.jitter <= 1:
            raise ValueError(f"unusable backoff policy {self}")


class Backoff:
    """Successive retry delays for one agent. The seed makes a run repeatable; give each agent its own."""

    def __init__(self, policy: BackoffPolicy, seed: int) -> None:
        self.policy = policy
        self._rng = np.random.default_rng(seed)
        self.attempt = 0

    def next_delay(self) -> float:
        p = self.policy
        # Exponent capped before the power so a day-long outage cannot overflow the float.
        raw = min(p.cap_s, p.base_s * p.factor ** min(self.attempt, 64))
        self.attempt += 1
        return raw * (1.0 - p.jitter * float(self._rng.random()))

    def reset(self) -> None:
        self.attempt = 0
