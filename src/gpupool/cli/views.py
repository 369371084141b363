"""The operator's views, like Slurm's squeue, sinfo and scontrol show job: ``gpupool jobs``, ``gpupool job ID``,
``gpupool nodes``, ``gpupool pools``. Times in and out are human (``cli.human``); the server filters, sorts
and pages (``GET /v1/jobs``), these commands only choose and print."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from gpupool.cli.client_cmds import Fmt, FmtOpt, _client, _emit, _job_or_array
from gpupool.cli.human import NONE, ago, duration, read_when, when
from gpupool.client import Client
from gpupool.domain.errors import InputError
from gpupool.schemas.api import ArrayOut, JobDetail, JobOut, RankOut

_OVER = ("finished", "failed", "cancelled", "timeout")
_STATES = ("pending", "placed", "running", *_OVER)
_SORTS = ("default", "submitted", "name", "state", "tenant", "gpus", "runtime")
_PAGE = 1000  # the API's largest page


def _gpus(j: JobOut) -> str:
    return f"{j.gpus:g}"


def _reason(j: JobOut) -> str:
    """Why it waits (pending), or how it ended when not well; nothing for a job running or finished."""
    return j.reason if j.state == "pending" or j.state in ("failed", "cancelled", "timeout") else ""


# Every column ``-o`` may name: header -> the cell of a job (``now`` for relative times).
COLUMNS: dict[str, Any] = {
    "id": lambda j, now: j.id,
    "name": lambda j, now: j.name,
    "state": lambda j, now: j.state,
    "tenant": lambda j, now: j.tenant,
    "pool": lambda j, now: j.pool,
    "priority": lambda j, now: j.priority,
    "tasks": lambda j, now: j.tasks,
    "gpus": lambda j, now: _gpus(j),
    "submitted": lambda j, now: when(j.submit_time_s),
    "age": lambda j, now: ago(j.submit_time_s, now),
    "started": lambda j, now: when(j.started_s, NONE),
    "ended": lambda j, now: when(j.ended_s, NONE),
    "runtime": lambda j, now: duration(j.runtime_s),
    "time_limit": lambda j, now: duration(j.time_limit_s),
    "exit": lambda j, now: NONE if j.exit_code is None else j.exit_code,
    "position": lambda j, now: NONE if j.queue_position is None else j.queue_position,
    "attempt": lambda j, now: j.attempt,
    "array": lambda j, now: j.array_id or NONE,
    "reason_code": lambda j, now: j.reason_code or NONE,
    "reason": lambda j, now: _reason(j),
}
DEFAULT_COLUMNS = "id,state,tenant,pool,gpus,submitted,runtime,exit,name,reason"


def columns(spec: str) -> list[str]:
    """``-o id,state,...``: known names, at least one, each once."""
    names = [c.strip().lower() for c in spec.split(",") if c.strip()]
    unknown = [c for c in names if c not in COLUMNS]
    if unknown or not names:
        what = f"unknown column {unknown[0]!r}" if unknown else "no column named"
        raise InputError(f"{what}; columns: {', '.join(COLUMNS)}", source="-o/--columns")
    if len(set(names)) != len(names):
        raise InputError(f"a column named twice in {spec!r}", source="-o/--columns")
    return names


def _check_choice(value: str, allowed: tuple[str, ...], where: str) -> str:
    if value not in allowed:
        raise InputError(f"{value!r} is not one of {', '.join(allowed)}", source=where)
    return value


def _fetch(c: Client, limit: int, **query: Any) -> list[JobOut]:
    """Up to ``limit`` jobs of the query, a page of at most 1,000 at a time."""
    out: list[JobOut] = []
    while len(out) < limit:
        page = c.jobs(limit=min(_PAGE, limit - len(out)), offset=len(out), **query)
        out += page.jobs
        if not page.jobs or len(out) >= page.total:
            break
    return out


def jobs(
    all_: Annotated[bool, typer.Option("--all", "-a", help="every job, not only active ones")] = False,
    state: Annotated[
        list[str] | None, typer.Option("--state", "-t", help="only this state (repeatable): " + ", ".join(_STATES))
    ] = None,
    tenant: Annotated[str | None, typer.Option(help="only this tenant's (admin tokens)")] = None,
    pool: Annotated[str | None, typer.Option(help="only this pool's")] = None,
    array: Annotated[str | None, typer.Option(help="only the elements of this array")] = None,
    name: Annotated[
        str | None, typer.Option("--name", "-q", help="a part of the name (any case), or an id's start")
    ] = None,
    since: Annotated[str | None, typer.Option(help="submitted at or after: 2026-12-01, now-2h, ISO")] = None,
    until: Annotated[str | None, typer.Option(help="submitted before: 2026-12-01, now-2h, ISO")] = None,
    sort: Annotated[
        str, typer.Option(help="default (active first, newest first), " + ", ".join(_SORTS[1:]))
    ] = "default",
    order: Annotated[str | None, typer.Option(help="asc or desc (default: the sort's own)")] = None,
    limit: Annotated[int, typer.Option(help="at most this many")] = 100,
    cols: Annotated[
        str, typer.Option("--columns", "-o", help="columns, comma-separated: " + ", ".join(COLUMNS))
    ] = DEFAULT_COLUMNS,
    noheader: Annotated[bool, typer.Option("--noheader", "-h", help="no header line")] = False,
    watch: Annotated[
        float | None,
        typer.Option("--watch", "-w", is_flag=False, flag_value="2", help="print again every SECONDS (default 2)"),
    ] = None,
    fmt: FmtOpt = Fmt.TABLE,
) -> None:
    """List jobs like squeue: active ones by default, newest first (an admin sees every tenant's)."""
    shown = columns(cols)
    now = time.time()
    query: dict[str, Any] = {
        "states": [_check_choice(s, _STATES, "--state") for s in state or ()],
        "active": None if all_ or state else True,
        "tenant": tenant,
        "pool": pool,
        "array": array,
        "q": name,
        "submitted_after": None if since is None else read_when(since, now, "--since"),
        "submitted_before": None if until is None else read_when(until, now, "--until"),
        "sort": _check_choice(sort, _SORTS, "--sort"),
        "order": None if order is None else _check_choice(order, ("asc", "desc"), "--order"),
    }
    if not 1 <= limit <= 1_000_000:
        raise InputError(f"{limit} is not 1..1000000", source="--limit")
    if watch is not None and not 0.1 <= watch <= 86_400:
        raise InputError(f"{watch:g} is not 0.1..86400 seconds", source="--watch")
    with _client() as c:
        while True:
            listed = _fetch(c, limit, **query)
            now = time.time()
            rows = [[COLUMNS[k](j, now) for k in shown] for j in listed]
            if watch is not None:
                typer.echo("\x1b[2J\x1b[H" + time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)), nl=True)
            _emit(fmt, shown, rows, [j.model_dump() for j in listed], header=not noheader)
            if watch is None:
                return
            time.sleep(watch)


