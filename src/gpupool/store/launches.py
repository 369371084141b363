"""What the agent gateway needs to build launch commands, for many jobs in one read transaction.

A launch names the job's whole current allocation (hosts, ranks, world size), its spec and attempt, its command
and the address of rank 0's agent (MASTER_ADDR). Read one job at a time that was four transactions per rank
(allocations, job, command, the agent's whole registration with its inventory); a cycle placing hundreds of
jobs rang hundreds of hosts at once and their polls spent most of their time in these reads. Here they are
one read transaction for every job of a poll, on the DB-API cursor (as ``job_changes``): one statement for what
a requeue, a move or a cancel changes (state, attempt, live ranks, the agents' addresses), and two more only for
jobs whose spec and command (never rewritten) were not parsed before (``FixedInputs``): about half the reads at a
thousand nodes are of a job read before (another host of its gang, a poll woken again before the agent listed it).
"""

from __future__ import annotations

import threading
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


@dataclass(frozen=True, slots=True)
class _Fixed:
    """What a job's launches take that never changes for its id: its spec and its command (neither is ever
    written again after the submit that stored them; a job id is never reused)."""

    spec: JobSpec
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    launch: Mapping[str, Any]


class FixedInputs:
    """Jobs' parsed specs and commands (``_Fixed``), kept across reads so a job's second launch (another host of
    its gang, a poll woken again before its agent listed the rank) reads and parses neither again. At most
    ``limit`` jobs, the oldest dropped first. Nothing in it can be stale: what it holds is never rewritten; the
    parts a requeue, a move or a cancel change (state, attempt, live ranks, addresses) are read every time."""

    def __init__(self, limit: int = 20_000) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._kept: dict[str, _Fixed] = {}

    def get(self, job_id: str) -> _Fixed | None:
        return self._kept.get(job_id)

    def put(self, found: Mapping[str, _Fixed]) -> None:
        if not found:
            return
        with self._lock:
            self._kept.update(found)
            while len(self._kept) > self._limit:
                del self._kept[next(iter(self._kept))]


def read_launch_inputs(
    cur: Any, mark: str, job_ids: Sequence[str], fixed: FixedInputs | None = None
) -> dict[str, LaunchInputs | GpupoolError]:
    """Per stored job of ``job_ids``: its launch inputs, or the error that makes its launch impossible (a
    malformed spec, no stored command). A job not stored is absent. ``cur``: a DB-API cursor in one read
    transaction; ``mark``: its parameter mark; ``fixed``: specs and commands parsed before (one statement, the
    jobs' states, attempts and live ranks with their agents' addresses, when it holds them all)."""
    fixed = FixedInputs(0) if fixed is None else fixed
    j, a, g = JobRow.__tablename__, AllocationRow.__tablename__, AgentRow.__tablename__
    rows = _rows(
        cur,
        mark,
        f"SELECT j.id, j.state, j.attempt, a.assignment, a.task_index, a.host, a.gpus, g.address FROM {j} j"
        f" LEFT JOIN {a} a ON a.job_id = j.id AND a.releasing_s IS NULL LEFT JOIN {g} g ON g.host = a.host"
        " WHERE j.id IN",
        job_ids,
    )
    jobs: dict[str, tuple[JobState, int]] = {}
    ranks: dict[str, list[tuple[LaunchRank, str]]] = {}
    for job_id, state, attempt, number, task, host, gpus, address in rows:
        jobs[job_id] = (JobState(state), attempt or 0)
        if number is not None:
            rank = LaunchRank(f"{job_id}.{number}.{task}", task, host, gpu_indices(gpus))
            ranks.setdefault(job_id, []).append((rank, address or ""))
    out: dict[str, LaunchInputs | GpupoolError] = {}
    known = {job_id: kept for job_id in jobs if (kept := fixed.get(job_id)) is not None}
    read = _read_fixed(cur, mark, [job_id for job_id in jobs if job_id not in known])
    fixed.put({k: v for k, v in read.items() if isinstance(v, _Fixed)})
    for job_id, (state, attempt) in jobs.items():
        got = known.get(job_id) or read.get(job_id)
        if got is None:  # deleted between the two statements (each reads its own snapshot on PostgreSQL)
            continue
        if isinstance(got, GpupoolError):
            out[job_id] = got
            continue
        live = sorted(ranks.get(job_id, ()), key=lambda r: r[0].rank)
        master = live[0][1] if live else ""
        out[job_id] = LaunchInputs(
            got.spec, state, attempt, tuple(r for r, _ in live), got.argv, got.env, got.launch, master
        )
    return out


def _read_fixed(cur: Any, mark: str, job_ids: Sequence[str]) -> dict[str, _Fixed | GpupoolError]:
    """The specs and commands of ``job_ids`` (stored jobs), parsed; an array's elements share the array's."""
    if not job_ids:
        return {}
    out: dict[str, _Fixed | GpupoolError] = {}
    specs: dict[str, JobSpec] = {}
    for job_id, spec in _rows(cur, mark, f"SELECT id, spec FROM {JobRow.__tablename__} WHERE id IN", job_ids):
        try:
            specs[job_id] = spec_from_json(spec, source=f"job {job_id} (spec)")
        except (GpupoolError, ValueError) as e:
            out[job_id] = e if isinstance(e, GpupoolError) else GpupoolError(f"job {job_id}: {e}")
    wanted = sorted({*specs, *(s.array_id for s in specs.values() if s.array_id)})
    commands = {
        str(r[0]): r
        for r in _rows(
            cur, mark, f"SELECT job_id, argv, env, launch FROM {JobCommandRow.__tablename__} WHERE job_id IN", wanted
        )
    }
    for job_id, spec in specs.items():
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
        out[job_id] = _Fixed(
            spec,
            tuple(str(x) for x in argv),
            tuple(sorted((str(k), str(v)) for k, v in env.items())),
            launch if isinstance(launch, dict) else {},
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
