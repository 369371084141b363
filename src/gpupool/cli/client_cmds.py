"""The client commands: ``gpupool submit/cancel/drain/undrain/label/usage/logs``, and the helpers ``gpupool
admin`` shares (``cli.admin``); the views (jobs, job, nodes, pools) are in ``cli.views``. Server address and
token from GPUPOOL_SERVER / GPUPOOL_TOKEN or the client config file."""

from __future__ import annotations

import csv
import io
import json
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from gpupool.cli.human import read_when
from gpupool.client import ApiError, Client, load_client_config, read_jobs_file
from gpupool.domain.dependencies import parse_dependency
from gpupool.domain.errors import InputError
from gpupool.domain.jobs import DependencyKind
from gpupool.domain.labels import parse_assignments
from gpupool.domain.units import parse_duration
from gpupool.schemas.api import ArrayOut, JobOut, JobSubmit


class Fmt(StrEnum):
    TABLE = "table"
    CSV = "csv"
    JSON = "json"


def _client() -> Client:
    return Client(load_client_config())


def _table(headers: list[str], rows: list[list[Any]], header: bool = True) -> str:
    cells = [headers, *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines if header else lines[1:])


def _emit(fmt: Fmt, headers: list[str], rows: list[list[Any]], data: Any, *, header: bool = True) -> None:
    if fmt is Fmt.JSON:
        typer.echo(json.dumps(data, indent=2, sort_keys=True))
    elif fmt is Fmt.CSV:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        if header:
            w.writerow(headers)
        w.writerows(rows)
        typer.echo(buf.getvalue(), nl=False)
    elif rows or header:
        typer.echo(_table(headers, rows, header))


FmtOpt = Annotated[Fmt, typer.Option("--format", "-f", help="table, csv or json")]


def submit(
    command: Annotated[list[str] | None, typer.Argument(help="the job's argv (after --)")] = None,
    file: Annotated[Path | None, typer.Option("--file", "-F", help="YAML job file")] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", help="GPUs per task")] = None,
    tasks: Annotated[int | None, typer.Option("--tasks", help="tasks (gang size)")] = None,
    pool: Annotated[str | None, typer.Option(help="pool")] = None,
    priority: Annotated[str | None, typer.Option(help="best_effort, batch, normal, high, realtime")] = None,
    name: Annotated[str | None, typer.Option(help="a name for the job")] = None,
    tenant: Annotated[str | None, typer.Option(help="on whose behalf (admin tokens only)")] = None,
    preemptible: Annotated[bool, typer.Option(help="may be preempted")] = False,
    key: Annotated[str | None, typer.Option("--idempotency-key", help="resubmitting with it never duplicates")] = None,
    time_limit: Annotated[
        str | None, typer.Option("--time-limit", help="stopped this long after it starts: 4h")
    ] = None,
    retry: Annotated[int | None, typer.Option(help="run again up to N times when it fails")] = None,
    array: Annotated[str | None, typer.Option(help="one job per index: 0-199%16, 0-198:2, 1,3,5")] = None,
    dependency: Annotated[str | None, typer.Option(help="afterok:ID[:ID][,afterany:ID] (Slurm's syntax)")] = None,
    image: Annotated[str | None, typer.Option(help="run it in this container image (docs/containers.md)")] = None,
    mount: Annotated[
        list[str] | None, typer.Option("--mount", help="SRC:DST[:ro] bound into the container (repeatable)")
    ] = None,
    workdir: Annotated[str | None, typer.Option(help="the container's working directory")] = None,
) -> None:
    """Submit a job: flags and an argv after --, or a YAML job file (flags override the file)."""
    in_file = read_jobs_file(file) if file is not None else [("", None)]
    base: dict[str, Any] = {} if in_file[0][1] is None else in_file[0][1].model_dump(exclude_none=True)
    over = {
        "command": command or None,
        "gpus_per_task": gpus,
        "tasks": tasks,
        "pool": pool,
        "priority": priority,
        "name": name,
        "tenant": tenant,
        "preemptible": preemptible or None,
        "time_limit_s": None if time_limit is None else parse_duration(time_limit, "--time-limit"),
        "retry": None if retry is None else {"count": retry},
        "array": array,
        "after": None if dependency is None else dependency_in(parse_dependency(dependency, "--dependency")),
        "image": image,
        "mounts": [mount_in(m) for m in mount] if mount else None,
        "workdir": workdir,
    }
    if in_file[0][0]:  # a pipeline file: its jobs as written
        if command or any(v is not None for k, v in over.items() if k != "command"):
            raise InputError(
                "flags set one job's fields; a pipeline file's jobs are submitted as written", source="submit"
            )
        return submit_pipeline([(n, j) for n, j in in_file if j is not None], key)
    base.update({k: v for k, v in over.items() if v is not None})
    if "command" not in base:
        raise typer.BadParameter("give the job's command after --, or a job file with command:")
    job = _job(base, file)
    with _client() as c:
        out = c.submit(job, key)
    said = "submitted" if out.created else "already submitted"
    if out.array_id is not None:
        typer.echo(f"{out.array_id} {said}: array of {out.jobs} jobs ({out.job.id} first)")
    else:
        typer.echo(f"{out.job.id} {said} ({out.job.state})")


