"""Placements written in batches: one scheduling cycle's placements checked and stored in one transaction
(``JobsMixin.record_allocations``), with one statement per table for all of them.

The checks are the store's own, against what is stored, whatever the scheduler believed: the job is still
the version the placer saw and pending, the allocation has the shape the job asked for, its nodes are up and
its GPUs have room, counting the stored allocations (releasing ones included) and the placements before it
in the same batch.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, select

from gpupool.domain.errors import (
    AllocationConflictError,
    InputError,
    NotFoundError,
    ParseError,
    StaleVersionError,
)
from gpupool.domain.jobs import MILLI_PER_GPU, Allocation, JobSpec
from gpupool.domain.states import JOB_TRANSITIONS, JobState, NodeState, transition
from gpupool.store.base import dumps, loads
from gpupool.store.codec import allocation_to_dict, spec_from_json
from gpupool.store.fencing import Fence
from gpupool.store.rows import AllocationRow, AuditRow, JobAttemptRow, JobRow, UsageIntervalRow

Placement = tuple[str, int, Allocation]  # (job id, the version the placer saw, its allocation)
_IN_CHUNK = 500  # values per IN list: a cycle places thousands, and bound parameters are limited


def chunks(keys: Sequence[str]) -> Iterator[Sequence[str]]:
    """``keys`` ``_IN_CHUNK`` at a time, in order."""
    for at in range(0, len(keys), _IN_CHUNK):
        yield keys[at : at + _IN_CHUNK]


def placeable(row: Any | None, job_id: str, expected: int, allocation: Allocation) -> JobSpec:
    """The stored job's spec if ``allocation`` may place it now; else its refusal (a GpupoolError)."""
    if row is None:
        raise NotFoundError(f"job {job_id!r} is not stored")
    if row.version != expected:
        raise StaleVersionError(f"job {job_id}: expected version {expected}, stored {row.version}")
    try:
        current = JobState(row.state)
    except ValueError:
        raise ParseError(f"stored state {row.state!r} is not a job state", source=f"job {job_id}") from None
    transition(JOB_TRANSITIONS, current, JobState.PLACED, f"job {job_id}")
    spec = spec_from_json(row.spec, source=f"job {job_id} (spec)")
    _check_shape(spec, allocation)
    return spec


def gpus_held(conn: Connection, hosts: Sequence[str]) -> tuple[dict[tuple[str, int], int], set[tuple[str, int]]]:
    """Milli-GPU held per (host, GPU) by the stored allocations (releasing ones included), and the GPUs held
    whole (only to word a refusal)."""
    a = AllocationRow
    used: dict[tuple[str, int], int] = defaultdict(int)
    whole: set[tuple[str, int]] = set()
    for names in chunks(hosts):
        for r in conn.execute(select(a.job_id, a.host, a.gpus, a.milli_gpu).where(a.host.in_(names))):
            for g in loads(r.gpus, f"allocation of job {r.job_id}"):
                used[(r.host, g)] += r.milli_gpu
                if r.milli_gpu >= MILLI_PER_GPU:
                    whole.add((r.host, g))
    return used, whole


def check_capacity(
    job_id: str,
    allocation: Allocation,
    nodes: dict[str, Any],
    used: dict[tuple[str, int], int],
    whole: set[tuple[str, int]],
) -> None:
    """Refuse ``allocation`` unless its nodes are up and its GPUs have room; if it fits, ``used`` and ``whole``
    count it (the next placement of the batch is checked against it), else they are left as they were."""
    mine: dict[tuple[str, int], int] = defaultdict(int)
    for t in allocation.tasks:
        node = nodes.get(t.host)
        if node is None:
            raise NotFoundError(f"job {job_id}: node {t.host!r} is not registered")
        if node.state != NodeState.UP.value:
            raise AllocationConflictError(f"job {job_id}: node {t.host} is {node.state}, not up")
        for g in t.gpus:
            if node.gpu_count and g >= node.gpu_count:
                raise AllocationConflictError(f"job {job_id}: {t.host} has no GPU {g} ({node.gpu_count} GPUs)")
            held = used[(t.host, g)] + mine[(t.host, g)]
            if held + t.milli_gpu > MILLI_PER_GPU:
                what = "held whole" if (t.host, g) in whole else f"shared with {held} milli already given"
                raise AllocationConflictError(
                    f"job {job_id}: GPU {g} of {t.host} is {what}; {t.milli_gpu} more would pass 1000 milli"
                )
            mine[(t.host, g)] += t.milli_gpu
    for key, milli in mine.items():
        used[key] += milli
        if milli >= MILLI_PER_GPU:
            whole.add(key)


_ALLOCATION = (
    "job_id",
    "assignment",
    "task_index",
    "host",
    "gpus",
    "milli_gpu",
    "gpu_memory_mib",
    "cpu_millicores",
    "memory_mib",
    "placed_s",
    "leader_token",
)
_USAGE = ("job_id", "tenant", "pool", "gpu_model", "milli_gpu", "start_s", "end_s", "attempt")
_ATTEMPT = (
    "job_id",
    "attempt",
    "assignment",
    "tenant",
    "pool",
    "gpu_model",
    "milli_gpu",
    "hosts",
    "placed_s",
    "state",
    "reason",
)
_AUDIT = ("at_s", "actor", "action", "subject", "data")


