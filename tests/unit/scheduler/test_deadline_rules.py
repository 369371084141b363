"""Deadline jobs under the defaults: admission counts the launch, a job about to miss preempts work without a
deadline, and the default order (``srt``) serves deadline jobs by their latest start."""

from __future__ import annotations

import dataclasses

from sched_builders import make_fabric, make_job
from test_sharing_rules import go, reasons, start

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobPreempted, JobSubmitted
from gpupool.domain.jobs import JobSpec
from gpupool.scheduler import ReasonCode, SchedulerConfig, ScheduleRequest, SharingPolicy, schedule
from gpupool.scheduler.deadlines import AT_RISK_MIN_S, RESTART_S, Verdict, admit
from gpupool.scheduler.policies import get_policy, order
from gpupool.scheduler.queue import QueueIndex
from gpupool.scheduler.settings import SchedulerSettings, sharing_policy


def test_admission_counts_the_launch_latency() -> None:
    """100 s of work, 100.2 s to the deadline: placed now it runs from t=0.4 and ends 0.2 s late."""
    state = ClusterState(make_fabric(1, 1))
    job = make_job("d", gpus=1, estimated_runtime_s=100.0, deadline_s=100.2)
    late = go(state, [job], 0.0, SharingPolicy(launch_latency_s=0.4))
    assert reasons(late)["d"] is ReasonCode.DEADLINE_INFEASIBLE
    assert "after a launch of 0.4 s" in late.waiting[0].message
    assert [a.job_id for a in go(state, [job], 0.0, SharingPolicy(launch_latency_s=0.0)).placements] == ["d"]


def _full_of(best_effort_preemptible: bool, victim_deadline: float | None = None) -> ClusterState:
    """8 GPUs, all held since t=0 by one job (no deadline unless ``victim_deadline``)."""
    state = ClusterState(make_fabric(1, 1))
    be = make_job("be", gpus=8, preemptible=best_effort_preemptible, deadline_s=victim_deadline)
    start(state, go(state, [be], 0.0, SharingPolicy()), [be], 0.0)
    return state


def test_a_deadline_job_at_risk_preempts_a_preemptible_job_without_a_deadline() -> None:
    state = _full_of(best_effort_preemptible=True)
    sh = SharingPolicy(deadline_admission=True)  # at risk: slack under 10% of the runtime
    tight = make_job("dl", gpus=8, t=900.0, estimated_runtime_s=1000.0, deadline_s=1000.0 + 1000.0 + 50.0)
    r = go(state, [tight], 1000.0, sh)
    assert [(p.job_id, p.reason) for p in r.preemptions] == [("be", ReasonCode.DEADLINE)]
    assert reasons(r)["dl"] is ReasonCode.PREEMPTING


def test_a_deadline_job_at_risk_takes_a_young_victim_the_min_runtime_does_not_spare() -> None:
    """The victim has run 100 s, under ``preemption_min_runtime_s`` (300 s): a peer could not take it, a deadline
    job about to miss does (the youngest lose the least work)."""
    state = _full_of(best_effort_preemptible=True)
    sh = SharingPolicy(deadline_admission=True)
    assert sh.preemption.min_runtime_s == 300.0
    tight = make_job("dl", gpus=8, t=90.0, estimated_runtime_s=1000.0, deadline_s=100.0 + 1000.0 + 50.0)
    r = go(state, [tight], 100.0, sh)
    assert [(p.job_id, p.reason) for p in r.preemptions] == [("be", ReasonCode.DEADLINE)]


def test_a_short_deadline_job_is_at_risk_for_at_least_half_a_minute() -> None:
    """28 s of work: 10% of its runtime is 2.8 s, a window the cycles (at the cluster's events) can step over;
    with 20 s to spare it is at risk (AT_RISK_MIN_S) and preempts, with 40 s it waits (Chronus MIX1 job 5216)."""
    assert AT_RISK_MIN_S == 30.0
    sh = SharingPolicy(deadline_admission=True, launch_latency_s=0.0)
    short = make_job("dl", gpus=8, t=990.0, estimated_runtime_s=28.0, deadline_s=1000.0 + 28.0 + 20.0)
    r = go(_full_of(best_effort_preemptible=True), [short], 1000.0, sh)
    assert [(p.job_id, p.reason) for p in r.preemptions] == [("be", ReasonCode.DEADLINE)]
    spare = make_job("dl", gpus=8, t=990.0, estimated_runtime_s=28.0, deadline_s=1000.0 + 28.0 + 40.0)
    assert go(_full_of(best_effort_preemptible=True), [spare], 1000.0, sh).preemptions == ()


