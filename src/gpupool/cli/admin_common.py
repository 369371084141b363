"""What the ``gpupool admin`` command groups share: the ``-f FILE`` and ``--format`` options, checking flags
with the API's own models (a bad value is one line naming its flag), and times for people.

``-f`` is the input file here (as kubectl's), so the listings take ``--format`` alone, without a short form.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel, ValidationError

from gpupool.cli.client_cmds import Fmt
from gpupool.domain.errors import InputError
from gpupool.domain.units import parse_when

M = TypeVar("M", bound=BaseModel)

FileOpt = Annotated[
    Path | None, typer.Option("--file", "-f", help="a YAML file of entries (see the examples below)", dir_okay=False)
]
FormatOpt = Annotated[Fmt, typer.Option("--format", help="table, csv or json")]


def checked(model: type[M], flags: dict[str, str], **fields: Any) -> M:
    """The request ``fields`` make, checked as the server checks it; a bad value is one line naming its flag
    (``flags`` maps a field to the flag that gave it)."""
    try:
        return model.model_validate(fields)
    except ValidationError as e:
        err = e.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        what = err["msg"].removeprefix("Value error, ")
        raise InputError(f"{what} (got {err.get('input')!r})", source=flags.get(name, f"--{name}")) from None


def file_or_flags(file: Path | None, named: str | None, what: str) -> None:
    """Exactly one of a file and the flags naming one entry: never both, never neither."""
    if file is not None and named is not None:
        raise InputError(f"give {what} or --file, not both", source="--file")
    if file is None and named is None:
        raise InputError(f"give {what}, or --file FILE", source=what)


def when(at: str | None) -> float | None:
    """``--at``: a time for people (``2026-12-07T08:00+08:00``, ``now+3hours``) as epoch seconds."""
    return None if at is None else parse_when(at, time.time(), "--at")


def human(t: float | None, tz: str = "UTC") -> str:
    """Epoch seconds as a local time in ``tz`` (the calendar's zone) to the minute; ``-`` for none."""
    if t is None:
        return "-"
    from zoneinfo import ZoneInfo  # noqa: PLC0415  (only the calendar listings need the zone database)

    return datetime.fromtimestamp(t, UTC).astimezone(ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M %Z")
