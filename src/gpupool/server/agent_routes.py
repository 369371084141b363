"""The agent protocol's routes (register, heartbeat, commands long-poll, reports): one handler each, served two ways.

Each route's logic is one ``agent_*`` coroutine below. The FastAPI routes (``router``) call it and document the
operations; ``AgentFastPath``, an ASGI middleware, calls the same coroutine for a JSON body without FastAPI's
routing and dependency solving, which at a fleet's thousands of beats, polls and reports a second cost more
CPU than the handlers' own work (the profile in docs/benchmarks.md, "End to end at 1,000 nodes"). The fast
path's answers are the route's: the same reply models rendered as JSON, a domain error through the same
``error_response`` (401 with ``WWW-Authenticate`` for a bad node token), and a body that does not validate is
handed to FastAPI as it came, so its 422 is FastAPI's own. Anything else (another content type, a body over
``max_body``, a path the routes would not match) goes on to FastAPI unchanged.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from gpupool.domain.errors import GpupoolError
from gpupool.schemas import agent as proto
from gpupool.schemas import api
from gpupool.server.agentlogs import log_key
from gpupool.server.auth import bearer
from gpupool.server.core import Server
from gpupool.server.fastsubmit import FastPath, replay
from gpupool.server.gateway import Reports
from gpupool.server.routes import ForbiddenError, Srv

PREFIX = "/v1/agents/"
# An agent more than one protocol version from this server (gateway.check_protocol).
_PROTOCOL: dict[int | str, dict[str, object]] = {426: {"model": api.ErrorOut, "description": "protocol too far apart"}}


# -- the handlers: each route's one implementation ---------------------------------------------------------------
def _register(s: Server, body: proto.RegisterRequest, authorization: str | None, peer: str) -> proto.RegisterReply:
    s.gateway.check_protocol(body.host, body)
    token = bearer(authorization)
    # A join or node token is the gateway's to judge; any other token must be an admin's.
    who = None if token.startswith(("gpj_", "gpn_")) else s.auth.principal(authorization)
    if who is not None and not who.admin:
        raise ForbiddenError("registering a node needs a join token, its node token or an admin token")
    reply = s.gateway.register(body, token, peer, who)
    stored = s.ops.node_token_hash(body.host)  # the token just stored: the key the log route derives too
    return reply if stored is None else reply.model_copy(update={"log_key": log_key(stored[1])})


async def agent_register(
    s: Server, body: proto.RegisterRequest, authorization: str | None, peer: str
) -> proto.RegisterReply:
    return await run_in_threadpool(_register, s, body, authorization, peer)  # store writes: not on the event loop


def _beat(
    s: Server, host: str, body: proto.HeartbeatRequest, token: str, received_s: float
) -> proto.HeartbeatReply | Reports:
    s.gateway.check_node(host, token)
    s.gateway.check_protocol(host, body)
    got = s.gateway.heartbeat(host, body, received_s)
    return got if got.reports else s.gateway.answer(host, body, got.acked)  # states to store: answered after


async def agent_heartbeat(
    s: Server, host: str, body: proto.HeartbeatRequest, authorization: str | None
) -> proto.HeartbeatReply:
    # Agents' beats and reports run on the beat workers (``liveness``), never behind the API's requests. A beat
    # that carries states to store waits for their commit on the event loop, as a report does, then is answered.
    got = await s.beats.run(_beat, s, host, body, bearer(authorization), s.clock())
    if isinstance(got, Reports):
        got = await s.beats.run(s.gateway.answer, host, body, await s.gateway.reported(got))
    return got


async def agent_commands(
    s: Server, host: str, body: proto.CommandsRequest, authorization: str | None, receive: Receive
) -> proto.CommandsReply | None:
    """The long poll's reply; None when the agent hung up first. A waiting poll holds a future on the event
    loop, not a worker thread (see ``push``)."""
    token = bearer(authorization)
    if not s.gateway.node_token_held(host, token):  # the usual case answered in memory; else a store read, maybe
        await s.beats.run(s.gateway.check_node, host, token)
    s.gateway.check_protocol(host, body)
    return await s.push.answer(host, body.workloads, body.held, receive, body.executed)


def _report(s: Server, host: str, body: proto.ReportRequest, token: str) -> Reports:
    s.gateway.check_node(host, token)
    s.gateway.check_protocol(host, body)
    return s.gateway.report(host, body.workloads)


async def agent_reports(s: Server, host: str, body: proto.ReportRequest, authorization: str | None) -> None:
    # Sorted on a beat worker; the commit is waited for on the event loop, the worker free meanwhile.
    await s.gateway.reported(await s.beats.run(_report, s, host, body, bearer(authorization)))


def _peer(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else ""


# -- the documented routes -------------------------------------------------------------------------------------
router = APIRouter()
Authorization = Annotated[str | None, Header()]


@router.post("/v1/agents/register", response_model=proto.RegisterReply, responses=_PROTOCOL)
async def register(
    body: proto.RegisterRequest, request: Request, s: Srv, authorization: Authorization = None
) -> proto.RegisterReply:
    """An agent registers its node (join token, its node token or an admin token); answers the node token."""
    return await agent_register(s, body, authorization, _peer(request.scope))


@router.post("/v1/agents/{host}/heartbeat", response_model=proto.HeartbeatReply, responses=_PROTOCOL)
async def heartbeat(
    host: str, body: proto.HeartbeatRequest, s: Srv, authorization: Authorization = None
) -> proto.HeartbeatReply:
    """An agent's heartbeat: samples, XIDs and workload states in; its assignments out."""
    return await agent_heartbeat(s, host, body, authorization)


