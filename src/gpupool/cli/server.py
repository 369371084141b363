"""``gpupool server``: the control-plane server in one process (uvicorn), settings from a file and GPUPOOL_*."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from gpupool.server.settings import load_settings


def server(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML settings file")] = None,
    host: Annotated[str | None, typer.Option(help="listen address (GPUPOOL_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="listen port (GPUPOOL_PORT)")] = None,
    database_url: Annotated[str | None, typer.Option(help="database URL (GPUPOOL_DATABASE_URL)")] = None,
) -> None:
    """Run the gpupool server: REST API, agent gateway and (when leader) the scheduling loop."""
    settings = load_settings(config)
    overrides: dict[str, Any] = {
        k: v for k, v in (("host", host), ("port", port), ("database_url", database_url)) if v is not None
    }
    if overrides:
        settings = replace(settings, **overrides)
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Imported here, not at the top: FastAPI, uvicorn and the scheduler cost ~0.7 s to import, and every client
    # command (``gpupool jobs``) loads this module through the command registry.
    import uvicorn  # noqa: PLC0415

    from gpupool.server.app import create_app  # noqa: PLC0415

    app = create_app(settings)
    # access_log off: request lines carry no secrets here, but at thousands of submits/s they cost a core.
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level, access_log=False)
