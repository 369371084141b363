"""``gpupool admin pools`` and ``gpupool admin calendars``: the pools jobs name, and the day/night calendars
that move a share of hosts from one pool to another (inference by day, training by night).

A calendar is a TOML text (``domain.calendar``): a time zone, a default pool that owns what no rule gives
away, and rules that give a pool a share of some scalable units or hosts while a window is open. It is stored
with a pool; the scheduler merges every pool's. Calendars are checked here with the server's parser before
they are sent (``calendars check`` needs no server at all).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from gpupool.cli.admin_common import FileOpt, FormatOpt, checked, file_or_flags, human, when
from gpupool.cli.admin_tenants import examples
from gpupool.cli.client_cmds import Fmt, _client, _emit
from gpupool.client import ApiError
from gpupool.client.adminfile import PoolEntry, read_admin_file, read_calendar
from gpupool.domain.calendar import parse_calendar
from gpupool.domain.errors import InputError
from gpupool.schemas import admin, api

pools_app = typer.Typer(help="Pools: list, create or replace (with a calendar), delete.", no_args_is_help=True)
calendars_app = typer.Typer(
    help="Pool calendars: show, check, set, clear, and what they give each pool now.", no_args_is_help=True
)

PoolArg = Annotated[str, typer.Argument(help="the pool's name")]
CalendarFile = Annotated[Path, typer.Argument(help="a TOML calendar file", dir_okay=False)]
At = Annotated[str | None, typer.Option("--at", help="when: 2026-12-07T08:00+08:00, now+6hours (default: now)")]


@pools_app.command("list", epilog=examples("gpupool admin pools list", "gpupool admin pools list --format json"))
def pools_list(fmt: FormatOpt = Fmt.TABLE) -> None:
    """List the pools: calendar version, time zone, default pool and rules."""
    with _client() as c:
        out = c.pools().pools
    rows: list[list[Any]] = []
    for p in out:
        cal = parse_calendar(p.calendar_toml, f"pool {p.name}'s stored calendar")
        rows.append([p.name, p.version, cal.timezone if cal.rules else "-", cal.default_pool, len(cal.rules)])
    _emit(fmt, ["pool", "version", "timezone", "default_pool", "rules"], rows, [p.model_dump() for p in out])


@pools_app.command(
    "set",
    epilog=examples(
        "gpupool admin pools set training",
        "gpupool admin pools set inference --calendar deploy/examples/calendar.toml",
        "gpupool admin pools set -f deploy/examples/pools.yaml   # every pool in its pools: list",
    ),
)
def pools_set(
    name: Annotated[str | None, typer.Argument(help="the pool's name", show_default=False)] = None,
    calendar: Annotated[
        Path | None, typer.Option("--calendar", help="its calendar, a TOML file (default: none)", dir_okay=False)
    ] = None,
    file: FileOpt = None,
) -> None:
    """Create or replace a pool, with the calendar given (none: the pool's calendar is emptied), or every pool
    of a file's pools: list. To change only a calendar, see ``gpupool admin calendars set``."""
    file_or_flags(file, name, "NAME")
    if file is not None:
        if calendar is not None:
            raise InputError("a file gives each pool's calendar: drop --calendar", source="--calendar")
        todo = list(read_admin_file(file, ("pools",)).pools)
    else:
        text = "" if calendar is None else read_calendar(calendar)
        todo = [checked(PoolEntry, {"name": "NAME"}, name=name, calendar_toml=text)]
    with _client() as c:
        for p in todo:
            out = c.put_pool(p.name, p.body())
            typer.echo(f"pool {out.name} set (version {out.version})")


@pools_app.command("delete", epilog=examples("gpupool admin pools delete trial   # refused while quotas name it"))
def pools_delete(name: PoolArg) -> None:
    """Delete a pool and its calendar; one that quotas still name is refused (delete those first)."""
    with _client() as c:
        c.delete_pool(name)
    typer.echo(f"pool {name} deleted")


# -- calendars -------------------------------------------------------------------------------------------------
@calendars_app.command("show", epilog=examples("gpupool admin calendars show inference > calendar.toml"))
def calendars_show(pool: PoolArg) -> None:
    """Print a pool's calendar as stored (TOML), to edit and set again."""
    with _client() as c:
        p = _pool(c.pools().pools, pool)
    typer.echo(p.calendar_toml, nl=not p.calendar_toml or not p.calendar_toml.endswith("\n"))


@calendars_app.command(
    "check",
    epilog=examples(
        "gpupool admin calendars check deploy/examples/calendar.toml",
        "gpupool admin calendars check calendar.toml --at 2026-12-07T23:00+08:00",
    ),
)
def calendars_check(file: CalendarFile, at: At = None, fmt: FormatOpt = Fmt.TABLE) -> None:
    """Check a calendar file (no server needed) and show what it gives each pool at a time."""
    cal = parse_calendar(read_calendar(file), str(file))
    now = when(at)
    _show(admin.calendar_out("(file)", 0, cal, time.time() if now is None else now), fmt)


@calendars_app.command(
    "set",
    epilog=examples(
        "gpupool admin calendars set inference deploy/examples/calendar.toml",
        "gpupool admin calendars show inference > c.toml && $EDITOR c.toml && gpupool admin calendars set"
        " inference c.toml",
    ),
)
def calendars_set(pool: PoolArg, file: CalendarFile) -> None:
    """Replace an existing pool's calendar; refused if someone changed it since it was read (run it again)."""
    _replace(pool, read_calendar(file))


@calendars_app.command("clear", epilog=examples("gpupool admin calendars clear inference"))
def calendars_clear(pool: PoolArg) -> None:
    """Empty a pool's calendar: its rules stop moving hosts at the scheduler's next cycle."""
    _replace(pool, "")


@calendars_app.command(
    "now",
    epilog=examples("gpupool admin calendars now inference", "gpupool admin calendars now inference --at now+12hours"),
)
def calendars_now(pool: PoolArg, at: At = None, fmt: FormatOpt = Fmt.TABLE) -> None:
    """What a pool's stored calendar gives each pool now (or --at), since when, and the next change."""
    t = when(at)
    with _client() as c:
        _show(c.calendar(pool, t), fmt)


def _pool(pools: list[api.PoolOut], name: str) -> api.PoolOut:
    found = next((p for p in pools if p.name == name), None)
    if found is None:
        raise InputError(f"pool {name!r} is not defined (gpupool admin pools set {name} makes it)", source="POOL")
    return found


def _replace(pool: str, text: str) -> None:
    """Put ``text`` as ``pool``'s calendar, guarded by the version read: a concurrent change is not lost."""
    with _client() as c:
        p = _pool(c.pools().pools, pool)
        try:
            out = c.put_pool(pool, api.PoolIn(calendar_toml=text, expected_version=p.version))
        except ApiError as e:
            if e.status != 409:
                raise
            raise InputError(f"changed by someone else since it was read: run it again ({e})", source=pool) from None
    typer.echo(f"pool {out.name} calendar {'set' if text else 'cleared'} (version {out.version})")


def _show(cal: admin.CalendarOut, fmt: Fmt) -> None:
    tz = cal.timezone
    rows: list[list[Any]] = [
        [r.pool, _hosts(r), f"{r.share_now:g}", human(r.since_s, tz), _windows(r), f"{r.share:g}/{r.share_outside:g}"]
        for r in cal.rules
    ]
    if fmt is Fmt.TABLE:
        typer.echo(
            f"at {human(cal.at_s, tz)}; default pool {cal.default_pool}; next change {human(cal.next_change_s, tz)}"
        )
    _emit(fmt, ["pool", "hosts", "share_now", "since", "windows", "share_in/out"], rows, cal.model_dump())


_DAY = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def _hosts(r: admin.CalendarRuleOut) -> str:
    return ",".join([*(f"su{s}" for s in r.sus), *r.hosts])


def _windows(r: admin.CalendarRuleOut) -> str:
    return " ".join(f"{','.join(_DAY[d] for d in w.days)} {w.start}-{w.end}" for w in r.windows) or "always"
