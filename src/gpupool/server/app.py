"""The FastAPI application: error mapping, lifespan (the scheduling loop), health, metrics and the agent routes.

``create_app(settings)`` builds everything from one settings object; nothing is global. Errors carry the
domain's stable codes: bad input is a 422 in FastAPI's own validation shape (naming the field), a missing
or foreign record a 404, a job that can never run a 422 with its code (``NO_MATCHING_NODES``, ``UNKNOWN_POOL``,
``UNSCHEDULABLE``) and why, a lost race or a forbidden state change a 409, a bad token a 401, a database that
cannot answer or write a 503 with its reason (``STORE_UNAVAILABLE``), a full submit queue a 503 and a tenant
at its cap of pending jobs a 429; those three carry ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Annotated

from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpupool.domain.errors import (
    ConflictError,
    GpupoolError,
    InputError,
    NotFoundError,
    StoreUnavailableError,
    SubmitQueueFullError,
    TenantPendingLimitError,
    TransitionError,
    UnknownNameError,
)
from gpupool.schemas import api
from gpupool.server.accounting import router as accounting_router
from gpupool.server.admin_routes import router as admin_router
from gpupool.server.agent_routes import AgentFastPath
from gpupool.server.agent_routes import router as agent_router
from gpupool.server.agentlogs import AgentUnreachableError, LogFetcher, LogsBusyError
from gpupool.server.auth import AuthError
from gpupool.server.core import Server, build_server
from gpupool.server.door import AuthFailures, BodyLimit
from gpupool.server.fastsubmit import SubmitFastPath
from gpupool.server.feasible import UnknownPoolError, UnschedulableError
from gpupool.server.gateway import ProtocolUnsupportedError
from gpupool.server.job_routes import router as job_router
from gpupool.server.labels import NoMatchingNodesError
from gpupool.server.logs import RequestIds
from gpupool.server.openapi import document
from gpupool.server.routes import ForbiddenError, Srv, router
from gpupool.server.settings import Settings
from gpupool.server.token_routes import router as token_router
from gpupool.web import mount as mount_dashboard

log = logging.getLogger("gpupool.server")

_STATUS: tuple[tuple[type[GpupoolError], int], ...] = (
    (AuthError, 401),
    (ForbiddenError, 403),
    (NotFoundError, 404),
    (ConflictError, 409),
    (TransitionError, 409),
    (AgentUnreachableError, 502),
    (NoMatchingNodesError, 422),  # a job that can never run: refused at submit with why (``server.feasible``)
    (UnknownPoolError, 422),
    (UnschedulableError, 422),
    (ProtocolUnsupportedError, 426),
    (TenantPendingLimitError, 429),
    (SubmitQueueFullError, 503),
    (LogsBusyError, 503),
    (StoreUnavailableError, 503),
)


def _error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, GpupoolError)
    return error_response(exc)


def error_response(exc: GpupoolError) -> JSONResponse:
    """A domain error's answer: its stable code, and the status that code means."""
    if isinstance(exc, (InputError, UnknownNameError)):
        where = getattr(exc, "source", "") or "body"
        detail = [{"loc": where.split("."), "msg": getattr(exc, "reason", exc.message), "type": exc.code}]
        return JSONResponse({"detail": detail}, status_code=422)
    status = next((code for kind, code in _STATUS if isinstance(exc, kind)), 400)
    body: dict[str, object] = {"code": exc.code, "message": exc.message}
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if exc.retry_after_s is not None:
        headers = {"Retry-After": str(math.ceil(exc.retry_after_s))}
    if isinstance(exc, StoreUnavailableError):
        body["reason"] = exc.reason
    return JSONResponse(body, status_code=status, headers=headers)


def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (a body that is not JSON, an unknown route or method) in the ``ErrorOut`` shape
    every operation declares; ``detail`` stays for clients that read Starlette's shape."""
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code < 400 or exc.status_code in (204, 304):
        return Response(status_code=exc.status_code, headers=exc.headers)
    body = {"code": f"HTTP_{exc.status_code}", "message": str(exc.detail), "detail": exc.detail}
    return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)


def _errors() -> dict[int | str, dict[str, object]]:
    return {code: {"model": api.ErrorOut} for code in (400, 401, 403, 404, 409, 429, 503)}


