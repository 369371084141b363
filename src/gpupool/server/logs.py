"""The server's logs: plain text or one JSON object per line, each line with the request id it belongs to.

A request's id is its ``X-Request-ID`` header when that is a sane token (a load balancer's or a client's),
otherwise a fresh one; it goes back in the response's ``X-Request-ID`` and onto every log line written while
the request is served (the access line included), through a context variable that FastAPI's worker threads
inherit. ``log_config`` is handed to uvicorn, which applies it to its loggers and the root one alike.
"""

from __future__ import annotations

import logging
import re
import secrets
from contextvars import ContextVar
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpupool.domain.errors import InputError

REQUEST_ID: ContextVar[str] = ContextVar("gpupool_request_id", default="-")
_SANE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
FORMATS = ("text", "json")


class RequestIds:
    """ASGI middleware: a request id per HTTP request, in the context while it is served and in the reply."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"x-request-id"), "")
        rid = given if _SANE.fullmatch(given) else secrets.token_hex(8)
        header = (b"x-request-id", rid.encode("latin-1"))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), header]}
            await send(message)

        token = REQUEST_ID.set(rid)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            REQUEST_ID.reset(token)


class RequestIdFilter(logging.Filter):
    """Puts the current request id on every record (``-`` outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        return True


class AccessFields(logging.Filter):
    """uvicorn's access records carry (client, method, path, HTTP version, status) as message arguments;
    as fields of their own they become keys of the JSON line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and len(record.args) == 5:
            record.client, record.method, record.path, _, record.status = record.args
        return True


def log_config(level: str, fmt: str) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for the server process: ``fmt`` is ``text`` or ``json``."""
    if fmt not in FORMATS:
        raise InputError(f"{fmt!r} is not a log format: use one of {', '.join(FORMATS)}", source="log_format")
    formatter: dict[str, Any] = {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"}
    if fmt == "json":
        formatter = {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(levelname)s %(name)s %(message)s %(request_id)s",
            "rename_fields": {"levelname": "level", "name": "logger"},
            "reserved_attrs": [*RESERVED_ATTRS, "color_message"],  # uvicorn's copy of the message with ANSI codes
            "timestamp": True,
        }
    filters = {"request_id": {"()": RequestIdFilter}, "access_fields": {"()": AccessFields}}
    handlers = {
        "default": {"class": "logging.StreamHandler", "formatter": "default", "filters": ["request_id"]},
        "access": {
            "class": "logging.StreamHandler",
            "formatter": "default",
            "filters": ["request_id", "access_fields"],
        },
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": filters,
        "formatters": {"default": formatter},
        "handlers": handlers,
        "root": {"handlers": ["default"], "level": level.upper()},
        "loggers": {
            "uvicorn": {"handlers": [], "level": level.upper(), "propagate": True},
            "uvicorn.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
        },
    }
