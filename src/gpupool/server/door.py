"""The door: what a request may cost before the application looks at it (ASGI middlewares).

``BodyLimit`` refuses a body past ``max_body_bytes`` with 413 ``BODY_TOO_LARGE`` before any of it is parsed
or authenticated: a ``Content-Length`` past the limit is answered from the headers alone, a chunked body is
counted as it streams and refused at the first byte past the limit. An admin token (checked once, before the
body is read) may send up to ``max_admin_body_bytes`` (a large fabric import). A token that is nobody's gets its 401 there instead. A body that does not arrive
whole within ``body_timeout_s`` is a 408 ``BODY_TIMEOUT``. Either answer closes the connection, so the rest
of the body is never read.

``AuthFailures`` limits FAILED authentication per token and per client address with token buckets (``burst``
failures at once, refilled at ``per_s``): past either, a request carrying a credential gets 429
``AUTH_RATE_LIMITED`` with ``Retry-After`` without reaching the application (no store read, no hashing).
A token that recently got a 2xx from the API passes an address's limit (a good client behind the same address as a
flood keeps working); it is charged like any other the moment it fails. IPv6 addresses count per /64.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# What an Authorization header value speaks for: True an admin, False another principal, None nobody (a
# token unknown, revoked or malformed: the door answers 401, which ``AuthFailures`` counts).
AdminCheck = Callable[[str], Awaitable[bool | None]]


def refusal(send: Send, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Awaitable[None]:
    """A JSON error answer in the API's ``ErrorOut`` shape, sent straight to ASGI; the connection closes."""
    body = json.dumps({"code": code, "message": message}).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    head += [(b"connection", b"close"), *((k.lower().encode(), v.encode()) for k, v in (headers or {}).items())]

    async def go() -> None:
        await send({"type": "http.response.start", "status": status, "headers": head})
        await send({"type": "http.response.body", "body": body})

    return go()


def _mib(n: int) -> str:
    return f"{n} bytes ({n / (1 << 20):g} MiB)"


class _Refused(Exception):
    """Raised into the application's ``receive`` once the body is refused; the application's own answer to
    it (FastAPI turns it into a 400) is dropped for the door's."""


@dataclass(slots=True)
class _Body:
    limit: int
    admin_checked: bool
    seen: int = 0
    done: bool = False
    refused: tuple[int, str, str] | None = None
    unknown: bool = False  # the admin check found the token is nobody's
    started: bool = False


class BodyLimit:
    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        max_admin_body_bytes: int,
        body_timeout_s: float,
        is_admin: AdminCheck,
    ) -> None:
        self.app = app
        self._max = max_body_bytes
        self._admin_max = max(max_admin_body_bytes, max_body_bytes)
        self._timeout_s = body_timeout_s
        self._is_admin = is_admin

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared: int | None = None
        authorization = ""
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit():
                declared = int(value)
            elif name == b"authorization":
                authorization = value.decode("latin-1")
        body = _Body(self._max, admin_checked=False)
        if declared is not None and declared > self._max and not await self._widen(body, authorization, declared):
            await refusal(send, *self._refusal(body, declared))
            return
        if declared == 0:
            body.done = True
        await self._serve(scope, receive, send, body, authorization)

    async def _widen(self, body: _Body, authorization: str, size: int) -> bool:
        """Whether an admin's larger limit lets ``size`` bytes in (the token checked once, before reading)."""
        if not body.admin_checked:
            body.admin_checked = True
            if authorization and size <= self._admin_max:
                admin = await self._is_admin(authorization)
                body.unknown = admin is None
                body.limit = self._admin_max if admin else body.limit
        return size <= body.limit

    def _refusal(self, body: _Body, size: int | None) -> tuple[int, str, str]:
        if body.unknown:
            return 401, "UNAUTHENTICATED", "the token is unknown or revoked"
        return 413, "BODY_TOO_LARGE", self._too_large(size)

    def _too_large(self, size: int | None) -> str:
        got = "the request body is over" if size is None else f"the request body has {size} bytes, over"
        return f"{got} the limit of {_mib(self._max)} (an admin token may send {_mib(self._admin_max)})"

    async def _serve(self, scope: Scope, receive: Receive, send: Send, body: _Body, authorization: str) -> None:
        deadline = time.monotonic() + self._timeout_s

        async def limited() -> Message:
            if body.done:
                return await receive()  # the body is in: what follows is a disconnect, which must not time out
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    message = await receive()
            except TimeoutError:
                body.refused = (408, "BODY_TIMEOUT", f"the request body did not arrive within {self._timeout_s:g} s")
                raise _Refused from None
            if message["type"] == "http.request":
                body.seen += len(message.get("body", b""))
                body.done = not message.get("more_body", False)
                if body.seen > body.limit and not await self._widen(body, authorization, body.seen):
                    body.refused = self._refusal(body, None)
                    raise _Refused
            else:
                body.done = True
            return message

        async def guarded(message: Message) -> None:
            if body.refused is not None and not body.started:
                return  # the application's answer to a refused body: the door sends its own below
            body.started = body.started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, guarded)
        except Exception:
            if body.refused is None:
                raise  # not the door's doing; whatever the application made of a refused body is dropped
        if body.refused is not None and not body.started:
            await refusal(send, *body.refused)