class PlacementRows:
    """The rows a batch of placements writes, gathered, then written with one statement per table.

    Each statement goes to the driver's ``executemany`` as plain SQL and tuples: through SQLAlchemy's
    ``execute`` each row's parameters were processed one by one in Python (``construct_params``), a tenth of
    the scheduling loop's CPU at a hundred placements a cycle. The columns left out (``lost``) take their
    server defaults; none of these tables has a Python-side default or ``onupdate``."""

    def __init__(self) -> None:
        self.placed: set[str] = set()  # the jobs placed by this batch
        self.allocations: list[tuple[Any, ...]] = []
        self.usage: list[tuple[Any, ...]] = []
        self.attempts: list[tuple[Any, ...]] = []
        self.jobs: list[tuple[Any, ...]] = []  # (updated_s, version, attempt, job id, expected version)
        self.audit: list[tuple[Any, ...]] = []

    def add(
        self,
        version: int,
        attempt: int,
        spec: JobSpec,
        allocation: Allocation,
        nodes: dict[str, Any],
        now: float,
        actor: str,
        fence: Fence | None,
    ) -> None:
        job_id = spec.job_id
        self.placed.add(job_id)
        token = None if fence is None else fence.token
        assignment = version + 1  # unique per job and increasing: the version this placement creates
        milli_by_model: dict[str, int] = defaultdict(int)
        for i, t in enumerate(allocation.tasks):
            self.allocations.append(
                (
                    job_id,
                    assignment,
                    i,
                    t.host,
                    json.dumps(list(t.gpus)),
                    t.milli_gpu,
                    t.gpu_memory_mib,
                    t.cpu_millicores,
                    t.memory_mib,
                    now,
                    token,
                )
            )
            milli_by_model[nodes[t.host].gpu_model] += t.milli_gpu * len(t.gpus)
        for model, milli in sorted(milli_by_model.items()):
            self.usage.append((job_id, spec.tenant, spec.pool, model, milli, now, None, attempt))
        hosts = json.dumps([t.host for t in allocation.tasks])
        models, milli = ",".join(sorted(milli_by_model)), sum(milli_by_model.values())
        placed = JobState.PLACED.value
        self.attempts.append(
            (job_id, attempt, assignment, spec.tenant, spec.pool, models, milli, hosts, now, placed, "")
        )
        self.jobs.append((now, version + 1, attempt, job_id, version))
        data = {"from": JobState.PENDING.value, "to": placed, **allocation_to_dict(allocation)}
        if token is not None:
            data["leader_token"] = token
        self.audit.append((now, actor, "job.placed", f"job/{job_id}", dumps(data)))

    def write(self, conn: Connection) -> None:
        if not self.jobs:
            return
        mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
        # Guarded by version: on PostgreSQL another transaction may have changed a job since the read above.
        moved = conn.exec_driver_sql(
            f"UPDATE {JobRow.__tablename__} SET state = '{JobState.PLACED.value}', reason_code = '', reason = '',"
            f" wait_class = NULL, updated_s = {mark}, version = {mark}, attempt = {mark}"
            f" WHERE id = {mark} AND version = {mark}",
            self.jobs,
        )
        if conn.dialect.supports_sane_multi_rowcount and moved.rowcount != len(self.jobs):
            raise StaleVersionError(
                f"{len(self.jobs) - moved.rowcount} of {len(self.jobs)} jobs changed by another writer while "
                "being placed: no placement of the batch is stored"
            )
        for row, columns, values in (
            (AllocationRow, _ALLOCATION, self.allocations),
            (UsageIntervalRow, _USAGE, self.usage),
            (JobAttemptRow, _ATTEMPT, self.attempts),
            (AuditRow, _AUDIT, self.audit),
        ):
            names, marks = ", ".join(columns), ", ".join([mark] * len(columns))
            conn.exec_driver_sql(f"INSERT INTO {row.__tablename__} ({names}) VALUES ({marks})", values)


def _check_shape(job: JobSpec, allocation: Allocation) -> None:
    """The allocation must be one the job asked for: its task count, GPUs per task, share size."""
    where = f"allocation of job {job.job_id}"
    if allocation.job_id != job.job_id:
        raise InputError(f"allocation names job {allocation.job_id!r}", source=where)
    if job.elastic is not None:  # any of its sizes, in ranks of its own size
        sizes = job.elastic.sizes(job.gpus_per_task)
        if len(allocation.tasks) * job.gpus_per_task not in sizes:
            raise InputError(f"{len(allocation.tasks)} tasks is none of the elastic job's sizes {sizes}", source=where)
    elif len(allocation.tasks) != job.tasks:
        raise InputError(f"{len(allocation.tasks)} task allocations for a job of {job.tasks} tasks", source=where)
    want_milli = job.share.milli_gpu if job.share is not None else MILLI_PER_GPU
    for i, t in enumerate(allocation.tasks):
        if len(t.gpus) != job.gpus_per_task or len(set(t.gpus)) != len(t.gpus) or min(t.gpus, default=0) < 0:
            raise InputError(f"task {i}: GPUs {t.gpus} do not give {job.gpus_per_task} distinct GPUs", source=where)
        if t.milli_gpu != want_milli:
            raise InputError(f"task {i}: {t.milli_gpu} milli-GPU given, the job asks for {want_milli}", source=where)
