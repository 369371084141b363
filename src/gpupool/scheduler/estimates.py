"""Expected runtimes: how long a running or waiting job is expected to hold its GPUs (the forward projection's
``scheduler.projection`` input; the scheduler's own decisions keep using ``estimated_runtime_s`` alone).

The first source that answers, capped at the job's time limit:

1. the user's estimate (``estimated_runtime_s``), while the job has not run past it;
2. the history: the median runtime of the finished runs of the same tenant's jobs of the same name (then of
   the same tenant's jobs of any name) that ran longer than this job has run so far, when at least
   ``min_samples`` did. Conditioning on the time already run matters: a job 3 h into a workload whose runs
   take 1 h or 5 h is expected to take 5 h, not 1 h (and never to have ended already);
3. the time limit (``time_limit_s``): the scheduler stops the job then, so it always holds;

else unknown (None): nothing says when the job ends, and the projection does not make up a time.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from statistics import median
from types import MappingProxyType

from gpupool.domain.jobs import JobSpec, Scaling

MIN_SAMPLES = 3  # finished runs that must outlast a job's age before their median is its expected runtime
MAX_SAMPLES = 500  # the most recent runs kept per tenant and per (tenant, name)


@dataclass(frozen=True, slots=True)
class RuntimeHistory:
    """Finished runs' wall-clock runtimes in seconds, sorted, per (tenant, name) and per tenant. Immutable."""

    by_name: Mapping[tuple[str, str], tuple[float, ...]] = field(default_factory=lambda: MappingProxyType({}))
    by_tenant: Mapping[str, tuple[float, ...]] = field(default_factory=lambda: MappingProxyType({}))
    min_samples: int = MIN_SAMPLES

    @staticmethod
    def of(
        runs: Iterable[tuple[str, str, float]], *, min_samples: int = MIN_SAMPLES, max_samples: int = MAX_SAMPLES
    ) -> RuntimeHistory:
        """From (tenant, name, runtime_s) of finished runs, oldest first (the newest ``max_samples`` count)."""
        names: dict[tuple[str, str], deque[float]] = defaultdict(lambda: deque(maxlen=max_samples))
        tenants: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=max_samples))
        for tenant, name, runtime_s in runs:
            if not runtime_s >= 0:  # NaN or negative: a clock step, not a run
                continue
            if name:
                names[(tenant, name)].append(runtime_s)
            tenants[tenant].append(runtime_s)
        return RuntimeHistory(
            MappingProxyType({k: tuple(sorted(v)) for k, v in names.items()}),
            MappingProxyType({k: tuple(sorted(v)) for k, v in tenants.items()}),
            min_samples,
        )

    def expected_s(self, spec: JobSpec, ran_s: float) -> float | None:
        """The median runtime of the runs like ``spec`` that outlasted ``ran_s`` (None: too few of them)."""
        groups = (self.by_name.get((spec.tenant, spec.name)) if spec.name else None, self.by_tenant.get(spec.tenant))
        for runs in groups:
            if runs:
                longer = runs[bisect_right(runs, ran_s) :]
                if len(longer) >= max(1, self.min_samples):
                    return float(median(longer))
        return None


NO_HISTORY = RuntimeHistory()


def expected_runtime_s(spec: JobSpec, ran_s: float, history: RuntimeHistory, tasks_given: int = 0) -> float | None:
    """Expected total runtime of ``spec`` (seconds from its start) given it has run ``ran_s`` seconds; None
    when nothing says. ``tasks_given``: tasks an elastic job runs on (fewer tasks run longer; 0: all)."""
    limit = spec.time_limit_s
    est = spec.estimated_runtime_s
    if est is not None and tasks_given and spec.scaling is not Scaling.NONE:
        est = spec.runtime_with(tasks_given, est)
    out = est if est is not None and est > ran_s else history.expected_s(spec, ran_s)
    if out is None:
        return limit
    return out if limit is None else min(out, limit)
