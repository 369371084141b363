"""What the agent gateway needs to build launch commands, for many jobs in one read transaction.

A launch names the job's whole current allocation (hosts, ranks, world size), its spec and attempt, its command
and the address of rank 0's agent (MASTER_ADDR). Read one job at a time that was four transactions per rank
(allocations, job, command, the agent's whole registration with its inventory); a cycle placing hundreds of
jobs rang hundreds of hosts at once and their polls spent most of their time in these reads. Here they are
four statements in one read transaction for every job of a poll, on the DB-API cursor (as ``job_changes``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpupool.domain.errors import GpupoolError, NotFoundError
from gpupool.domain.jobs import JobSpec
from gpupool.domain.states import JobState
from gpupool.store.base import gpu_indices, loads
from gpupool.store.codec import spec_from_json
from gpupool.store.rows import AgentRow, AllocationRow, JobCommandRow, JobRow

_CHUNK = 500  # ids per IN list (SQLite's bound parameters are limited)


@dataclass(frozen=True, slots=True)
class LaunchRank:
    """One rank of a job's live allocation (not releasing), as its launch names it."""

    assignment_id: str
    rank: int
    host: str
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LaunchInputs:
    """One job's launch inputs: its spec, state and attempt, its live ranks by rank, its command (argv, env,
    launch options; an array's elements share the array's) and the address of rank 0's agent ("" when its
    registration has none)."""

    spec: JobSpec
    state: JobState
    attempt: int
    ranks: tuple[LaunchRank, ...]
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    launch: Mapping[str, Any] = field(default_factory=dict)
    master_address: str = ""


def read_launch_inputs(cur: Any, mark: str, job_ids: Sequence[str]) -> dict[str, LaunchInputs | GpupoolError]:
    """Per stored job of ``job_ids``: its launch inputs, or the error that makes its launch impossible (a
    malformed spec, no stored command). A job not stored is absent. ``cur``: a DB-API cursor in one read
    transaction; ``mark``: its parameter mark."""
    jobs = _rows(cur, mark, f"SELECT id, state, spec, attempt FROM {JobRow.__tablename__} WHERE id IN", job_ids)
    allocations = _rows(
        cur,
        mark,
        f"SELECT job_id, assignment, task_index, host, gpus FROM {AllocationRow.__tablename__}"
        " WHERE releasing_s IS NULL AND job_id IN",
        [str(j[0]) for j in jobs],
    )
    ranks: dict[str, list[LaunchRank]] = {}
    for job_id, assignment, task, host, gpus in allocations:
        ranks.setdefault(job_id, []).append(LaunchRank(f"{job_id}.{assignment}.{task}", task, host, gpu_indices(gpus)))
    out: dict[str, LaunchInputs | GpupoolError] = {}
    specs: dict[str, tuple[JobSpec, JobState, int]] = {}
    for job_id, state, spec, attempt in jobs:
        try:
            specs[job_id] = (spec_from_json(spec, source=f"job {job_id} (spec)"), JobState(state), attempt or 0)
        except (GpupoolError, ValueError) as e:
            out[job_id] = e if isinstance(e, GpupoolError) else GpupoolError(f"job {job_id}: {e}")
    wanted = sorted({*specs, *(s.array_id for s, _, _ in specs.values() if s.array_id)})
    commands = {
        str(r[0]): r
        for r in _rows(
            cur, mark, f"SELECT job_id, argv, env, launch FROM {JobCommandRow.__tablename__} WHERE job_id IN", wanted
        )
    }
    masters = sorted({min(rs, key=lambda r: r.rank).host for rs in ranks.values()})
    addresses = dict(_rows(cur, mark, f"SELECT host, address FROM {AgentRow.__tablename__} WHERE host IN", masters))
    for job_id, (spec, state, attempt) in specs.items():
        live = tuple(sorted(ranks.get(job_id, ()), key=lambda r: r.rank))
        row = commands.get(job_id) or (commands.get(spec.array_id) if spec.array_id else None)
        if row is None:
            out[job_id] = NotFoundError(f"job {job_id!r} has no stored command")
            continue
        try:
            source = f"command of job {job_id}"
            argv, env, launch = loads(row[1], source), loads(row[2], source), loads(row[3] or "{}", source)
        except GpupoolError as e:
            out[job_id] = e
            continue
        master = str(addresses.get(live[0].host) or "") if live else ""
        out[job_id] = LaunchInputs(
            spec,
            state,
            attempt,
            live,
            tuple(str(a) for a in argv),
            tuple(sorted((str(k), str(v)) for k, v in env.items())),
            launch if isinstance(launch, dict) else {},
            master,
        )
    return out


def _rows(cur: Any, mark: str, head: str, keys: Sequence[str]) -> list[tuple[Any, ...]]:
    """``head`` (a SELECT ending in ``IN``) over ``keys``, ``_CHUNK`` at a time."""
    out: list[tuple[Any, ...]] = []
    for at in range(0, len(keys), _CHUNK):
        chunk = list(keys[at : at + _CHUNK])
        cur.execute(f"{head} ({', '.join([mark] * len(chunk))})", chunk)
        out.extend(tuple(r) for r in cur.fetchall())
    return out
