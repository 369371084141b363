"""Sharing rules on small hand-built clusters with a fixed clock."""

from __future__ import annotations

from dataclasses import replace

from sched_builders import make_fabric, make_job

from gpupool.cluster import ClusterState
from gpupool.domain.calendar import parse_calendar
from gpupool.domain.events import JobPlaced, JobPreempted, JobStarted, JobSubmitted
from gpupool.domain.jobs import JobSpec, Scaling
from gpupool.domain.sharing import Quota
from gpupool.scheduler import (
    BackfillMode,
    CycleInputs,
    PreemptionConfig,
    ReasonCode,
    SchedulerConfig,
    ScheduleRequest,
    ScheduleResult,
    SharingPolicy,
    schedule,
)
from gpupool.scheduler.deadlines import Verdict, admit


def go(
    state: ClusterState,
    jobs: list[JobSpec],
    now: float,
    sh: SharingPolicy,
    inputs: CycleInputs | None = None,
    **cfg: object,
) -> ScheduleResult:
    config = SchedulerConfig(**cfg)  # type: ignore[arg-type]
    req = ScheduleRequest(state.snapshot(), tuple(jobs), now, config, sh, inputs or CycleInputs())
    result = schedule(req)
    assert result == schedule(req, remember_refusals=False)  # the refusal cache changes nothing
    return result


def start(state: ClusterState, result: ScheduleResult, jobs: list[JobSpec], now: float) -> None:
    by_id = {j.job_id: j for j in jobs}
    for a in result.placements:
        if state.job_state(a.job_id) is None:
            state.apply(JobSubmitted(by_id[a.job_id], now))
        state.apply(JobPlaced(a, now))
        state.apply(JobStarted(a.job_id, now))


def reasons(r: ScheduleResult) -> dict[str, ReasonCode]:
    return {w.job_id: w.reason for w in r.waiting}


def test_no_sharing_policy_and_an_empty_one_decide_alike() -> None:
    state = ClusterState(make_fabric(1, 2))
    jobs = [make_job(f"j{i}", gpus=3, t=float(i)) for i in range(7)]
    plain = schedule(ScheduleRequest(state.snapshot(), tuple(jobs), 0.0))
    shared = go(state, jobs, 0.0, SharingPolicy())
    assert plain.placements == shared.placements
    assert [(w.job_id, w.reason) for w in plain.waiting] == [(w.job_id, w.reason) for w in shared.waiting]


def test_quota_exceeded_says_how_much_is_used_needed_and_borrowable() -> None:
    state = ClusterState(make_fabric(1, 4))
    sh = SharingPolicy(quotas=(Quota("a", "training", 8),))
    jobs = [
        make_job("a1", gpus=6, tenant="a", pool="training"),
        make_job("a2", gpus=4, t=1, tenant="a", pool="training"),
    ]
    r = go(state, jobs, 0.0, sh)
    assert [a.job_id for a in r.placements] == ["a1"]
    (w,) = r.waiting
    assert w.reason is ReasonCode.QUOTA_EXCEEDED
    assert w.message == "tenant a uses 6 of its 8 GPUs in pool training; needs 4; may borrow 0 more"


def test_cohort_borrowing_up_to_lending_limit_then_owner_reclaims_after_grace() -> None:
    state = ClusterState(make_fabric(1, 4))  # 32 GPUs
    quotas = (
        Quota("a", "p", 16, cohort="c"),
        Quota("b", "p", 16, cohort="c", lending_limit_gpus=8),
    )
    sh = SharingPolicy(quotas=quotas, preemption=PreemptionConfig(grace_s=100.0))
    a_jobs = [make_job(f"a{i}", gpus=8, tenant="a", pool="p") for i in range(4)]
    r = go(state, a_jobs, 0.0, sh)
    assert sorted(a.job_id for a in r.placements) == ["a0", "a1", "a2"]  # 16 nominal + 8 borrowed
    assert reasons(r)["a3"] is ReasonCode.QUOTA_EXCEEDED
    assert "may borrow 0 more" in r.waiting[0].message
    start(state, r, a_jobs, 0.0)
    b = make_job("b0", tasks=2, gpus=8, t=50.0, tenant="b", pool="p")
    early = go(state, [b], 60.0, sh)
    assert not early.placements and reasons(early)["b0"] is ReasonCode.PREEMPTING
    assert len(early.signals) == 1 and early.signals[0].preempt_at_s == 150.0 and not early.preemptions
    late = go(state, [b], 150.0, sh)
    (p,) = late.preemptions
    assert p.reason is ReasonCode.QUOTA_RECLAIM
    state.apply(JobPreempted(p.job_id, 150.0))
    again = go(state, [b], 151.0, sh)
    assert [a.job_id for a in again.placements] == ["b0"]


