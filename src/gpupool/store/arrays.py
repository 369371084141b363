"""Arrays and dependencies in the store: a dependency's job names resolved to the jobs they mean (a job, every
element of an array, one element), an array's summary, and an array cancelled as one.

A dependency may only name jobs that are stored, of the same tenant, so no cycle can be made through the API
(every job it names existed first); a set of jobs that name each other is checked before any is stored
(``domain.dependencies.dependency_order``, by the client that submits them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.errors import InputError, NotFoundError
from gpupool.domain.jobs import Dependency, DependencyKind
from gpupool.domain.states import JobState
from gpupool.store.base import StoreBase
from gpupool.store.jobs import HOLDING, JobsMixin, job_record
from gpupool.store.records import JobRecord
from gpupool.store.rows import JobRow

MAX_DEPENDENCY_JOBS = 10_000  # an array of the largest size, and some


@dataclass(frozen=True, slots=True)
class ArraySummary:
    array_id: str
    tenant: str
    size: int
    cap: int
    states: dict[str, int]  # elements per state


class ArraysMixin(JobsMixin, StoreBase):
    def resolve_dependencies(
        self, tenant: str, wanted: Sequence[tuple[DependencyKind, Sequence[str]]], where: str = "after"
    ) -> tuple[Dependency, ...]:
        """Each name as the jobs it means: a job's id, an array's id (all its elements), or Slurm's
        ``ARRAY_INDEX`` (one element). A name that is none of them (or another tenant's) is an InputError
        naming it, so nothing is stored."""
        out: list[Dependency] = []
        with self._tx(write=False) as s:
            for kind, names in wanted:
                ids: list[str] = []
                for name in names:
                    ids.extend(self._resolve(s, tenant, name, where))
                if len(ids) > MAX_DEPENDENCY_JOBS:
                    raise InputError(f"{len(ids)} jobs named; at most {MAX_DEPENDENCY_JOBS}", source=where)
                out.append(Dependency(kind, tuple(dict.fromkeys(ids))))
        return tuple(out)

    @staticmethod
    def _resolve(s: Session, tenant: str, name: str, where: str) -> list[str]:
        row = s.get(JobRow, name)
        if row is not None and row.tenant == tenant:
            return [name]
        elements = s.scalars(
            select(JobRow.id).where(JobRow.array_id == name, JobRow.tenant == tenant).order_by(JobRow.submit_time_s)
        ).all()
        if elements:
            return list(elements)
        base, sep, index = name.rpartition("_")  # Slurm writes an element as ARRAY_INDEX
        if sep and index.isdigit():
            element = s.get(JobRow, f"{base}.{index}")
            if element is not None and element.tenant == tenant:
                return [element.id]
        raise InputError(f"job {name!r} is not stored (name a job, an array, or ARRAY_INDEX)", source=where)

    def array_summary(self, array_id: str) -> ArraySummary:
        with self._tx(write=False) as s:
            rows = s.scalars(select(JobRow).where(JobRow.array_id == array_id)).all()
            if not rows:
                raise NotFoundError(f"array {array_id!r} is not stored")
            first = job_record(rows[0]).spec
            return ArraySummary(
                array_id, rows[0].tenant, len(rows), first.array_cap, dict(Counter(r.state for r in rows))
            )

    def cancel_array(self, array_id: str, actor: str) -> list[JobRecord]:
        """Cancel every element of the array still pending, placed or running, in one transaction (a placed
        element goes back to the queue first, as its own cancel does); the elements that changed."""
        changed: list[JobRecord] = []
        with self._tx(write=True) as s:
            rows = s.scalars(
                select(JobRow)
                .where(
                    JobRow.array_id == array_id, JobRow.state.in_([JobState.PENDING.value, *(h.value for h in HOLDING)])
                )
                .order_by(JobRow.submit_time_s)
            ).all()
            now = self._clock()
            for row in rows:
                steps = (
                    [JobState.PENDING, JobState.CANCELLED]
                    if row.state == JobState.PLACED.value
                    else [JobState.CANCELLED]
                )
                for step in steps:
                    current = JobState(row.state)
                    self._guard(s, row.id, row.version, step)
                    self._bump(s, row, step, "", "array cancelled", now)
                    if current in HOLDING:
                        self._free(s, row.id, now, JobState.CANCELLED.value, "array cancelled")
                    data = {"from": current.value, "to": step.value, "reason": "array cancelled"}
                    self._audit(s, actor, f"job.{step.value}", f"job/{row.id}", data, now)
                changed.append(job_record(row))
        return changed
