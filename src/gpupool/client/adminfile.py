"""The operator's configuration files (``gpupool admin ... -f FILE``): tenants, quotas and pools in YAML.

One file may hold any of the three sections; each command reads its own (``gpupool admin apply`` reads all)::

    tenants:
      - {name: vision, weight: 2}
    pools:
      - name: training
        calendar: calendar.toml          # a TOML calendar file, relative to this file (or calendar_toml: inline)
    quotas:
      - {tenant: vision, pool: training, gpu_model: H100, nominal_gpus: 64, borrowing_limit_gpus: 32}

Every entry is checked with the API's own models (``schemas.api.TenantIn``, ``QuotaIn``, ``PoolIn``) and every
calendar with the domain's parser before anything is sent, so a bad value is one ParseError naming the file,
the line and the entry's field (``quotas[1].nominal_gpus``), and nothing reaches the server.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError

from gpupool.client.jobfile import _load, describe, line_of
from gpupool.client.textfile import read_text
from gpupool.domain.calendar import parse_calendar
from gpupool.domain.errors import ParseError
from gpupool.schemas import api
from gpupool.schemas.base import Text

SECTIONS = ("tenants", "pools", "quotas")


class QuotaEntry(api.QuotaIn):
    """A quota as the file gives it: the API's ``QuotaIn`` and the tenant it belongs to."""

    tenant: Text = Field(min_length=1, max_length=128)

    def body(self) -> api.QuotaIn:
        return api.QuotaIn.model_validate(self.model_dump(exclude={"tenant"}))


class PoolEntry(api.PoolIn):
    """A pool as the file gives it: a name, and its calendar inline (``calendar_toml``) or as a file."""

    name: Text = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    calendar: Text | None = Field(default=None, min_length=1, max_length=4096, description="a TOML file")

    def body(self) -> api.PoolIn:
        return api.PoolIn(calendar_toml=self.calendar_toml, expected_version=self.expected_version)


@dataclass(frozen=True, slots=True)
class AdminFile:
    """What a file holds, in file order within each section."""

    tenants: tuple[api.TenantIn, ...] = ()
    pools: tuple[PoolEntry, ...] = ()
    quotas: tuple[QuotaEntry, ...] = ()


def read_calendar(path: Path) -> str:
    """A calendar file's TOML, parsed (a bad one names its file and line); the text is what is stored."""
    text = read_text(path, "calendar file")
    parse_calendar(text, str(path))
    return text


def read_admin_file(path: Path, wanted: tuple[str, ...] = SECTIONS) -> AdminFile:
    """The sections ``wanted`` of an admin file, every entry checked; a file with none of them is refused."""
    source = str(path)
    data, tree = _load(read_text(path, "file"), source)
    if not isinstance(data, dict):
        raise ParseError(f"an admin file is a mapping with {', '.join(SECTIONS)}", source=source, line=1)
    for key in data:
        if key not in SECTIONS:
            raise ParseError(
                f"{key}: unknown section (an admin file has {', '.join(SECTIONS)})",
                source=source,
                line=line_of(tree, (key,)),
            )
    if not any(k in data for k in wanted):
        raise ParseError(f"the file has no {' or '.join(f'{k}:' for k in wanted)} section", source=source, line=1)
    tenants = _entries(data, tree, "tenants", api.TenantIn, source) if "tenants" in wanted else []
    pools = _entries(data, tree, "pools", PoolEntry, source) if "pools" in wanted else []
    pools = [_with_calendar(p, i, path, tree) for i, p in enumerate(pools)]
    quotas = _entries(data, tree, "quotas", QuotaEntry, source) if "quotas" in wanted else []
    return AdminFile(tuple(tenants), tuple(pools), tuple(quotas))


def _entries(data: dict[str, Any], tree: yaml.Node | None, key: str, model: type[Any], source: str) -> list[Any]:
    items = data.get(key, [])
    if items is None:
        return []
    if not isinstance(items, list):
        raise ParseError(f"{key}: a list of entries (- name: ...)", source=source, line=line_of(tree, (key,)))
    out = []
    for i, item in enumerate(items):
        try:
            out.append(model.model_validate(item))
        except ValidationError as e:
            err = e.errors()[0]
            loc = (key, i, *err["loc"])
            message = describe(err, loc).replace("see `gpupool spec schema`", f"see gpupool admin {key} --help")
            raise ParseError(message, source=source, line=line_of(tree, loc)) from None
    return out


def _with_calendar(p: PoolEntry, i: int, path: Path, tree: yaml.Node | None) -> PoolEntry:
    """The entry with its calendar read (``calendar:`` a file beside this one) and parsed."""
    line = line_of(tree, ("pools", i, "calendar"))
    if p.calendar is not None and p.calendar_toml:
        raise ParseError(f"pools[{i}]: give calendar (a file) or calendar_toml, not both", source=str(path), line=line)
    if p.calendar is not None:
        return p.model_copy(update={"calendar_toml": read_calendar(path.parent / p.calendar), "calendar": None})
    try:
        parse_calendar(p.calendar_toml, f"{path}: pools[{i}].calendar_toml")
    except ParseError as e:
        raise ParseError(e.reason, source=str(path), line=line_of(tree, ("pools", i, "calendar_toml"))) from None
    return p