@router.post("/v1/agents/{host}/commands", response_model=proto.CommandsReply, responses=_PROTOCOL)
async def commands(
    host: str, body: proto.CommandsRequest, request: Request, s: Srv, authorization: Authorization = None
) -> proto.CommandsReply | Response:
    """An agent's long poll for commands (launch, stop, signal), answered when something changes."""
    reply = await agent_commands(s, host, body, authorization, request.receive)
    return Response(status_code=204) if reply is None else reply  # 204: to an agent that hung up


@router.post("/v1/agents/{host}/reports", status_code=204, response_class=Response, responses=_PROTOCOL)
async def reports(host: str, body: proto.ReportRequest, s: Srv, authorization: Authorization = None) -> Response:
    """An agent's workload states between heartbeats (a rank started or exited), acted on at once."""
    await agent_reports(s, host, body, authorization)
    return Response(status_code=204)


# -- the fast path ---------------------------------------------------------------------------------------------
_BODIES: dict[str, type[BaseModel]] = {
    "register": proto.RegisterRequest,
    "heartbeat": proto.HeartbeatRequest,
    "commands": proto.CommandsRequest,
    "reports": proto.ReportRequest,
}


def fast_route(scope: Scope) -> tuple[str, str] | None:
    """(operation, host) of an agent request the fast path answers (host "" for register); None: not one."""
    if scope["type"] != "http" or scope["method"] != "POST" or scope.get("root_path"):
        return None
    path: str = scope["path"]
    if not path.startswith(PREFIX):
        return None
    rest = path[len(PREFIX) :]
    if rest == "register":
        return "register", ""
    host, _, op = rest.partition("/")
    # As the routes' ``{host}`` matches: one non-empty segment.
    if not host or op not in ("heartbeat", "commands", "reports"):
        return None
    return op, host


_AUTHORIZATION = frozenset({b"authorization"})


class AgentFastPath(FastPath):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = fast_route(scope)
        if route is None:
            await self.app(scope, receive, send)
            return
        got = await self.read_json(scope, receive, send, _AUTHORIZATION)
        if got is None:
            return
        headers, body = got
        op, host = route
        try:
            message = _BODIES[op].model_validate_json(body)
        except ValidationError:  # FastAPI answers as it would have: its 422
            await self.app(scope, replay(body, receive), send)
            return
        try:
            response = await self._answer(op, host, message, headers.get(b"authorization"), scope, receive)
        except GpupoolError as e:
            response = self._error_response(e)
        await response(scope, receive, send)

    async def _answer(
        self, op: str, host: str, message: BaseModel, authorization: str | None, scope: Scope, receive: Receive
    ) -> Response:
        s = self._srv
        reply: BaseModel | None
        if isinstance(message, proto.RegisterRequest):
            reply = await agent_register(s, message, authorization, _peer(scope))
        elif isinstance(message, proto.HeartbeatRequest):
            reply = await agent_heartbeat(s, host, message, authorization)
        elif isinstance(message, proto.CommandsRequest):
            reply = await agent_commands(s, host, message, authorization, receive)
        else:
            assert isinstance(message, proto.ReportRequest), op
            await agent_reports(s, host, message, authorization)
            reply = None
        if reply is None:
            return Response(status_code=204)
        return Response(reply.model_dump_json(), media_type="application/json")
