"""The web dashboard: server-rendered pages and static assets shipped inside the package.
May import: schemas, fabric, domain, fastapi.
Must not import: store, scheduler internals, sim engine."""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from gpupool.web.api import TelemetrySource
from gpupool.web.api import build_router as build_api_router
from gpupool.web.fabricview import GpuTelemetry, HostTelemetry, PortTelemetry
from gpupool.web.pages import build_router as build_page_router
from gpupool.web.pages import load_assets

__all__ = ["GpuTelemetry", "HostTelemetry", "PortTelemetry", "TelemetrySource", "mount"]


def mount(app: FastAPI, *, telemetry: TelemetrySource | None = None) -> None:
    """Serve the dashboard on ``app``: pages at ``/`` and ``/ui/<page>``, data at ``/ui/api``, assets at
    ``/ui/static``. ``app.state.server`` must be the server object ``create_app`` stores there."""
    app.include_router(build_page_router(load_assets()))
    app.add_middleware(PageGzip)
    app.include_router(build_api_router(telemetry))
    static = resources.files("gpupool.web") / "static"
    app.mount("/ui/static", StaticFiles(directory=str(static)), name="ui-static")


class PageGzip:
    """gzip for what browsers read: the dashboard (pages, scripts, ``/ui/api``) and GETs of ``/v1/jobs...``
    (the jobs page, logs). Agents' routes and submits are left alone: their replies are small and hot."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.gzip = GZipMiddleware(app, minimum_size=500, compresslevel=6)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path.startswith("/ui") or (scope.get("method") == "GET" and path.startswith("/v1/jobs")):
            await self.gzip(scope, receive, send)
        else:
            await self.app(scope, receive, send)