def test_admission_says_at_risk_by_the_same_rule() -> None:
    state = ClusterState(make_fabric(1, 1))
    sh = SharingPolicy(launch_latency_s=0.0)
    snap = state.snapshot()
    for spare_s, verdict in ((20.0, Verdict.AT_RISK), (40.0, Verdict.FEASIBLE), (-1.0, Verdict.INFEASIBLE)):
        job = make_job("dl", gpus=1, estimated_runtime_s=28.0, deadline_s=28.0 + spare_s)
        assert admit(snap, job, [], 0.0, sh).verdict is verdict
    long = make_job("dl", gpus=1, estimated_runtime_s=1000.0, deadline_s=1000.0 + 90.0)  # under 10% of 1000 s
    assert admit(snap, long, [], 0.0, sh).verdict is Verdict.AT_RISK


def test_no_deadline_preemption_with_slack_to_spare_for_a_service_or_for_another_deadline() -> None:
    sh = SharingPolicy(deadline_admission=True)
    loose = make_job("dl", gpus=8, t=900.0, estimated_runtime_s=1000.0, deadline_s=1000.0 + 5000.0)
    assert go(_full_of(True), [loose], 1000.0, sh).preemptions == ()
    tight = make_job("dl", gpus=8, t=900.0, estimated_runtime_s=1000.0, deadline_s=1000.0 + 1000.0 + 50.0)
    assert go(_full_of(False), [tight], 1000.0, sh).preemptions == ()  # not preemptible
    assert go(_full_of(True, victim_deadline=1e6), [tight], 1000.0, sh).preemptions == ()  # has a deadline
    hopeless = make_job("dl", gpus=8, t=900.0, estimated_runtime_s=1000.0, deadline_s=1000.0 + 900.0)
    assert go(_full_of(True), [hopeless], 1000.0, SharingPolicy(deadline_admission=False)).preemptions == ()


def test_the_default_order_serves_deadline_jobs_by_latest_start_then_the_shortest() -> None:
    state = ClusterState(make_fabric(1, 1))
    jobs = (
        make_job("short", estimated_runtime_s=10.0),
        make_job("none", t=-1.0),
        make_job("late-dl", estimated_runtime_s=100.0, deadline_s=1000.0),  # latest start 900
        make_job("early-dl", estimated_runtime_s=800.0, deadline_s=1000.0),  # latest start 200
        make_job("long", estimated_runtime_s=500.0),
    )
    defaults = SchedulerSettings()
    req = ScheduleRequest(
        state.snapshot(), jobs, 0.0, SchedulerConfig(policy=defaults.policy), sharing_policy(defaults)
    )
    assert [j.job_id for j in order(get_policy(defaults.policy), req)] == [
        "early-dl",
        "late-dl",
        "short",
        "long",
        "none",
    ]


def _strict_beside_best_effort() -> tuple[ClusterState, list[JobSpec]]:
    """One 8-GPU host: a strict deadline job on 4 GPUs to t=100 (not a victim) and a preemptible best-effort one
    on the other 4 to t=10,000."""
    state = ClusterState(make_fabric(1, 1))
    strict = make_job("strict", gpus=4, estimated_runtime_s=100.0, deadline_s=150.0, preemptible=True)
    be = make_job("be", gpus=4, estimated_runtime_s=10_000.0, preemptible=True)
    start(state, go(state, [strict, be], 0.0, SharingPolicy()), [strict, be], 0.0)
    return state, [strict, be]


def test_an_at_risk_deadline_job_holds_the_host_a_strict_job_frees_by_its_latest_start() -> None:
    """The host cannot be made whole now (the strict job is no victim), but it can by t=100, before the job's
    latest start (t=105): it preempts the best-effort job in the way and holds the host from t=100 (a deadline
    reservation); in the next cycle nothing that would still run at t=100 is placed on the freed GPUs, a job
    that ends before is. Without the rule it waits for the best-effort job's end (t=10,000) and misses (Chronus
    MIX1 jobs 14887 and 26967: 8 GPUs, every host running a strict job)."""
    state, _ = _strict_beside_best_effort()
    sh = sharing_policy(SchedulerSettings())
    assert sh.launch_latency_s == 0.4
    dl = make_job("dl", gpus=8, t=79.0, estimated_runtime_s=100.0, deadline_s=205.4)  # slack at t=80: 25 s
    r = go(state, [dl], 80.0, sh, policy="srt")
    assert [(p.job_id, p.reason) for p in r.preemptions] == [("be", ReasonCode.DEADLINE)]
    assert [(v.job_id, v.start_s) for v in r.reservations] == [("dl", 100.0)]
    assert reasons(r)["dl"] is ReasonCode.WAITING_FOR_RESERVATION
    state.apply(JobPreempted("be", 80.0))
    long, quick = (
        make_job("long", gpus=4, estimated_runtime_s=1000.0),
        make_job("quick", gpus=4, estimated_runtime_s=10.0),
    )
    r = go(state, [dl, long], 81.0, sh, policy="srt")
    assert r.preemptions == () and r.placements == ()
    assert [(v.job_id, v.start_s) for v in r.reservations] == [("dl", 100.0)]
    assert reasons(r)["long"] is ReasonCode.RESERVED
    assert [a.job_id for a in go(state, [dl, quick], 81.0, sh, policy="srt").placements] == ["quick"]