def test_priority_preemption_takes_a_whole_gang_only_after_min_runtime() -> None:
    state = ClusterState(make_fabric(1, 2))  # 16 GPUs
    low = [
        make_job("gang", tasks=2, gpus=4, preemptible=True, priority=1),
        make_job("small", gpus=4, preemptible=True, priority=1, t=1),
        make_job("keep", gpus=4, priority=1, t=2),
    ]
    sh = SharingPolicy(preemption=PreemptionConfig(min_runtime_s=100.0))
    r = go(state, low, 0.0, sh)
    start(state, r, low, 0.0)
    hi = make_job("hi", gpus=8, priority=3, t=10)
    assert not go(state, [hi], 50.0, sh).preemptions  # nobody has run 100 s yet
    r2 = go(state, [hi], 100.0, sh)
    assert reasons(r2)["hi"] is ReasonCode.PREEMPTING
    victims = {p.job_id for p in r2.preemptions}
    assert "keep" not in victims and victims  # never a non-preemptible job
    for v in victims:
        state.apply(JobPreempted(v, 100.0))
    assert go(state, [hi, *state.snapshot().pending], 101.0, sh).placements[0].job_id == "hi"


CAL = """\
timezone = "UTC"
default_pool = "training"
[[pool]]
name = "inference"
hosts = ["node001", "node002", "node003", "node004"]
share = 0.5
share_outside = 0.0
windows = [{ days = "mon-sun", start = "08:00", end = "22:00" }]
"""
DAY0 = 1715212800.0  # 2024-05-09 00:00 UTC


def test_window_opening_signals_borrowers_then_preempts_them_after_grace() -> None:
    state = ClusterState(make_fabric(1, 4))
    cal = parse_calendar(CAL, "pools.toml")
    sh = SharingPolicy(calendar=cal, preemption=PreemptionConfig(grace_s=600.0))
    night = DAY0 + 3 * 3600
    # Preemptible: a pool reclaim never preempts a job that is not (a service).
    train = [make_job(f"t{i}", gpus=8, pool="training", preemptible=True) for i in range(4)]
    r = go(state, train, night, sh)
    assert len(r.placements) == 4  # at night training owns everything
    start(state, r, train, night)
    opened = DAY0 + 8 * 3600
    r1 = go(state, [], opened + 60, sh)
    assert {s.job_id for s in r1.signals} == {"t0", "t1"} and not r1.preemptions
    assert all(s.reason is ReasonCode.POOL_WINDOW_CLOSED and s.preempt_at_s == opened + 600 for s in r1.signals)
    r2 = go(state, [], opened + 600, sh)
    assert {p.job_id for p in r2.preemptions} == {"t0", "t1"}
    for p in r2.preemptions:
        state.apply(JobPreempted(p.job_id, opened + 600))
    inf = [make_job("i0", gpus=8, pool="inference"), make_job("i1", gpus=8, pool="inference")]
    r3 = go(state, inf, opened + 601, sh)
    assert {t.host for a in r3.placements for t in a.tasks} == {"node001", "node002"}


def test_easy_backfill_reserves_for_the_head_and_lets_short_jobs_through() -> None:
    state = ClusterState(make_fabric(1, 2))  # 16 GPUs
    running = [
        make_job("r", gpus=8, estimated_runtime_s=1000.0),
        make_job("s", gpus=4, t=1, estimated_runtime_s=5000.0),
    ]
    sh = SharingPolicy(backfill=BackfillMode.EASY, default_runtime_s=1e6)
    r = go(state, running, 0.0, sh)
    start(state, r, running, 0.0)
    head = make_job("head", gpus=8, t=10)  # 4 free: waits until r ends at 1000
    short = make_job("short", gpus=4, t=11, estimated_runtime_s=500.0)
    long = make_job("long", gpus=4, t=12, estimated_runtime_s=5000.0)
    r2 = go(state, [head, short, long], 100.0, sh, policy="fifo")
    why = reasons(r2)
    assert why["head"] is ReasonCode.WAITING_FOR_RESERVATION
    (res,) = r2.reservations
    assert res.job_id == "head" and res.start_s == 1000.0
    placed = [a.job_id for a in r2.placements]
    assert placed == ["short"] or why.get("long") is ReasonCode.RESERVED
    assert "long" not in placed


