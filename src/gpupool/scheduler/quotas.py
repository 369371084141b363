"""Quota accounting for one cycle: usage per (tenant, pool, GPU model) and Kueue-style admission.

Usage counts milli-GPU (a whole GPU is 1000) of running jobs, attributed to the job's own tenant and pool
wherever its hosts are. Within nominal quota a job is always admitted (if the capacity is lent out, the
owner reclaims it by preemption). Beyond it, the job borrows: at most its borrowing limit, and at most what
the cohort lends: the sum over members of their idle nominal (capped by each lending limit), less what
members already borrow. So borrowing never exceeds lending at admission; an owner's later use within its
nominal quota may shrink what is lent, and then the borrowers are exactly the jobs it may reclaim.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpupool.cluster.snapshot import RunningJob
from gpupool.domain.jobs import MILLI_PER_GPU, JobSpec
from gpupool.domain.sharing import Quota

QuotaKey = tuple[str, str, str]


def job_keys(job: JobSpec) -> tuple[QuotaKey, ...]:
    """The quota keys a job counts against: any-model, and its one model when it asks for exactly one."""
    any_model = (job.tenant, job.pool, "")
    if len(job.gpu_models) == 1:
        return (any_model, (job.tenant, job.pool, job.gpu_models[0]))
    return (any_model,)


def _g(milli: int) -> str:
    return f"{milli / MILLI_PER_GPU:g}"


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    borrows: bool  # admitted beyond nominal quota: its GPUs are borrowed and may be reclaimed
    message: str


class QuotaBook:
    """Mutable for one cycle: admissions add usage so later jobs see them."""

    __slots__ = ("_cohort", "quotas", "require", "usage")

    def __init__(self, quotas: Iterable[Quota], running: Mapping[str, RunningJob], *, require: bool) -> None:
        self.quotas: dict[QuotaKey, Quota] = {q.key: q for q in quotas}
        self.require = require
        self.usage: dict[QuotaKey, int] = dict.fromkeys(self.quotas, 0)
        self._cohort: dict[tuple[str, str, str], list[QuotaKey]] = {}
        for k, q in self.quotas.items():
            if q.cohort:
                self._cohort.setdefault((q.cohort, q.pool, q.gpu_model), []).append(k)
        usage = self.usage
        for r in running.values():
            # Most running jobs count against no quota; skip summing their allocations.
            if any(k in usage for k in job_keys(r.spec)):
                self.add(r.spec, r.gpu_milli)

    def add(self, job: JobSpec, milli: int) -> None:
        for k in job_keys(job):
            if k in self.usage:
                self.usage[k] += milli

    def borrowed(self, k: QuotaKey) -> int:
        return max(0, self.usage.get(k, 0) - self.quotas[k].nominal_gpus * MILLI_PER_GPU)

    def lent_idle(self, k: QuotaKey) -> int:
        q = self.quotas[k]
        idle = max(0, q.nominal_gpus * MILLI_PER_GPU - self.usage.get(k, 0))
        return min(idle, q.lendable_gpus * MILLI_PER_GPU)

    def cohort_members(self, k: QuotaKey) -> list[QuotaKey]:
        q = self.quotas[k]
        return self._cohort.get((q.cohort, q.pool, q.gpu_model), []) if q.cohort else [k]

    def may_borrow(self, k: QuotaKey) -> int:
        """Milli-GPU the key may still borrow from its cohort now."""
        q = self.quotas[k]
        if not q.cohort:
            return 0
        members = self.cohort_members(k)
        available = sum(self.lent_idle(m) for m in members if m != k) - sum(self.borrowed(m) for m in members)
        if q.borrowing_limit_gpus is not None:
            available = min(available, q.borrowing_limit_gpus * MILLI_PER_GPU - self.borrowed(k))
        return max(0, available)

    def check(self, job: JobSpec, milli: int) -> Verdict:
        borrows = False
        for k in job_keys(job):
            q = self.quotas.get(k)
            if q is None:
                if self.require and k[2] == "":
                    return Verdict(False, False, f"tenant {job.tenant} has no quota in pool {job.pool}")
                continue
            used, nominal = self.usage[k], q.nominal_gpus * MILLI_PER_GPU
            if used + milli <= nominal:
                continue
            may = self.may_borrow(k)
            if used + milli - nominal - self.borrowed(k) > may:
                model = f" of {k[2]}" if k[2] else ""
                return Verdict(
                    False,
                    False,
                    f"tenant {job.tenant} uses {_g(used)} of its {q.nominal_gpus} GPUs{model} in pool {job.pool}; "
                    f"needs {_g(milli)}; may borrow {_g(may)} more",
                )
            borrows = True
        return Verdict(True, borrows, "")

    def within_nominal(self, job: JobSpec, milli: int) -> bool:
        """True when the job fits its tenant's nominal quota: it may reclaim lent capacity."""
        keys = [k for k in job_keys(job) if k in self.quotas]
        return bool(keys) and all(self.usage[k] + milli <= self.quotas[k].nominal_gpus * MILLI_PER_GPU for k in keys)

    def is_borrower(self, job: JobSpec, cohort_of: QuotaKey) -> bool:
        """True when ``job``'s tenant borrows in the cohort of ``cohort_of`` (so its jobs may be reclaimed)."""
        members = self.cohort_members(cohort_of)
        return any(k in members and self.borrowed(k) > 0 for k in job_keys(job))
