"""The cycle's lifecycle rules: time limits (a signal within the lead, an ending at the limit), dependencies
(wait, run, or end when never met), arrays' concurrency caps, and strict ordering not held behind them.
The same rules in the simulator: its engine runs the same cycle."""

from __future__ import annotations

from sched_builders import make_fabric, make_job, run, submit_and_place

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobEnded, JobStarted, JobSubmitted
from gpupool.domain.jobs import Dependency, DependencyKind
from gpupool.domain.states import JobState
from gpupool.scheduler import ReasonCode, SignalKind
from gpupool.scheduler.settings import SchedulerSettings
from gpupool.sim.engine import Engine
from gpupool.sim.fabrics import uniform_fabric
from gpupool.sim.world import SimJob, WorldConfig


def running(state: ClusterState, job_id: str, started_at: float, **kw: object) -> None:
    job = make_job(job_id, gpus=8, **kw)
    r = run(state, [job])
    submit_and_place(state, r, [job])
    state.apply(JobStarted(job_id, started_at))


def test_a_job_gets_its_signal_within_the_lead_and_ends_at_its_limit() -> None:
    state = ClusterState(make_fabric(1, 2))
    running(state, "a", 100.0, time_limit_s=600.0)
    running(state, "b", 100.0, time_limit_s=600.0, signal_lead_s=300.0)
    early = run(state, [], now=500.0, time_limit_lead_s=60.0)
    assert [(s.job_id, s.kind, s.reason, s.preempt_at_s) for s in early.signals] == [
        ("b", SignalKind.CHECKPOINT, ReasonCode.TIME_LIMIT, 700.0)
    ]
    assert early.endings == ()
    late = run(state, [], now=650.0, time_limit_lead_s=60.0)
    assert {s.job_id for s in late.signals} == {"a", "b"}
    done = run(state, [], now=700.0, time_limit_lead_s=60.0)
    assert [(e.job_id, e.reason) for e in done.endings] == [("a", ReasonCode.TIME_LIMIT), ("b", ReasonCode.TIME_LIMIT)]
    assert "past its time limit of 600 s" in done.endings[0].message


def test_a_placed_job_that_has_not_started_is_not_timed() -> None:
    state = ClusterState(make_fabric(1, 1))
    job = make_job("a", gpus=8, time_limit_s=10.0)
    submit_and_place(state, run(state, [job]), [job])
    assert run(state, [], now=10_000.0).endings == ()


def dep(kind: DependencyKind, *ids: str) -> tuple[Dependency, ...]:
    return (Dependency(kind, ids),)


def test_dependencies_wait_then_run_or_end_as_slurm_says() -> None:
    state = ClusterState(make_fabric(1, 4))
    for j in ("up", "down"):
        state.apply(JobSubmitted(make_job(j, gpus=8), 0.0))
    waiting = [
        make_job("ok", after=dep(DependencyKind.AFTEROK, "up")),
        make_job("notok", after=dep(DependencyKind.AFTERNOTOK, "up")),
        make_job("any", after=dep(DependencyKind.AFTERANY, "up", "down")),
        make_job("after", after=dep(DependencyKind.AFTER, "up")),
        make_job("ghost", after=dep(DependencyKind.AFTERANY, "nobody")),
    ]
    for j in waiting:
        state.apply(JobSubmitted(j, 0.0))
    r = run(state, waiting, now=1.0)
    reasons = {w.job_id: w.reason for w in r.waiting}
    assert reasons == {j: ReasonCode.DEPENDENCY for j in ("ok", "notok", "any", "after")}
    assert [(e.job_id, e.reason) for e in r.endings] == [("ghost", ReasonCode.DEPENDENCY_NEVER_SATISFIED)]
    assert "job nobody is not known" in r.endings[0].message
    state.apply(JobEnded("up", JobState.FINISHED, 2.0))
    state.apply(JobEnded("down", JobState.FAILED, 2.0))
    r = run(state, waiting[:4], now=3.0)
    assert {a.job_id for a in r.placements} == {"ok", "any", "after"}
    (ended,) = r.endings
    assert (ended.job_id, ended.reason) == ("notok", ReasonCode.DEPENDENCY_NEVER_SATISFIED)
    assert ended.message == "dependency never satisfied: afternotok: job up ended finished"


def test_an_array_cap_holds_its_elements_and_counts_what_this_cycle_placed() -> None:
    state = ClusterState(make_fabric(1, 4))  # 32 GPUs: room for all eight at once but for the cap
    elements = [make_job(f"a.{i}", gpus=1, t=i * 1e-6, array_id="a", array_index=i, array_cap=3) for i in range(8)]
    for j in elements:
        state.apply(JobSubmitted(j, 0.0))
    r = run(state, elements, policy="fifo")
    assert [a.job_id for a in r.placements] == ["a.0", "a.1", "a.2"]
    assert {w.reason for w in r.waiting} == {ReasonCode.ARRAY_LIMIT}
    assert "array a has 3 elements placed or running, its cap (%3)" in r.waiting[0].message
    submit_and_place(state, r, elements)
    assert run(state, elements[3:], policy="fifo").placements == ()


def test_strict_ordering_does_not_wait_behind_a_job_held_by_its_dependency() -> None:
    state = ClusterState(make_fabric(1, 1))
    state.apply(JobSubmitted(make_job("first", gpus=8), 0.0))
    held = make_job("held", t=1.0, after=dep(DependencyKind.AFTEROK, "first"))
    later = make_job("later", t=2.0)
    for j in (held, later):
        state.apply(JobSubmitted(j, 0.0))
    r = run(state, [held, later], now=3.0, strict=True, policy="fifo")
    assert [a.job_id for a in r.placements] == ["later"]


def test_the_simulator_honours_caps_dependencies_and_time_limits() -> None:
    fab = uniform_fabric(32, 8)  # four hosts of 8 GPUs
    array = [
        SimJob(make_job(f"a.{i}", gpus=1, t=i * 1e-6, array_id="a", array_index=i, array_cap=4), 100.0)
        for i in range(20)
    ]
    after = SimJob(
        make_job("next", gpus=8, t=1.0, after=dep(DependencyKind.AFTEROK, *(j.spec.job_id for j in array))), 10.0
    )
    broken = SimJob(make_job("broken", gpus=8, t=1.0, after=dep(DependencyKind.AFTERNOTOK, "a.0")), 10.0)
    limited = SimJob(make_job("long", gpus=8, time_limit_s=50.0), 1000.0)
    res = Engine(
        fab,
        [*array, after, broken, limited],
        SchedulerSettings(policy="fifo"),
        WorldConfig(launch_latency_s=0.0, exit_latency_s=0.0),
    ).run()
    rec = {r.job_id: r for r in res.records}
    runs = sorted((rec[j.spec.job_id].start_s or 0.0, rec[j.spec.job_id].end_s or 0.0) for j in array)
    # At most 4 elements at any instant (an element ending at t frees its slot for one starting at t).
    assert max(sum(1 for s, e in runs if s <= t < e) for t, _ in runs) == 4
    assert rec["next"].start_s == max(e for _, e in runs)
    assert rec["broken"].start_s is None
    assert (rec["long"].start_s, rec["long"].end_s) == (0.0, 50.0)
