"""The web dashboard: server-rendered pages and static assets shipped inside the package.
May import: schemas, fabric, domain, fastapi.
Must not import: store, scheduler internals, sim engine."""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from gpupool.web.api import TelemetrySource
from gpupool.web.api import build_router as build_api_router
from gpupool.web.pages import build_router as build_page_router
from gpupool.web.pages import load_assets
from gpupool.web.views import GpuTelemetry, HostTelemetry, PortTelemetry

__all__ = ["GpuTelemetry", "HostTelemetry", "PortTelemetry", "TelemetrySource", "mount"]


def mount(app: FastAPI, *, telemetry: TelemetrySource | None = None) -> None:
    """Serve the dashboard on ``app``: pages at ``/`` and ``/ui/<page>``, data at ``/ui/api``, assets at
    ``/ui/static``. ``app.state.server`` must be the server object ``create_app`` stores there."""
    app.include_router(build_page_router(load_assets()))
    app.include_router(build_api_router(telemetry))
    static = resources.files("gpupool.web") / "static"
    app.mount("/ui/static", StaticFiles(directory=str(static)), name="ui-static")