def test_no_deadline_reservation_that_would_start_after_the_latest_start() -> None:
    """The same job with its latest start at t=95, before the strict job ends: nothing it may do meets its
    deadline, so nobody is preempted for it: it waits as any job (EASY's reservation, from the estimates)."""
    state, _ = _strict_beside_best_effort()
    dl = make_job("dl", gpus=8, t=79.0, estimated_runtime_s=100.0, deadline_s=195.4)
    r = go(state, [dl], 80.0, sharing_policy(SchedulerSettings()), policy="srt")
    assert r.preemptions == ()
    assert [(v.job_id, v.start_s) for v in r.reservations] == [("dl", 10_000.0)]  # EASY's, from the estimates


def _strict_on_both_hosts(
    s_deadline: float, *, be2_preemptible: bool = True, s_restarted: bool = False
) -> ClusterState:
    """Two 8-GPU hosts under one leaf, each half strict, half best effort, all preemptible: host 0 runs "s"
    (4 GPUs to t=1,000, deadline ``s_deadline``) and "be" (to t=10,000); host 1 "keep" (4 GPUs to t=1,000,
    deadline t=1,100: no time for a restart) and "be2" (to t=10,000). ``s_restarted``: "s" was preempted once
    at t=5 and placed again at once."""
    state = ClusterState(make_fabric(1, 2))
    jobs = [
        make_job("s", gpus=4, estimated_runtime_s=1000.0, deadline_s=s_deadline, preemptible=True),
        make_job("be", gpus=4, t=1.0, estimated_runtime_s=10_000.0, preemptible=True),
        make_job("keep", gpus=4, t=2.0, estimated_runtime_s=1000.0, deadline_s=1100.0, preemptible=True),
        make_job("be2", gpus=4, t=3.0, estimated_runtime_s=10_000.0, preemptible=be2_preemptible),
    ]
    start(state, go(state, jobs, 0.0, SharingPolicy(), placer="first-fit", policy="fifo"), jobs, 0.0)
    if s_restarted:
        state.apply(JobPreempted("s", 5.0))
        start(state, go(state, jobs[:1], 5.0, SharingPolicy(), placer="first-fit"), jobs, 5.0)
    hosts = {j: r.allocation.tasks[0].host for j, r in state.snapshot().running.items()}
    assert hosts["s"] == hosts["be"] != hosts["keep"] == hosts["be2"]
    return state


# 8 GPUs at t=80, 25 s to spare: at risk. No host can be made whole by taking best-effort jobs alone (a strict
# job runs on each until t=1,000, after its latest start, t=105).
_WHOLE_HOST = make_job("dl", gpus=8, t=79.0, estimated_runtime_s=100.0, deadline_s=205.4)


def test_an_at_risk_deadline_job_preempts_a_strict_job_that_still_meets_its_deadline_after_a_restart() -> None:
    """ "s" has 1,859.6 s to spare if restarted now (60 s restart, its whole 1,000 s again) and can go back at
    once on host 1, in the room "be2" (best effort) holds: the job at risk takes host 0 from "s" and "be".
    "keep" (no time for a restart) is never a victim. Without the rule it waits for t=1,000 and misses (Chronus
    MIX1 jobs 14887, 26967, 15565, 27881: every host ran a strict job)."""
    sh = sharing_policy(SchedulerSettings())
    state = _strict_on_both_hosts(3000.0)
    r = go(state, [_WHOLE_HOST], 80.0, sh, policy="srt")
    assert sorted((p.job_id, p.reason) for p in r.preemptions) == [
        ("be", ReasonCode.DEADLINE),
        ("s", ReasonCode.DEADLINE),
    ]
    assert reasons(r)["dl"] is ReasonCode.PREEMPTING
    # The kept queue's cycle (the defaults' path in the server and the simulator) decides alike.
    index = QueueIndex("srt")
    index.reset([_WHOLE_HOST])
    req = ScheduleRequest(state.snapshot(), (_WHOLE_HOST,), 80.0, SchedulerConfig(policy="srt"), sh)
    assert schedule(dataclasses.replace(req, queue=index.view())) == r


