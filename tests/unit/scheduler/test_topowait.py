"""Topology by default (``scheduler.topowait``): a gang over several hosts goes under one leaf without asking,
and in mode ``preferred`` waits for one only while one is expected to have room within ``topology_wait_s``."""

from __future__ import annotations

from sched_builders import make_fabric, make_job, run, submit_and_place

from gpupool.cluster import ClusterState
from gpupool.domain.events import NodeLabelled
from gpupool.domain.jobs import JobSpec, Scope, TopologyMode, TopologyRequirement
from gpupool.scheduler import ReasonCode, ScheduleResult


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
