"""Deadline admission: will a job finish by its deadline, given the queue, running work and the calendar?

An aggregate model, cheap enough for every submission: GPUs of the job's pool (all hosts without a
calendar; the pool's hosts at the start time with one) are a count; running jobs release theirs at their
expected ends; jobs ahead in the queue start first come first served when their GPUs are free and hold
them for their estimates; the job then starts at the first moment enough GPUs are free. For an elastic
job every size from all tasks down to ``min_tasks`` is tried and the earliest finish wins. It ignores
topology and fragmentation, so it is optimistic; ``deadline_at_risk`` leaves a margin for that.

``at_risk`` is the one test of "about to miss" (this verdict, and the cycle's deadline preemption): slack
under ``deadline_at_risk`` of the runtime, and never under ``AT_RISK_MIN_S``. A share alone made a short job's
window too narrow to be seen: a 28 s job with 35 s of slack was at risk for 2.8 s, and a cycle, which comes
at the cluster's events, could fall before and after that window, so the job went from waiting to
infeasible without ever preempting (Chronus MIX1 on 960 GPUs, benchmarks/chronus_join.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from numpy.typing import NDArray

from gpupool.cluster.snapshot import NODE_UP, ClusterSnapshot
from gpupool.domain.jobs import MILLI_PER_GPU, JobSpec
from gpupool.scheduler.backfill import expected_end
from gpupool.scheduler.pools import pool_busy, pool_map
from gpupool.scheduler.types import CycleInputs, SharingPolicy

# Slack (seconds) under which a deadline job is at risk whatever its runtime: several of the gaps between the
# cycles that consider a waiting job on a busy cluster (a few seconds each in Chronus MIX1 on 960 GPUs).
AT_RISK_MIN_S = 30.0
# What a restart costs before a preempted job's work goes on (stop, relaunch, checkpoint load): the deadline
# tests of a job preempted before count it (``start_delay``), the elastic planner charges it for a
# resize, and the simulated world charges it by default.
RESTART_S = 60.0


def start_delay(job: JobSpec, snapshot: ClusterSnapshot, launch_latency_s: float) -> float:
    """Seconds from a deadline job's placement to its work going on: the launch, and for a job that was
    preempted before, a restart (``RESTART_S``: the simulated world charges it, and a deadline job may be
    preempted itself, ``taking.restartable``)."""
    restarts = job.deadline_s is not None and snapshot.preemption_count.get(job.job_id, 0) > 0
    return launch_latency_s + (RESTART_S if restarts else 0.0)


def at_risk(slack_s: float, runtime_s: float, share: float) -> bool:
    """A deadline job that still makes it if it starts now (``slack_s`` >= 0: its deadline less now, the launch
    and its runtime) but with less slack than ``share`` of its runtime or ``AT_RISK_MIN_S``."""
    return 0.0 <= slack_s <= max(share * runtime_s, AT_RISK_MIN_S)


def at_risk_each(slack_s: NDArray[np.float64], runtime_s: NDArray[np.float64], share: float) -> NDArray[np.bool_]:
    """``at_risk`` element-wise (the kept queue's cycle asks it of a whole group at once)."""
    return (slack_s >= 0.0) & (slack_s <= np.maximum(share * runtime_s, AT_RISK_MIN_S))


class Verdict(StrEnum):
    FEASIBLE = "feasible"
    AT_RISK = "at_risk"
    INFEASIBLE = "infeasible"


@dataclass(frozen=True, slots=True)
class Admission:
    verdict: Verdict
    earliest_finish_s: float
    tasks: int  # the size the earliest finish assumes
    message: str


def _gpus(job: JobSpec, tasks: int) -> int:
    per = job.share.milli_gpu / MILLI_PER_GPU if job.share is not None else job.gpus_per_task
    return max(1, round(per * tasks))


def admit(
    snapshot: ClusterSnapshot,
    job: JobSpec,
    queue: Sequence[JobSpec],
    now_s: float,
    config: SharingPolicy,
    inputs: CycleInputs | None = None,
) -> Admission:
    """``queue``: the jobs that go before ``job`` (in policy order); the job itself is skipped if listed.
    ``inputs``: the cycle's pool demand targets, which move hosts between pools (none when None)."""
    ix = snapshot.index
    hosts = snapshot.node_state == NODE_UP
    if config.calendar is not None:
        demand = inputs.pool_demand if inputs is not None else ()
        pools = pool_map(ix, config.calendar, now_s, demand, pool_busy(ix, snapshot.running))
        hosts = hosts & pools.owned_by(job.pool)
    capacity = int(ix.host_gpus[hosts].sum())
    used = 0
    ends: list[tuple[float, int]] = []
    for r in snapshot.running.values():
        g = sum(len(t.gpus) for t in r.allocation.tasks if hosts[ix.host_index(t.host)])
        if g:
            used += g
            ends.append((expected_end(r, now_s, config.default_runtime_s), g))
    heapq.heapify(ends)
    free, t = capacity - used, now_s
    for q in queue:
        if q.job_id == job.job_id:
            continue
        g = _gpus(q, q.tasks)
        if g > capacity:
            continue  # never fits this pool: it does not hold anyone up
        while free < g and ends:
            t_end, back = heapq.heappop(ends)
            t, free = max(t, t_end), free + back
        free -= g
        heapq.heappush(ends, (t + q.runtime_with(q.tasks, config.default_runtime_s), g))
    best: tuple[float, int] | None = None
    delay = start_delay(job, snapshot, config.launch_latency_s)
    for k in range(job.tasks, job.fewest_tasks - 1, -1):
        g = _gpus(job, k)
        if g > capacity:
            continue
        f, tt, pending = free, t, list(ends)
        heapq.heapify(pending)
        while f < g and pending:
            t_end, back = heapq.heappop(pending)
            tt, f = max(tt, t_end), f + back
        finish = tt + delay + job.runtime_with(k, config.default_runtime_s)
        if best is None or finish < best[0]:
            best = (finish, k)
    if best is None:
        return Admission(
            Verdict.INFEASIBLE, float("inf"), job.tasks, f"needs more GPUs than pool {job.pool} has ({capacity})"
        )
    finish, k = best
    size = "" if k == job.tasks else f" on {k} of its {job.tasks} tasks"
    if job.deadline_s is None:
        return Admission(Verdict.FEASIBLE, finish, k, f"earliest finish t={finish:.0f}{size}")
    slack = job.deadline_s - finish
    runtime = job.runtime_with(k, config.default_runtime_s)
    what = f"earliest finish t={finish:.0f}{size}, deadline t={job.deadline_s:.0f}"
    if slack < 0:
        return Admission(Verdict.INFEASIBLE, finish, k, f"{what}: late by {-slack:.0f} s")
    if at_risk(slack, runtime, config.deadline_at_risk):
        return Admission(Verdict.AT_RISK, finish, k, f"{what}: only {slack:.0f} s to spare")
    return Admission(Verdict.FEASIBLE, finish, k, f"{what}: {slack:.0f} s to spare")