def mount_in(word: str) -> dict[str, Any]:
    """``--mount SRC:DST[:ro|rw]`` as the API's mount."""
    parts = word.split(":")
    if len(parts) not in (2, 3) or not all(parts[:2]) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise InputError(f"{word!r} is not SRC:DST, SRC:DST:ro or SRC:DST:rw", source="--mount")
    return {"source": parts[0], "target": parts[1], "read_only": parts[2:] == ["ro"]}


def submit_pipeline(jobs: list[tuple[str, JobSubmit]], key: str | None) -> None:
    """A pipeline's jobs in the order given (each after those it names), a name in ``after`` replaced by the
    id its job got; with a key, each job's is ``KEY:NAME`` (submitting the file again duplicates nothing)."""
    ids: dict[str, str] = {}
    with _client() as c:
        for name, job in jobs:
            after = [d.model_copy(update={"jobs": [ids.get(j, j) for j in d.jobs]}) for d in job.after]
            out = c.submit(job.model_copy(update={"after": after, "name": job.name or name}), key and f"{key}:{name}")
            ids[name] = out.array_id or out.job.id
            typer.echo(f"{name}: {ids[name]} {'submitted' if out.created else 'already submitted'}")


def dependency_in(parsed: tuple[tuple[DependencyKind, tuple[str, ...]], ...]) -> list[dict[str, Any]]:
    """``parse_dependency``'s items as the API's ``after``."""
    return [{"kind": kind.value, "jobs": list(ids)} for kind, ids in parsed]


# The job fields the submit flags set, by flag: a value the API refuses is named by the flag that gave it.
_FLAG_OF_FIELD = {"command": "command", "gpus_per_task": "--gpus", "tasks": "--tasks", "pool": "--pool",
                  "priority": "--priority", "name": "--name", "tenant": "--tenant", "time_limit_s": "--time-limit",
                  "retry": "--retry", "array": "--array", "after": "--dependency", "image": "--image",
                  "mounts": "--mount", "workdir": "--workdir"}  # fmt: skip


def _job(fields: dict[str, Any], file: Path | None) -> JobSubmit:
    """The job the flags and file describe, checked as the server checks it (the API's own model)."""
    try:
        return JobSubmit.model_validate(fields)
    except ValidationError as e:
        err = e.errors()[0]
        loc = [str(x) for x in err["loc"]]
        where = _FLAG_OF_FIELD.get(loc[0], "") if loc else ""
        if not where and file is not None:
            where = f"{file}: {'.'.join(loc)}"
        raise InputError(f"{err['msg']} (got {err.get('input')!r})", source=where or ".".join(loc)) from None


def _job_or_array(c: Client, job_id: str) -> JobOut | ArrayOut:
    """The job of that id, else the array of that id (an array is queried and cancelled as one)."""
    try:
        return c.job(job_id)
    except ApiError as e:
        if e.status != 404:
            raise
        try:
            return c.array(job_id)
        except ApiError:
            raise e from None


def cancel(job_id: str) -> None:
    """Cancel a job, or every element of an array (a running one is stopped on its nodes' next heartbeat)."""
    with _client() as c:
        if isinstance(_job_or_array(c, job_id), ArrayOut):
            a = c.cancel_array(job_id)
            typer.echo(f"{a.array_id} {', '.join(f'{n} {st}' for st, n in sorted(a.states.items()))}")
            return
        j = c.cancel(job_id)
    typer.echo(f"{j.id} {j.state}")