def test_no_strict_victim_that_would_miss_after_a_restart_could_not_go_back_in_time_or_was_restarted_before() -> None:
    sh = sharing_policy(SchedulerSettings())
    # 1,100 - 80 - 0.4 - 60 - 1,000 < 0: restarted, "s" would miss.
    assert go(_strict_on_both_hosts(1100.0), [_WHOLE_HOST], 80.0, sh, policy="srt").preemptions == ()
    # Time for a restart (latest start again t=839.6), but no room for it by then: "be2" is not preemptible and
    # "keep" ends at t=1,000. With "be2" preemptible it goes back on its GPUs.
    assert (
        go(_strict_on_both_hosts(1900.0, be2_preemptible=False), [_WHOLE_HOST], 80.0, sh, policy="srt").preemptions
        == ()
    )
    assert go(_strict_on_both_hosts(1900.0), [_WHOLE_HOST], 80.0, sh, policy="srt").preemptions != ()
    # Preempted once already: a deadline job restarts at most once for another's sake.
    assert go(_strict_on_both_hosts(3000.0, s_restarted=True), [_WHOLE_HOST], 80.0, sh, policy="srt").preemptions == ()


def test_a_deadline_job_preempted_before_counts_its_restart() -> None:
    """Placed again, a preempted job pays a restart (``RESTART_S``) before its work goes on: admission and the
    at-risk test count it. With 30 s to spare by the launch alone, a restarted job cannot make it; with 80 s it
    is at risk (20 s left after the restart) and preempts, where a fresh job with the same numbers waits."""
    assert RESTART_S == 60.0
    sh = sharing_policy(SchedulerSettings())
    job = make_job("r", gpus=8, estimated_runtime_s=100.0, deadline_s=10.0 + 0.4 + 100.0 + 30.0)
    state = ClusterState(make_fabric(1, 1))
    start(state, go(state, [job], 0.0, sh), [job], 0.0)
    state.apply(JobPreempted("r", 10.0))
    (w,) = go(state, [job], 10.0, sh).waiting
    assert w.reason is ReasonCode.DEADLINE_INFEASIBLE
    assert "after a launch of 0.4 s and a restart of 60 s" in w.message
    fresh = dataclasses.replace(job, job_id="f")
    assert [a.job_id for a in go(state, [fresh], 10.0, sh).placements] == ["f"]
    assert admit(state.snapshot(), job, [], 10.0, sh).verdict is Verdict.INFEASIBLE  # the /why verdict alike
    assert admit(state.snapshot(), fresh, [], 10.0, sh).verdict is Verdict.AT_RISK

    roomy = dataclasses.replace(job, deadline_s=10.0 + 0.4 + 100.0 + 80.0)
    be = make_job("be", gpus=8, preemptible=True)
    state.apply(JobSubmitted(be, 10.0))
    start(state, go(state, [be], 10.0, sh), [be], 10.0)
    assert [p.job_id for p in go(state, [roomy], 10.0, sh, policy="srt").preemptions] == ["be"]
    assert go(state, [dataclasses.replace(roomy, job_id="f")], 10.0, sh, policy="srt").preemptions == ()


def test_a_restarted_deadline_job_is_ordered_by_its_latest_start_with_the_restart_counted() -> None:
    """ "r" (8 GPUs, 100 s, deadline t=265) was preempted once: placed again it pays a 60 s restart, so its
    latest start is t=104.6, not t=164.6. "q" (deadline t=200, 40 s: latest start t=159.6) came later. The one
    host goes to "r", whose latest start comes first. Ordered by its deadline alone, "r" went after "q"
    (Chronus SLO and MIX2 on 960 GPUs: a restarted job lost the room its preemptor had left it). The kept
    queue, fed by the state, orders it alike."""
    sh, cfg = sharing_policy(SchedulerSettings()), SchedulerConfig(policy="srt")
    state = ClusterState(make_fabric(1, 1))
    r = make_job("r", gpus=8, estimated_runtime_s=100.0, deadline_s=265.0)
    state.apply(JobSubmitted(r, 0.0))
    start(state, go(state, [r], 0.0, sh), [r], 0.0)
    state.apply(JobPreempted("r", 5.0))
    q = make_job("q", gpus=8, t=6.0, estimated_runtime_s=40.0, deadline_s=200.0)
    state.apply(JobSubmitted(q, 6.0))
    snap = state.snapshot()
    req = ScheduleRequest(snap, snap.pending, 10.0, cfg, sh)
    assert [j.job_id for j in order(get_policy("srt"), req)] == ["r", "q"]
    assert [j.job_id for j in order(get_policy("edf"), req)] == ["r", "q"]
    got = schedule(req)
    assert [a.job_id for a in got.placements] == ["r"]
    index = QueueIndex("srt")
    assert index.sync(snap)
    assert schedule(dataclasses.replace(req, queue=index.view())) == got
    # Not preempted before, "r" would have the slack to go after "q".
    fresh = dataclasses.replace(r, job_id="f")
    plain = dataclasses.replace(req, pending=(fresh, q))
    assert [j.job_id for j in order(get_policy("srt"), plain)] == ["q", "f"]