def job(job_id: str, fmt: FmtOpt = Fmt.TABLE) -> None:
    """Show one job: its state, times, ranks, why it waits or how it ended, its runs and events."""
    with _client() as c:
        found = _job_or_array(c, job_id)
        if isinstance(found, ArrayOut):
            rows = [[found.array_id, st, n] for st, n in sorted(found.states.items())]
            _emit(fmt, ["array", "state", "jobs"], rows, found.model_dump())
            return
        assert isinstance(found, JobDetail)
        if fmt is not Fmt.TABLE:
            _emit(fmt, list(COLUMNS), [[COLUMNS[k](found, time.time()) for k in COLUMNS]], found.model_dump())
            return
        events = c.events(job_id).events
        attempts = c.attempts(job_id).attempts if found.attempt else []
    _show(found, time.time())
    if found.ranks:
        headers = ["  rank", "host", "gpus", "state", "exit", "started", "exited"]
        _emit(Fmt.TABLE, headers, [_rank_row(r) for r in found.ranks], None)
    if attempts:
        typer.echo("runs:")
        for a in attempts:
            code = "" if a.exit_code is None else f" exit {a.exit_code}"
            hosts = ",".join(dict.fromkeys(a.hosts))
            span = f"{when(a.started_s, NONE)} .. {when(a.ended_s, NONE)}"
            typer.echo(f"  {a.attempt:3}  {a.state:10} {span}  {hosts}{code}  {a.reason}".rstrip())
    typer.echo("events:")
    for e in events:
        why = e.data.get("reason", "")
        typer.echo(f"  {when(e.at_s)}  {e.action:16} {e.actor}" + (f": {why}" if why else ""))


def _rank_row(r: RankOut) -> list[Any]:
    code = NONE if r.exit_code is None else r.exit_code
    return [
        f"  {r.rank}",
        r.host,
        ",".join(map(str, r.gpus)),
        r.state,
        code,
        when(r.started_s, NONE),
        when(r.exited_s, NONE),
    ]


