"""``POST /v1/jobs`` with a JSON body, answered straight from ASGI: no routing, no dependency solving.

At a thousand submits a second FastAPI's per-request machinery (middleware layers, route matching, solving
the endpoint's parameters) cost more CPU than the submit's own work. This middleware reads the body, validates
it with the same pydantic model, and calls the same ``accept_submit`` as the documented route; errors get the
same answers (FastAPI's 422 shape naming the field, the domain's codes through ``error_response``). Anything
else, a submit with another content type or a body over ``max_body``, goes on to FastAPI unchanged.
``FastPath`` is what this and the agents' routes' fast path (``agent_routes.AgentFastPath``) share: the
headers they read, the JSON body within ``max_body``, and the hand-over to FastAPI of what they do not answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpupool.domain.errors import GpupoolError
from gpupool.schemas import api
from gpupool.server.core import Server
from gpupool.server.routes import accept_submit

PATH = "/v1/jobs"


class FastPath:
    """An ASGI middleware that answers some routes itself (``SubmitFastPath``, ``agent_routes.AgentFastPath``)
    and hands every other request, and every request it will not answer, to FastAPI as it came."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        server: Server,
        error_response: Callable[[GpupoolError], Response],
        max_body: int = 1 << 20,
    ) -> None:
        self.app = app
        self._srv = server
        self._error_response = error_response
        self._max_body = max_body

    async def read_json(
        self, scope: Scope, receive: Receive, send: Send, names: frozenset[bytes]
    ) -> tuple[dict[bytes, str], bytes] | None:
        """The first value of each header in ``names`` (as Starlette's ``Headers.get`` reads) and the body of a
        JSON request of at most ``max_body`` bytes. None when the request went on to FastAPI (another content
        type; a longer body: FastAPI applies its own limits) or the client went away."""
        found: dict[bytes, str] = {}
        content_type: bytes | None = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value if content_type is None else content_type
            elif name in names and name not in found:
                found[name] = value.decode("latin-1")
        if content_type is None or content_type.split(b";", 1)[0].strip().lower() != b"application/json":
            await self.app(scope, receive, send)
            return None
        body = await read_body(receive, self._max_body)
        if body is None:
            return None  # the client went away
        if len(body) > self._max_body:
            await self.app(scope, replay(body, receive), send)
            return None
        return found, body


_SUBMIT_HEADERS = frozenset({b"authorization", b"idempotency-key"})


class SubmitFastPath(FastPath):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != PATH:
            await self.app(scope, receive, send)
            return
        got = await self.read_json(scope, receive, send, _SUBMIT_HEADERS)
        if got is None:
            return
        headers, body = got
        try:
            job = api.JobSubmit.model_validate_json(body)
            response = await accept_submit(
                self._srv, job, headers.get(b"authorization"), headers.get(b"idempotency-key")
            )
        except ValidationError as e:
            response = JSONResponse({"detail": body_errors(e)}, status_code=422)
        except GpupoolError as e:
            response = self._error_response(e)
        await response(scope, receive, send)


def body_errors(e: ValidationError) -> list[dict[str, Any]]:
    """pydantic's errors in FastAPI's request-validation shape (``loc`` starts with "body"): type, place and
    sentence only, since the offending input may be anything (bytes that are not UTF-8, say)."""
    return [
        {"type": err["type"], "loc": ["body", *err["loc"]], "msg": err["msg"]}
        for err in e.errors(include_url=False, include_input=False, include_context=False)
    ]


async def read_body(receive: Receive, max_body: int) -> bytes | None:
    """The request's body, read until its end or until past ``max_body`` (then what was read: longer than
    ``max_body``); None when the client went away."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if size > max_body or not message.get("more_body", False):
            return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands over the already-read body first, then the client's own messages."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
