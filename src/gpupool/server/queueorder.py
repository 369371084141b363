"""The queue in the order the configured policy takes it, as of the leader's last scheduling cycle.

The scheduler's policy (``scheduler.policies``: fifo, priority, sjf, fair, las, gittins, ...) orders the pending
jobs inside each cycle from that cycle's request (its snapshot, its measured usage and service). The last
cycle's request and result are immutable and kept by the loop, so any request thread can ask the policy for
the same order again, without the loop's state: the jobs that cycle left waiting, in its policy's order,
numbered from 1. It is computed once per cycle, when first asked.

A standby replica runs no cycle and knows no order (positions are None there); nor does a job submitted after
the last cycle until the next one (a submit wakes the loop at once).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gpupool.domain.jobs import JobSpec
from gpupool.scheduler.driver import CycleRun
from gpupool.scheduler.policies import get_policy


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """The pending jobs in policy order as of ``as_of_s`` (the cycle's ``now``), and each one's position."""

    policy: str
    as_of_s: float | None
    jobs: tuple[JobSpec, ...]
    positions: Mapping[str, int]


def policy_order(run: CycleRun) -> tuple[JobSpec, ...]:
    """The jobs ``run`` left waiting, in the order its policy took its queue (placed and ended ones out)."""
    request, result = run.request, run.result
    gone = {a.job_id for a in result.placements} | {e.job_id for e in result.endings}
    ordered = get_policy(request.config.policy).order(request)
    return tuple(j for j in ordered if j.job_id not in gone)


class QueueOrder:
    """The last cycle's order, computed once per cycle (thread-safe)."""

    def __init__(self, last_run: Callable[[], CycleRun | None], policy: str) -> None:
        self._last_run, self._policy = last_run, policy
        self._lock = threading.Lock()
        self._for: CycleRun | None = None
        self._got = QueueSnapshot(policy, None, (), MappingProxyType({}))

    def current(self) -> QueueSnapshot:
        run = self._last_run()
        if run is None:
            return QueueSnapshot(self._policy, None, (), MappingProxyType({}))
        with self._lock:
            if run is not self._for:
                jobs = policy_order(run)
                positions = MappingProxyType({j.job_id: i for i, j in enumerate(jobs, start=1)})
                self._got = QueueSnapshot(run.request.config.policy, run.request.now_s, jobs, positions)
                self._for = run
            return self._got