def _show(j: JobDetail, now: float) -> None:
    """The job's facts, one per line, every time human; a fact that does not apply is left out."""
    lines: list[tuple[str, object]] = [
        ("id", j.id),
        ("name", j.name or NONE),
        ("state", j.state),
        ("tenant", j.tenant),
        ("pool", j.pool),
        ("priority", j.priority),
        ("gpus", f"{_gpus(j)} ({j.tasks} task(s) x {j.gpus_per_task if j.milli_gpu is None else f'{j.milli_gpu}m'})"),
        ("submitted", f"{when(j.submit_time_s)} ({ago(j.submit_time_s, now)})"),
    ]
    if j.queue_position is not None:
        lines.append(("queue position", j.queue_position))
    if j.state == "pending":
        lines.append(("expected start", _expected(j.expected_start_s, now)))
    if j.state == "pending" or j.reason:
        lines.append(("reason", f"{j.reason_code}: {j.reason}" if j.reason_code else j.reason or NONE))
    if j.started_s is not None:
        lines += [("started", when(j.started_s)), ("ended", when(j.ended_s, NONE)), ("runtime", duration(j.runtime_s))]
    if j.exit_code is not None:
        lines.append(("exit code", j.exit_code))
    if j.time_limit_s is not None:
        lines.append(("time limit", duration(j.time_limit_s)))
    if j.deadline_s is not None:
        lines.append(("deadline", f"{when(j.deadline_s)} ({ago(j.deadline_s, now)})"))
    if j.array_id is not None:
        lines.append(("array", f"{j.array_id} index {j.array_index}"))
    if j.attempt:
        lines.append(("run", j.attempt))
    for k, v in lines:
        typer.echo(f"{k:15} {v}")


def _expected(at_s: float | None, now: float) -> str:
    """When the server expects a pending job to start (never a made-up time: unknown when it cannot say)."""
    if at_s is None:
        return "unknown (a job it waits for has no runtime estimate, or it is past the projection's horizon)"
    return f"{when(at_s)} (now)" if at_s <= now else f"{when(at_s)} ({ago(at_s, now)})"


NODE_COLS = ["node", "state", "gpus", "alloc", "free", "model", "health", "heartbeat", "reason"]


def nodes(
    state: Annotated[
        str | None, typer.Option("--state", "-t", help="only nodes in this state: up, drained, lost")
    ] = None,
    noheader: Annotated[bool, typer.Option("--noheader", "-h", help="no header line")] = False,
    fmt: FmtOpt = Fmt.TABLE,
) -> None:
    """List nodes like sinfo: GPUs total, allocated and free, state and why (a drain's reason), health."""
    if state is not None:
        _check_choice(state, ("up", "drained", "lost"), "--state")
    with _client() as c:
        listed = [n for n in c.nodes().nodes if state is None or n.state == state]
    rows = [
        [
            n.name,
            n.state,
            n.gpu_count,
            f"{n.gpus_allocated:g}",
            f"{n.gpus_free:g}",
            n.gpu_model or NONE,
            ",".join(sorted({g.health for g in n.gpus})) or NONE,
            NONE if n.heartbeat_age_s is None else f"{duration(n.heartbeat_age_s)} ago",
            n.state_reason if n.state != "up" else "",
        ]
        for n in listed
    ]
    _emit(fmt, NODE_COLS, rows, [n.model_dump() for n in listed], header=not noheader)


POOL_COLS = ["pool", "gpus", "used", "lent", "borrowed", "share", "since", "next_change", "calendar"]


def pools(
    noheader: Annotated[bool, typer.Option("--noheader", "-h", help="no header line")] = False,
    fmt: FmtOpt = Fmt.TABLE,
) -> None:
    """List pools: GPUs owned now, used, lent and borrowed, and the calendar's current share and next change."""
    with _client() as c:
        listed = c.pools().pools
    rows = [
        [
            p.name,
            NONE if p.gpus is None else p.gpus,
            f"{p.gpus_used:g}",
            f"{p.gpus_lent:g}",
            f"{p.gpus_borrowed:g}",
            NONE if p.share is None else f"{p.share:.0%}",
            when(p.share_since_s, NONE),
            when(p.next_change_s, NONE),
            f"v{p.version}" if p.version else NONE,
        ]
        for p in listed
    ]
    _emit(fmt, POOL_COLS, rows, [p.model_dump() for p in listed], header=not noheader)
