"""Topology by default (``scheduler.topowait``): a gang over several hosts goes under one leaf without asking,
and in mode ``preferred`` waits for one only while one is expected to have room within ``topology_wait_s``."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from sched_builders import make_fabric, make_job, run, submit_and_place

from gpupool.cluster import ClusterState
from gpupool.cluster.snapshot import ClusterSnapshot
from gpupool.domain.events import JobStarted, NodeLabelled
from gpupool.domain.jobs import MILLI_PER_GPU, JobSpec, Scope, TopologyMode, TopologyRequirement
from gpupool.scheduler import ReasonCode, SchedulerConfig, ScheduleRequest, ScheduleResult, schedule
from gpupool.scheduler.topowait import TopologyWait


def _gang(mode: TopologyMode = TopologyMode.PREFERRED) -> JobSpec:
    """32 GPUs in 4 tasks of 8: one leaf of 4 hosts x 8 holds it; it states no scope."""
    return JobSpec("gang", 0.0, tasks=4, gpus_per_task=8, topology=TopologyRequirement(Scope.ANY, mode))


def _busy(estimate_s: float | None, now: float = 0.0) -> ClusterState:
    """Two leaves of 4 hosts x 8 GPUs, each with one host taken (8 GPUs) by a job placed at ``now``: 24 GPUs
    free per leaf, 48 in all, so the 32-GPU gang fits only across the leaves."""
    state = ClusterState(make_fabric(2, 4))
    jobs = [
        make_job("a", gpus=8, node_selector=(("slot", "a"),), estimated_runtime_s=estimate_s),
        make_job("b", gpus=8, node_selector=(("slot", "b"),), estimated_runtime_s=estimate_s),
    ]
    state.apply(NodeLabelled("node001", (("slot", "a"),), 0))
    state.apply(NodeLabelled("node005", (("slot", "b"),), 0))
    submit_and_place(state, run(state, jobs, now), jobs, now)
    assert len(state.snapshot().running) == 2
    return state


def _leaves(state: ClusterState, res: ScheduleResult) -> set[int]:
    ix = state.snapshot().index
    leaf = next(lv for lv in ix.levels if lv.domain.name == "LEAF")
    return {int(leaf.ids[ix.host_index(t.host)]) for a in res.placements for t in a.tasks}


def test_a_gang_goes_under_one_leaf_when_one_has_room_without_asking() -> None:
    state = ClusterState(make_fabric(2, 4))
    res = run(state, [_gang()])
    assert len(res.placements) == 1
    assert len(_leaves(state, res)) == 1


def test_preferred_waits_for_a_leaf_expected_to_free_within_the_wait() -> None:
    state = _busy(estimate_s=600.0)
    res = run(state, [_gang()], 0.0, topology_wait_s=3600.0)
    assert res.placements == ()
    assert res.waiting[0].reason is ReasonCode.TOPOLOGY
    assert res.waiting[0].message == "needs 32 GPUs under one leaf; the best leaf has 24 free"


def test_preferred_crosses_leaves_when_no_leaf_frees_within_the_wait() -> None:
    state = _busy(estimate_s=7200.0)
    res = run(state, [_gang()], 0.0, topology_wait_s=3600.0)
    assert len(res.placements) == 1
    assert len(_leaves(state, res)) == 2


def test_the_wait_is_bounded_for_jobs_without_estimates_by_their_runtime_so_far() -> None:
    """Without estimates a running job is expected to run as long again: young ones free soon (wait), ones that
    ran past the wait do not (cross), so a gang never waits on jobs that keep running."""
    state = _busy(estimate_s=None)
    assert run(state, [_gang()], 100.0, topology_wait_s=3600.0).placements == ()
    late = run(state, [_gang()], 4000.0, topology_wait_s=3600.0)
    assert len(late.placements) == 1
    assert len(_leaves(state, late)) == 2


def test_mode_any_never_waits_and_required_always_does() -> None:
    state = _busy(estimate_s=600.0)
    anyway = run(state, [_gang(TopologyMode.ANY)], 0.0, topology_wait_s=3600.0)
    assert len(anyway.placements) == 1
    assert len(_leaves(state, anyway)) == 2
    late = _busy(estimate_s=7200.0)
    required = run(late, [_gang(TopologyMode.REQUIRED)], 0.0, topology_wait_s=3600.0)
    assert required.placements == ()
    assert required.waiting[0].reason is ReasonCode.TOPOLOGY


def test_no_wait_setting_is_the_old_best_effort() -> None:
    state = _busy(estimate_s=600.0)
    res = run(state, [_gang()], 0.0, topology_wait_s=0.0)
    assert len(res.placements) == 1
    assert len(_leaves(state, res)) == 2


def test_a_gang_bigger_than_any_leaf_is_not_held() -> None:
    """48 GPUs: no leaf of 32 holds it, so it is placed across leaves at once."""
    state = _busy(estimate_s=600.0)
    big = JobSpec("big", 0.0, tasks=6, gpus_per_task=8)
    res = run(state, [big], 0.0, topology_wait_s=3600.0)
    assert len(res.placements) == 1


def test_the_decision_is_the_cycles_own_and_repeats() -> None:
    state = _busy(estimate_s=600.0)
    a = run(state, [_gang()], 10.0)
    b = run(state, [_gang()], 10.0)
    assert a == b


def test_like_gangs_behind_each_other_all_wait_for_the_leaf_as_the_first_does() -> None:
    """The jobs after the first of a refused shape wait without a visit (by shape); their reason is the cycle's
    topology for them, the same as when every job is decided afresh."""
    state = _busy(estimate_s=600.0)
    gangs = [replace(_gang(), job_id=f"gang{i}") for i in range(4)]
    res = run(state, gangs, 0.0, topology_wait_s=3600.0)
    assert [w.job_id for w in res.waiting] == [g.job_id for g in gangs]
    assert {(w.reason, w.message) for w in res.waiting} == {
        (ReasonCode.TOPOLOGY, "needs 32 GPUs under one leaf; the best leaf has 24 free")
    }
    req = ScheduleRequest(state.snapshot(), tuple(gangs), 0.0, SchedulerConfig(topology_wait_s=3600.0))
    assert schedule(req, remember_refusals=False) == schedule(req)


def _ends_by_rule(snap: ClusterSnapshot, now: float, wait_s: float) -> np.ndarray:
    """Whole GPUs per host of the running jobs expected to end within ``wait_s``, job by job: start + estimate
    while within it, else now + the runtime so far."""
    out = np.zeros(snap.index.n_hosts, dtype=np.int64)
    for r in snap.running.values():
        start = r.started_at_s if r.started_at_s is not None else r.placed_at_s
        age = max(0.0, now - start)
        est = r.spec.estimated_runtime_s
        end = start + est if est is not None and est > age else now + age
        if end <= now + wait_s:
            for t in r.allocation.tasks:
                if t.milli_gpu >= MILLI_PER_GPU:
                    out[snap.index.host_index(t.host)] += len(t.gpus)
    return out


def test_future_free_adds_the_gpus_of_the_jobs_expected_to_end_within_the_wait() -> None:
    """Placed and started jobs, with and without estimates, shares among them, at times before and after the
    cycle's ``now``: the count for every job at once is the rule's, job by job."""
    rng = np.random.default_rng(5)
    state = ClusterState(make_fabric(4, 4))
    for i in range(60):
        at = float(rng.uniform(0.0, 4000.0))
        est = float(rng.uniform(10.0, 3000.0)) if rng.random() < 0.5 else None
        if rng.random() < 0.2:
            job = make_job(f"j{i}", share=(300, 1000), estimated_runtime_s=est)
        else:
            tasks, gpus = int(rng.choice([1, 2])), int(rng.choice([1, 2, 4]))
            job = make_job(f"j{i}", tasks=tasks, gpus=gpus, estimated_runtime_s=est)
        submit_and_place(state, run(state, [job], at), [job], at)
        if rng.random() < 0.5 and state.snapshot().running.get(job.job_id):
            state.apply(JobStarted(job.job_id, at + float(rng.uniform(0.0, 200.0))))
    snap = state.snapshot()
    assert len(snap.running) > 30
    free0 = np.arange(snap.index.n_hosts, dtype=np.int64)
    for now in (0.0, 1000.0, 2500.0, 4000.0, 9000.0):
        for wait_s in (0.0, 300.0, 3600.0):
            got = TopologyWait(snap, free0, now, wait_s)._future_free()
            assert got.tolist() == (free0 + _ends_by_rule(snap, now, wait_s)).tolist(), (now, wait_s)
