"""ElasticFlow's minimum satisfactory share (``scheduler/elastic.py``): each deadline job gets the fewest GPUs of
its curve that still meet its deadline, a newcomer is admitted only if every admitted job still can, what is
left goes to best-effort jobs and then by marginal gain, and a running job changes size only at a checkpoint
(signal, then a ``RESIZE`` stop) with its progress kept."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sched_builders import make_fabric
from test_driver import Recorder

from gpupool.cluster import ClusterState
from gpupool.domain.elastic import Elastic, ThroughputCurve
from gpupool.domain.events import JobPlaced, JobStarted, JobSubmitted
from gpupool.domain.jobs import Allocation, JobSpec, TaskAllocation
from gpupool.scheduler.driver import CycleDriver
from gpupool.scheduler.elastic import ElasticConfig, ElasticPlan, ElasticPlanner, Profile, useful_sizes
from gpupool.scheduler.settings import SchedulerSettings, scheduler_config, sharing_policy

CURVE = ThroughputCurve(((1, 10.0), (2, 18.0), (4, 30.0), (8, 40.0), (16, 39.0)))


def ejob(key: str, deadline: float | None, *, est: float = 100.0, t: float = 0.0, top: int = 16) -> JobSpec:
    """Asks 1 GPU for ``est`` seconds; may run at 1..``top`` GPUs of CURVE."""
    return JobSpec(key, t, estimated_runtime_s=est, deadline_s=deadline, elastic=Elastic(1, top, CURVE))


def state_of(gpus: int, jobs: list[JobSpec]) -> ClusterState:
    state = ClusterState(make_fabric(1, 1, gpus))
    for j in jobs:
        state.apply(JobSubmitted(j, j.submit_time_s))
    return state


def plan(gpus: int, jobs: list[JobSpec], now: float = 0.0, planner: ElasticPlanner | None = None) -> ElasticPlan:
    snap = state_of(gpus, jobs).snapshot()
    return (planner or ElasticPlanner()).plan(snap, snap.pending, now)


def test_useful_sizes_stop_at_the_curves_peak() -> None:
    assert useful_sizes(Elastic(1, 16, CURVE), 1) == (1, 2, 4, 8)


def test_each_deadline_job_gets_the_fewest_gpus_that_meet_its_deadline() -> None:
    """5 GPUs, nothing left over: a loose deadline runs on 1 GPU (100 s of 1-GPU work by t=200); a tight one
    (t=45, 5 s margin) needs 4 (33 s), since 2 take 56 s."""
    p = plan(5, [ejob("loose", 200.0), ejob("tight", 45.0)])
    assert dict(p.sizes) == {"loose": 1, "tight": 4}
    assert p.rejected == () and p.resizes == ()


def test_a_newcomer_is_refused_when_the_admitted_jobs_leave_too_little_and_held_when_it_can_wait() -> None:
    planner = ElasticPlanner()
    first = [ejob("loose", 200.0), ejob("tight", 45.0)]
    plan(5, first, planner=planner)
    # Now: 1 + 4 GPUs held by admitted shares. "late" needs 2 GPUs for 56 s by t=60: refused.
    late = ejob("late", 60.0, t=1.0)
    p = plan(5, [*first, late], planner=planner)
    assert p.rejected == ("late",) and "cannot finish by its deadline t=60" in p.messages["late"]
    assert dict(p.sizes) == {"loose": 1, "tight": 4}
    # "waits" can start when "tight" ends (t=33) and still make t=200 on 4 GPUs: admitted, held.
    waits = ejob("waits", 200.0, est=400.0, t=1.0)
    p = plan(5, [*first, waits], planner=planner)
    assert p.rejected == () and p.held == frozenset({"waits"})


def test_leftover_goes_to_best_effort_first_then_by_marginal_gain() -> None:
    """6 GPUs: shares 1 + 4, one left: the best-effort job gets it rather than a deadline job growing."""
    p = plan(6, [ejob("loose", 200.0), ejob("tight", 45.0), ejob("be", None)])
    assert dict(p.sizes) == {"loose": 1, "tight": 4, "be": 1}
    # 16 GPUs: every job grows while a step gains; nobody passes the curve's peak (8) and the sum fits.
    p = plan(16, [ejob("loose", 200.0), ejob("tight", 45.0), ejob("be", None)])
    assert sum(p.sizes.values()) <= 16 and max(p.sizes.values()) <= 8
    assert p.sizes["loose"] > 1


def test_the_plan_is_deterministic() -> None:
    jobs = [ejob(f"j{i}", 100.0 + 37 * i, est=20.0 + 11 * i) for i in range(12)] + [ejob("be", None)]
    assert plan(24, jobs) == plan(24, jobs)


def test_profile_finds_the_earliest_window_with_room() -> None:
    prof = Profile(8, 0.0)
    prof.add(0.0, 10.0, 6)
    prof.add(5.0, 20.0, 2)
    assert prof.earliest(0.0, 5.0, 2, 100.0) == 0.0
    assert prof.earliest(0.0, 5.0, 3, 100.0) == 10.0
    assert prof.earliest(0.0, 5.0, 7, 100.0) == 20.0
    assert prof.earliest(0.0, 5.0, 7, 24.0) is None


def test_a_running_job_is_shrunk_at_a_checkpoint_for_a_newcomer_and_keeps_its_progress() -> None:
    """Alone on 8 GPUs, "big" grows to 8 (its curve's peak). A tight newcomer needs 4: "big" is signalled,
    stopped (RESIZE) and placed again on 4, with the work of its 8-GPU run credited by the curve."""
    settings = SchedulerSettings()
    driver = CycleDriver(scheduler_config(settings), settings.usage_half_life_s)
    sharing = sharing_policy(settings)
    big = ejob("big", 1000.0, est=400.0)
    state = state_of(8, [big])
    act = Recorder(state)
    snap = state.snapshot()
    driver.run_cycle(snap, snap.pending, sharing, act, 0.0)
    assert state.snapshot().running["big"].gpu_milli == 8000
    # 10 s on 8 GPUs: 10 * 40 = 400 of its 4,000 units of work (400 s at 10/s).
    tight = ejob("tight", 60.0, est=100.0, t=10.0)
    state.apply(JobSubmitted(tight, 10.0))
    act.calls.clear()
    snap = state.snapshot()
    run = driver.run_cycle(snap, snap.pending, sharing, act, 10.0)
    assert act.calls[:2] == [("signal", "big"), ("preempt", "big")]
    assert run.preempted == 1
    # The next round (the engine's and the loop's follow-up after a preemption) places both.
    snap = state.snapshot()
    driver.run_cycle(snap, snap.pending, sharing, act, 10.0)
    running = state.snapshot().running
    assert running["tight"].gpu_milli == 4000 and running["big"].gpu_milli == 4000
    assert driver.elastic.runtime(big, 4) == pytest.approx((4000 - 400) / 30.0)


def test_a_resize_that_saves_less_than_its_restart_is_not_made() -> None:
    """A running job 5 s from its end does not restart (60 s) to use GPUs that just freed up."""
    cfg = ElasticConfig()
    job = ejob("near", 1000.0, est=50.0)
    state = state_of(8, [job])
    state.apply(JobPlaced(_alloc("near", 1), 0.0))
    state.apply(JobStarted("near", 0.0))
    snap = state.snapshot()
    p = ElasticPlanner(cfg).plan(snap, snap.pending, 45.0)
    assert dict(p.sizes) == {"near": 1} and p.resizes == ()


def _alloc(key: str, gpus: int) -> Allocation:
    return Allocation(key, (TaskAllocation(make_fabric(1, 1, 8).hosts[0].name, tuple(range(gpus))),))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(5.0, 500.0), st.one_of(st.none(), st.floats(10.0, 2000.0)), st.sampled_from([1, 2, 4, 8])),
        min_size=1,
        max_size=14,
    ),
    st.sampled_from([4, 8, 16]),
)
def test_a_plan_fits_the_gpus_and_gives_every_admitted_job_a_size_that_meets_its_deadline(
    rows: list[tuple[float, float | None, int]], gpus: int
) -> None:
    """For any queue: the sizes planned now fit the pool, each is one of the job's sizes, every deadline job is
    either refused, held for later, or planned at a size whose finish (its work at that size) meets its
    deadline; best-effort jobs are never refused."""
    jobs = [ejob(f"j{i}", dl, est=est, top=top) for i, (est, dl, top) in enumerate(rows)]
    p = plan(gpus, jobs)
    assert sum(p.sizes.values()) <= gpus
    by_id = {j.job_id: j for j in jobs}
    for key, g in p.sizes.items():
        j = by_id[key]
        assert j.elastic is not None and g in j.elastic.sizes()
        if j.deadline_s is not None:
            assert j.estimated_runtime_s is not None
            assert j.estimated_runtime_s * CURVE.rate(1) / CURVE.rate(g) <= j.deadline_s - ElasticConfig().margin_s
    assert all(by_id[k].deadline_s is not None for k in p.rejected)
    assert set(p.sizes) | set(p.rejected) | p.held == set(by_id)  # every job is decided, once
    assert not (set(p.sizes) & set(p.rejected)) and not (set(p.sizes) & p.held)


def test_a_running_job_another_planner_admitted_is_kept_not_refused() -> None:
    """A new leader's planner sees a job running that it never admitted (placed at t=0, started at t=85,
    deadline t=105): by this run alone 95 s of 1-GPU work are left, which no size finishes in time, but
    the runs before are unknown here. It is kept at its size: not ended, not resized."""
    job = ejob("j", 105.0, est=100.0)
    state = state_of(8, [job])
    state.apply(JobPlaced(_alloc("j", 1), 0.0))
    state.apply(JobStarted("j", 85.0))
    snap = state.snapshot()
    p = ElasticPlanner().plan(snap, snap.pending, 90.0)
    assert p.rejected == () and p.resizes == () and p.sizes["j"] == 1


def test_an_admitted_job_that_is_refused_later_is_refused_once() -> None:
    """Admitted (alone, pending at t=0), then started only at t=85 with its deadline at t=105: at t=90, 95 s
    of 1-GPU work are left; 1 GPU ends at t=185, 8 (24 s plus the 60 s restart) at t=174. It is refused
    once (not again as a newcomer in the same plan), keeps no GPUs in the plan, and no resize is asked."""
    planner = ElasticPlanner()
    job = ejob("j", 105.0, est=100.0)
    state = state_of(8, [job])
    snap = state.snapshot()
    assert dict(planner.plan(snap, snap.pending, 0.0).sizes) == {"j": 8}  # admitted, alone: grows to 8
    state.apply(JobPlaced(_alloc("j", 1), 0.0))
    state.apply(JobStarted("j", 85.0))
    snap = state.snapshot()
    p = planner.plan(snap, snap.pending, 90.0)
    assert p.rejected == ("j",) and p.resizes == () and "j" not in p.sizes
