"""The state keeps the running jobs as arrays (``RunningTable``) through places, starts and every kind of end,
compactions included: a snapshot's ``running_table`` says what ``RunningArrays.of`` its running jobs says."""

from __future__ import annotations

import numpy as np

from gpupool.cluster import ClusterState
from gpupool.cluster.snapshot import ClusterSnapshot, RunningArrays
from gpupool.domain.events import (
    Event,
    JobCancelled,
    JobEnded,
    JobFinished,
    JobPlaced,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    NodeLost,
    NodeRestored,
)
from gpupool.domain.jobs import Allocation, GpuShare, JobSpec, TaskAllocation
from gpupool.domain.states import JobState
from gpupool.fabric.generators import leaf_spine

Row = tuple[float, float | None, tuple[tuple[int, int], ...]]


def _rows(a: RunningArrays) -> list[Row]:
    """Each live job's start, estimate and whole-GPU tasks (host, GPUs), in an order slots do not decide."""
    alive = a.alive.tolist()
    tasks: dict[int, list[tuple[int, int]]] = {}
    for s, h, g in zip(a.task_slot.tolist(), a.task_host.tolist(), a.task_gpus.tolist(), strict=True):
        tasks.setdefault(s, []).append((h, g))
    est = a.estimate_s.tolist()
    rows = [
        (float(a.start_s[s]), None if np.isnan(est[s]) else est[s], tuple(tasks.get(s, [])))
        for s in range(len(alive))
        if alive[s]
    ]
    return sorted(rows, key=repr)


def _same(snap: ClusterSnapshot) -> None:
    assert snap.running_table is not None
    assert _rows(snap.running_table) == _rows(RunningArrays.of(snap.running, snap.index))


def _ends(state: ClusterState, job_id: str, kind: int, t: float) -> list[Event]:
    """One of four ends of a running job: finished (or failed), cancelled, preempted (then cancelled), its node
    lost (the jobs on it requeued, then cancelled)."""
    if kind == 0:
        started = state.job_state(job_id) is JobState.RUNNING
        return [JobFinished(job_id, t) if started else JobEnded(job_id, JobState.FAILED, t)]
    if kind == 1:
        return [JobEnded(job_id, JobState.CANCELLED, t)]
    if kind == 2:
        return [JobPreempted(job_id, t), JobCancelled(job_id, t)]
    host = state.snapshot().running[job_id].allocation.tasks[0].host
    lost = [j for j, r in state.snapshot().running.items() if any(x.host == host for x in r.allocation.tasks)]
    return [NodeLost(host, t), NodeRestored(host, t), *(JobCancelled(j, t) for j in lost)]


def _job(state: ClusterState, rng: np.random.Generator, i: int, t: float) -> tuple[JobSpec, Allocation] | None:
    """A job of whole GPUs (1 or 2 per task) or of shares, on one or two hosts with room, estimate or none."""
    snap = state.snapshot()
    idle = (snap.gpu_used_milli == 0) & (snap.gpu_used_memory_mib == 0)
    share = bool(rng.random() < 0.2)
    per_task = 1 if share else int(rng.integers(1, 3))
    tasks = []
    for h in rng.permutation(snap.index.n_hosts)[: int(rng.integers(1, 3))].tolist():
        gpus = tuple(np.flatnonzero(idle[h])[:per_task].tolist())
        if len(gpus) == per_task:
            name = snap.index.host_name(h)
            tasks.append(TaskAllocation(name, gpus, 300, 1000) if share else TaskAllocation(name, gpus))
    if not tasks:
        return None
    est = float(rng.uniform(10.0, 900.0)) if rng.random() < 0.5 else None
    kind = {"share": GpuShare(300, 1000)} if share else {"gpus_per_task": per_task}
    spec = JobSpec(f"j{i}", t, tasks=len(tasks), estimated_runtime_s=est, **kind)  # type: ignore[arg-type]
    return spec, Allocation(spec.job_id, tuple(tasks))


def test_the_state_keeps_the_running_arrays_through_every_kind_of_end_and_compaction() -> None:
    rng = np.random.default_rng(11)
    state = ClusterState(leaf_spine(2, 2, 4, gpus_per_host=8))
    ended = 0
    for i in range(5000):
        t = float(i)
        running = sorted(state.snapshot().running)
        if running and (len(running) > 12 or rng.random() < 0.45):
            job_id = running[int(rng.integers(len(running)))]
            for event in _ends(state, job_id, int(rng.integers(4)), t):
                state.apply(event)
            ended += 1
        else:
            got = _job(state, rng, i, t)
            if got is None:
                continue
            spec, alloc = got
            state.apply(JobSubmitted(spec, t))
            state.apply(JobPlaced(alloc, t))
            if rng.random() < 0.5:
                state.apply(JobStarted(spec.job_id, t + 0.5))
        if i % 97 == 0:
            _same(state.snapshot())
    assert ended > 2 * 1100  # the table compacted its dead slots twice (at 1,025 dead, 13 running at most)
    _same(state.snapshot())
    _same(ClusterState.resumed(state.snapshot()).snapshot())