def test_no_reservation_is_built_on_running_jobs_without_estimates() -> None:
    """A running job without an estimate is not counted on to end: with only such jobs running, EASY makes no
    reservation (as without backfill); an estimate makes it, on r's host from its expected end."""
    for estimate, reserved in ((None, False), (1000.0, True)):
        state = ClusterState(make_fabric(1, 2))  # 16 GPUs
        running = [make_job("r", gpus=8, estimated_runtime_s=estimate), make_job("s", gpus=4, t=1)]
        sh = SharingPolicy(backfill=BackfillMode.EASY)
        start(state, go(state, running, 0.0, sh), running, 0.0)
        head, small = make_job("head", gpus=8, t=10), make_job("small", gpus=4, t=11)
        r = go(state, [head, small], 100.0, sh, policy="fifo")
        assert [(x.job_id, x.start_s, x.hosts) for x in r.reservations] == (
            [("head", 1000.0, ("node001",))] if reserved else []
        )
        assert [a.job_id for a in r.placements] == ["small"]  # on s's host, off the reservation


def test_deadline_infeasible_and_elastic_job_takes_fewer_tasks_when_it_still_meets_it() -> None:
    state = ClusterState(make_fabric(1, 2))  # 16 GPUs
    busy = [make_job("busy", gpus=8)]
    start(state, go(state, busy, 0.0, SharingPolicy()), busy, 0.0)
    late = make_job("late", gpus=1, estimated_runtime_s=100.0, deadline_s=50.0)
    elastic = make_job(
        "el", tasks=4, gpus=4, estimated_runtime_s=100.0, deadline_s=250.0, min_tasks=1, scaling=Scaling.LINEAR
    )
    r = go(state, [late, elastic], 0.0, SharingPolicy())
    assert reasons(r)["late"] is ReasonCode.DEADLINE_INFEASIBLE
    (a,) = r.placements
    assert a.job_id == "el" and len(a.tasks) == 2  # 8 free GPUs: 2 tasks, 200 s <= 250 s
    tight = replace(elastic, job_id="el2", deadline_s=150.0)
    r2 = go(state, [tight], 0.0, SharingPolicy())
    assert not r2.placements  # 2 tasks would need 200 s


def test_slack_policy_raises_a_deadline_job_as_its_slack_shrinks() -> None:
    state = ClusterState(make_fabric(1, 1))
    hi = make_job("hi", gpus=8, priority=3)
    dl = make_job("dl", gpus=8, priority=2, t=5, estimated_runtime_s=100.0, deadline_s=1000.0)
    early = go(state, [hi, dl], 0.0, SharingPolicy(), policy="slack")
    assert [a.job_id for a in early.placements] == ["hi"]
    urgent = go(state, [hi, dl], 880.0, SharingPolicy(), policy="slack")
    assert [a.job_id for a in urgent.placements] == ["dl"]


def test_fair_policy_interleaves_tenants_by_dominant_share_and_history() -> None:
    state = ClusterState(make_fabric(1, 1))
    jobs = [make_job(f"a{i}", gpus=2, t=float(i), tenant="a") for i in range(4)]
    jobs += [make_job(f"b{i}", gpus=2, t=10.0 + i, tenant="b") for i in range(4)]
    r = go(state, jobs, 0.0, SharingPolicy(), policy="fair")
    assert sorted(a.job_id for a in r.placements) == ["a0", "a1", "b0", "b1"]
    heavy = CycleInputs(usage_gpu_s={"a": 8 * 7 * 86400.0})
    r2 = go(state, jobs, 0.0, SharingPolicy(), heavy, policy="fair")
    assert sorted(a.job_id for a in r2.placements) == ["b0", "b1", "b2", "b3"]


def test_admission_predicts_finish_from_queue_and_running_ends() -> None:
    state = ClusterState(make_fabric(1, 2))  # 16 GPUs
    busy = [make_job("busy", gpus=8, estimated_runtime_s=1000.0)]
    start(state, go(state, busy, 0.0, SharingPolicy()), busy, 0.0)
    ahead = [make_job("ahead", gpus=8, estimated_runtime_s=500.0)]
    sh = SharingPolicy()
    job = make_job("d", gpus=16, estimated_runtime_s=100.0, deadline_s=2000.0)
    a = admit(state.snapshot(), job, ahead, 0.0, sh)
    # busy ends at 1000, ahead at 500; then the default launch of 0.4 s and its 100 s
    assert a.verdict is Verdict.FEASIBLE and a.earliest_finish_s == 1100.4
    assert admit(state.snapshot(), replace(job, deadline_s=1105.0), ahead, 0.0, sh).verdict is Verdict.AT_RISK
    assert admit(state.snapshot(), replace(job, deadline_s=1000.0), ahead, 0.0, sh).verdict is Verdict.INFEASIBLE
    el = make_job(
        "e", tasks=4, gpus=4, estimated_runtime_s=100.0, deadline_s=400.0, min_tasks=2, scaling=Scaling.LINEAR
    )
    e = admit(state.snapshot(), el, [], 0.0, sh)
    assert e.tasks == 2 and e.earliest_finish_s == 200.4 and e.verdict is Verdict.FEASIBLE