class FailureBuckets:
    """Token buckets of allowed failures by key: ``burst`` at once, ``per_s`` more each second; at most
    ``max_keys`` kept (the least recently charged go first, as full buckets)."""

    def __init__(self, burst: int, per_s: float, clock: Callable[[], float], max_keys: int = 100_000) -> None:
        self._burst = float(burst)
        self._per_s = per_s
        self._clock = clock
        self._max = max_keys
        self._levels: OrderedDict[bytes, tuple[float, float]] = OrderedDict()  # key -> (allowance, at)

    def _level(self, key: bytes, now: float) -> float:
        found = self._levels.get(key)
        if found is None:
            return self._burst
        level, at = found
        return min(self._burst, level + (now - at) * self._per_s)

    def wait_s(self, key: bytes) -> float:
        """0 while ``key`` may fail again; else the seconds until it may."""
        level = self._level(key, self._clock())
        return 0.0 if level >= 1.0 else (1.0 - level) / self._per_s

    def full(self, key: bytes) -> bool:
        """Whether ``key`` has its whole burst (no failure to refill)."""
        return self._level(key, self._clock()) >= self._burst

    def charge(self, key: bytes, failures: float = 1.0) -> None:
        """Take ``failures`` from ``key``'s allowance (a negative number gives them back, up to the burst)."""
        now = self._clock()
        level = min(self._burst, self._level(key, now) - failures)
        self._levels[key] = (max(level, -self._burst), now)  # a flood cannot dig deeper than one burst's wait
        self._levels.move_to_end(key)
        while len(self._levels) > self._max:
            self._levels.popitem(last=False)


def address_key(client: tuple[str, int] | None) -> bytes:
    """The key an address's failures count under: the address itself, or an IPv6 address's /64."""
    if client is None:
        return b"a:-"
    host = client[0]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return b"a:" + host.encode()
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return b"a:" + str(ip.ipv4_mapped).encode()
        return b"a:" + str(ipaddress.ip_network(f"{ip}/64", strict=False)).encode()
    return b"a:" + str(ip).encode()


class AuthFailures:
    GOOD_S = 300.0  # how long a token that authenticated passes an address's limit
    MAX_GOOD = 10_000

    def __init__(self, app: ASGIApp, *, burst: int, per_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self._on = burst > 0 and per_s > 0
        self._buckets = FailureBuckets(max(burst, 1), max(per_s, 1e-9), clock)
        self._clock = clock
        self._good: OrderedDict[bytes, float] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        on = self._on and scope["type"] == "http"
        credential = next((v for k, v in scope["headers"] if k == b"authorization"), None) if on else None
        if credential is None:
            await self.app(scope, receive, send)
            return
        token = b"t:" + hashlib.sha256(credential).digest()
        good = self._is_good(token)
        wait = self._buckets.wait_s(token)
        keys: tuple[bytes, ...] = (token,)
        if not good:  # a good token passes its address's limit: the address is not even looked at
            address = address_key(scope.get("client"))
            keys = (token, address)
            wait = wait or self._buckets.wait_s(address)
        if wait:
            message = "too many failed authentications from this token or address: retry later"
            await refusal(send, 429, "AUTH_RATE_LIMITED", message, {"Retry-After": str(math.ceil(wait))})
            return
        # A key with failures already is charged before the answer, and given back unless it is a 401, so that
        # requests in flight at once cannot each pass on its last unit of allowance; a key without failures is
        # charged after a 401 only (a fresh token's parallel first requests are not held to the burst).
        held = tuple(k for k in keys if not self._buckets.full(k))
        for key in held:
            self._buckets.charge(key)
        status = 0

        async def watched(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watched)
        finally:
            self._note(token, keys, held, status, scope["path"])

    def _is_good(self, token: bytes) -> bool:
        until = self._good.get(token)
        return until is not None and until > self._clock()

    def _note(self, token: bytes, keys: tuple[bytes, ...], held: tuple[bytes, ...], status: int, path: str) -> None:
        if status == 401:
            self._good.pop(token, None)
            for key in keys:
                if key not in held:  # the held ones stay charged
                    self._buckets.charge(key)
            return
        for key in held:
            self._buckets.charge(key, -1.0)
        if 200 <= status < 300 and path.startswith("/v1/"):
            # Only a 2xx of the API proves the token: every /v1 route authenticates, while an unknown path's
            # 404 or a body's 422 may come before any check (and would let any token pass as good).
            self._good[token] = self._clock() + self.GOOD_S
            self._good.move_to_end(token)
            while len(self._good) > self.MAX_GOOD:
                self._good.popitem(last=False)