def drain(node: str, reason: Annotated[str, typer.Option(help="why")] = "drained by an operator") -> None:
    """Keep a node out of new placements (admin)."""
    with _client() as c:
        c.drain(node, reason)
    typer.echo(f"{node} drained")


def undrain(node: str) -> None:
    """Return a drained node to service (admin)."""
    with _client() as c:
        c.undrain(node)
    typer.echo(f"{node} up")


def label(
    node: str,
    changes: Annotated[list[str] | None, typer.Argument(help="key=value to set, key- to remove")] = None,
    fmt: FmtOpt = Fmt.TABLE,
) -> None:
    """Show a node's labels; set (key=value) and remove (key-) its admin labels (admin)."""
    sets, removed = parse_assignments(changes or [], "label")
    with _client() as c:
        out = c.set_labels(node, sets, list(removed)) if sets or removed else c.labels(node)
    rows = [[k, v, "admin" if k in out.admin_labels else "agent"] for k, v in sorted(out.labels.items())]
    _emit(fmt, ["key", "value", "set by"], rows, out.model_dump())


def usage(
    since: Annotated[
        str | None, typer.Option("--from", "--since", help="window start: 2026-12-01, now-2h, ISO (default: a day ago)")
    ] = None,
    until: Annotated[str | None, typer.Option("--to", "--until", help="window end (default: now)")] = None,
    fmt: FmtOpt = Fmt.TABLE,
) -> None:
    """GPU-seconds per tenant, GPU model and pool in a window."""
    now = time.time()
    from_s = None if since is None else read_when(since, now, "--from")
    to_s = None if until is None else read_when(until, now, "--to")
    with _client() as c:
        out = c.usage(from_s, to_s)
    rows = [[u.tenant, u.gpu_model, u.pool, f"{u.gpu_seconds:.1f}"] for u in out.usage]
    data = {"from_s": out.from_s, "to_s": out.to_s, "usage": [u.model_dump() for u in out.usage]}
    _emit(fmt, ["tenant", "gpu_model", "pool", "gpu_seconds"], rows, data)


FOLLOW_EVERY_S = 1.0  # how often ``logs -f`` asks for what a running job wrote since
_OVER = frozenset({"finished", "failed", "cancelled", "timeout"})


def logs(
    job_id: str,
    stderr: Annotated[bool, typer.Option("--stderr", help="stderr instead of stdout")] = False,
    tail: Annotated[int, typer.Option(help="last N lines")] = 200,
    rank: Annotated[int, typer.Option(help="which rank")] = 0,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="then print what it writes, until it ends")] = False,
) -> None:
    """Print a job's output through the server, from every rank's stdout or stderr (-f: follow)."""
    stream = "stderr" if stderr else "stdout"
    with _client() as c:
        out = _first_logs(c, job_id, stream, tail, rank, follow)
        typer.echo(out.text, nl=False)
        if follow:
            _follow(c, job_id, stream, rank, out.next_offset)


def _first_logs(c: Client, job_id: str, stream: str, tail: int, rank: int, wait: bool) -> Any:
    """The last lines; when following a job not yet started, wait for it to start."""
    while True:
        try:
            return c.logs(job_id, stream=stream, tail=tail, rank=rank)
        except ApiError as e:
            if not wait or e.status != 404 or c.job(job_id).state not in ("pending", "placed"):
                raise
        time.sleep(FOLLOW_EVERY_S)


def _follow(c: Client, job_id: str, stream: str, rank: int, offset: int | None) -> None:
    """Print what the log gains, a MiB at most per ask, until the job is over and its log read to the end."""
    if offset is None:
        raise InputError("the job's node runs an agent too old to follow a log: upgrade it", source="--follow")
    while True:
        over = c.job(job_id).state in _OVER  # asked before the read: a log read empty after that is whole
        out = c.logs(job_id, stream=stream, rank=rank, offset=offset)
        typer.echo(out.text, nl=False)
        offset = out.next_offset if out.next_offset is not None else offset + len(out.text.encode())
        if out.text:
            continue  # more may be waiting past the MiB this read carried
        if over:
            return
        time.sleep(FOLLOW_EVERY_S)
