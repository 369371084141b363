"""``gpupool server``: the control-plane server in one process (uvicorn), settings from a file and GPUPOOL_*."""

from __future__ import annotations

import faulthandler
import logging.config
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from gpupool.domain.errors import InputError, StoreUnavailableError
from gpupool.server.app import create_app
from gpupool.server.logs import log_config
from gpupool.server.serve import serve
from gpupool.server.settings import Settings, load_settings, print_config


def _check_tls(settings: Settings) -> None:
    """A certificate and its key, both or neither, both files."""
    if not settings.tls_cert and not settings.tls_key:
        return
    for name, path in (("tls_cert", settings.tls_cert), ("tls_key", settings.tls_key)):
        if not path:
            raise InputError("tls_cert and tls_key go together: give both or neither", source=name)
        if not Path(path).is_file():
            raise InputError(f"no such file: {path}", source=name)


def server(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML settings file")] = None,
    host: Annotated[str | None, typer.Option(help="listen address (GPUPOOL_HOST)")] = None,
    port: Annotated[int | None, typer.Option(min=0, max=65535, help="listen port (GPUPOOL_PORT)")] = None,
    database_url: Annotated[str | None, typer.Option(help="database URL (GPUPOOL_DATABASE_URL)")] = None,
    print_config_: Annotated[
        bool,
        typer.Option(
            "--print-config",
            help="Print the effective settings (file, GPUPOOL_* and these options; secrets hidden) as YAML, and exit.",
        ),
    ] = False,
) -> None:
    """Run the gpupool server: REST API, agent gateway and (when leader) the scheduling loop."""
    settings = load_settings(config)
    overrides: dict[str, Any] = {
        k: v for k, v in (("host", host), ("port", port), ("database_url", database_url)) if v is not None
    }
    if overrides:
        settings = replace(settings, **overrides)
    if print_config_:
        typer.echo(print_config(settings), nl=False)
        return
    _check_tls(settings)
    # Configured here, before the app opens its store, so the migrations' lines are formatted too; uvicorn
    # then only sets its loggers' levels (log_config=None).
    logging.config.dictConfig(log_config(settings.log_level, settings.log_format))
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    # A fatal signal (SIGSEGV, SIGBUS: a mapped file truncated under SQLite) leaves every thread's stack on
    # stderr instead of a silent death.
    faulthandler.enable()
    try:
        app = create_app(settings)
    except StoreUnavailableError as e:  # the first contact with the database: name the setting to fix
        raise InputError(e.message, source="database_url") from None
    serve(app, settings)