async def is_admin(srv: Server, authorization: str) -> bool | None:
    """Whether ``authorization`` carries an admin token, None a token of nobody (the body limit's check)."""
    try:
        who = srv.auth.bootstrap(authorization)
        if who is None:
            who = await run_in_threadpool(srv.auth.principal, authorization)
    except AuthError:
        return None
    return who.admin


def create_app(
    settings: Settings,
    *,
    clock: Callable[[], float] | None = None,
    run_loop: bool = True,
) -> FastAPI:
    srv = build_server(settings) if clock is None else build_server(settings, clock=clock)
    logs = LogFetcher(settings.log_fetch_timeout_s, settings.log_fetches)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # The intake's progress is watched while the loop runs: the loop judges nodes lost on it.
        watch = asyncio.create_task(srv.beats.watch()) if run_loop else None
        if run_loop:
            srv.loop.start()
        srv.push.refresher.start()
        srv.eta.start()
        try:
            yield
        finally:
            if watch is not None:
                watch.cancel()
            await logs.aclose()
            srv.close()

    # /docs serves Swagger UI from the package (see openapi.py): FastAPI's loads it and ReDoc from a CDN.
    # FastAPI's own OpenTelemetry hooks off: gpupool exports Prometheus metrics and JSON logs, and with the hooks on
    # every request asks OpenTelemetry for its providers (environment lookups, ~5 us) before any middleware runs.
    app = FastAPI(
        title="gpupool",
        version="1",
        lifespan=lifespan,
        responses=_errors(),
        docs_url=None,
        redoc_url=None,
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.server = srv
    app.state.log_fetcher = logs
    app.add_exception_handler(GpupoolError, _error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    # JSON submits and the agents' requests skip FastAPI's per-request machinery (see fastsubmit and
    # agent_routes); the routes serve the rest and document the operations.
    app.add_middleware(SubmitFastPath, server=srv, error_response=error_response)
    app.add_middleware(AgentFastPath, server=srv, error_response=error_response)
    # The door (see door.py), outside the fast path: a body past its limit is refused before any of it is
    # read, and (outside that) a flood of bad tokens before any check of them.
    app.add_middleware(
        BodyLimit,
        max_body_bytes=settings.max_body_bytes,
        max_admin_body_bytes=settings.max_admin_body_bytes,
        body_timeout_s=settings.body_timeout_s,
        is_admin=partial(is_admin, srv),
    )
    app.add_middleware(AuthFailures, burst=settings.auth_fail_burst, per_s=settings.auth_fail_per_s)
    # Outermost: every request, the fast path's included, gets its id before anything logs.
    app.add_middleware(RequestIds)

    @app.get("/healthz", response_model=api.HealthOut, responses={503: {"model": api.HealthOut}})
    def healthz(s: Srv) -> Response:
        """200 while the store takes writes, else 503 with the reason: a balancer sends submits elsewhere."""
        fault = s.store.write_fault()
        out = api.HealthOut(
            ok=fault is None,
            leader=s.loop.is_leader,
            store_writable=fault is None,
            store_reason="" if fault is None else fault.reason,
        )
        headers = None if fault is None else {"Retry-After": str(math.ceil(fault.retry_after_s or 1))}
        return Response(out.model_dump_json(), 200 if fault is None else 503, headers, "application/json")

    @app.get(
        "/metrics", response_class=Response, responses={401: {"model": api.ErrorOut}, 403: {"model": api.ErrorOut}}
    )
    def metrics(s: Srv, authorization: Annotated[str | None, Header()] = None) -> Response:
        """Prometheus text. It names tenants and nodes, so it needs an admin token or ``metrics_token``,
        unless ``metrics_open`` is set."""
        if not s.settings.metrics_open and not s.auth.may_scrape(authorization):
            raise ForbiddenError("/metrics needs an admin token or the metrics token")
        return Response(s.metrics.render(), media_type="text/plain; version=0.0.4")

    # The agents' routes first (see agent_routes; their fast path above answers JSON bodies).
    app.include_router(agent_router)

    # The routers, the dashboard's too, after the agents' routes: a request is matched against the routes in
    # order, and a fleet's beats, polls and reports (thousands a second) would each be tried against every
    # API route first. The dashboard at / and /ui, behind the same tokens, with the gateway's latest samples.
    mount_dashboard(app, telemetry=srv.gateway.telemetry)
    app.include_router(router)
    app.include_router(job_router)
    app.include_router(accounting_router)
    app.include_router(token_router)
    app.include_router(admin_router)
    document(app)  # tags, the security scheme and /docs, once every route is in
    return app
