"""Preemption by attained service (Tiresias) and the pool rules that keep an inference service's SLO."""

from __future__ import annotations

import numpy as np
from sched_builders import make_fabric, make_job

from gpupool.cluster import ClusterState
from gpupool.domain.calendar import parse_calendar
from gpupool.domain.events import JobCheckpointed, JobFinished, JobPlaced, JobStarted, JobSubmitted
from gpupool.domain.jobs import JobSpec
from gpupool.domain.sharing import PoolDemand
from gpupool.scheduler import (
    CycleInputs,
    PreemptionConfig,
    ReasonCode,
    SchedulerConfig,
    ScheduleRequest,
    ScheduleResult,
    SharingPolicy,
    schedule,
)
from gpupool.scheduler.pools import pool_busy, pool_map

THRESHOLDS = (1000.0, 100000.0)  # GPU-seconds: 8 GPUs for 125 s reach queue 1


def go(
    state: ClusterState,
    jobs: list[JobSpec],
    now: float,
    sh: SharingPolicy,
    inputs: CycleInputs | None = None,
    **cfg: object,
) -> ScheduleResult:
    config = SchedulerConfig(policy="las", las_thresholds_gpu_s=THRESHOLDS, **cfg)  # type: ignore[arg-type]
    req = ScheduleRequest(state.snapshot(), tuple(jobs), now, config, sh, inputs or CycleInputs())
    result = schedule(req)
    assert result == schedule(req, remember_refusals=False)  # the refusal cache changes nothing
    return result


def started(state: ClusterState, jobs: list[JobSpec], at: float, sh: SharingPolicy) -> None:
    r = go(state, jobs, at, sh)
    assert len(r.placements) == len(jobs)
    by_id = {j.job_id: j for j in jobs}
    for a in r.placements:
        state.apply(JobSubmitted(by_id[a.job_id], at))
        state.apply(JobPlaced(a, at))
        state.apply(JobStarted(a.job_id, at))


def svc(**kw: object) -> SharingPolicy:
    return SharingPolicy(preemption=PreemptionConfig(by_priority=False, by_service=True, **kw))  # type: ignore[arg-type]


# ------------------------------------------------------------------ preemption by attained service


def test_a_new_job_preempts_a_job_in_a_higher_las_queue_only_with_by_service() -> None:
    state = ClusterState(make_fabric(1, 2))  # 16 GPUs
    sh = svc(min_runtime_s=100.0)
    started(state, [make_job("old", gpus=8, preemptible=True), make_job("young", gpus=8, preemptible=True)], 0.0, sh)
    new = make_job("new", gpus=8, t=150.0)
    # At t=200 both have 1,600 GPU-s (queue 1); the new job has none (queue 0).
    r = go(state, [new], 200.0, sh)
    (p,) = r.preemptions
    assert p.reason is ReasonCode.ATTAINED_SERVICE and p.job_id in {"old", "young"}
    assert {w.job_id: w.reason for w in r.waiting} == {"new": ReasonCode.PREEMPTING}
    plain = go(state, [new], 200.0, SharingPolicy(preemption=PreemptionConfig(by_priority=False)))
    assert not plain.preemptions
    assert not go(state, [new], 90.0, sh).preemptions  # under min_runtime_s (and below the threshold)


def test_service_preemption_needs_preemptible_victims_and_a_lower_queue() -> None:
    state = ClusterState(make_fabric(1, 1))  # 8 GPUs
    sh = svc(min_runtime_s=0.0)
    started(state, [make_job("svc", gpus=8)], 0.0, sh)  # not preemptible
    assert not go(state, [make_job("new", gpus=8, t=1.0)], 500.0, sh).preemptions
    state2 = ClusterState(make_fabric(1, 1))
    started(state2, [make_job("short", gpus=8, preemptible=True)], 0.0, sh)
    # 8 GPUs x 100 s = 800 GPU-s: still queue 0, the same as the new job, so no preemption.
    assert not go(state2, [make_job("new", gpus=8, t=1.0)], 100.0, sh).preemptions
    assert go(state2, [make_job("new", gpus=8, t=1.0)], 200.0, sh).preemptions


def test_max_lost_s_spares_victims_with_much_work_since_their_checkpoint() -> None:
    state = ClusterState(make_fabric(1, 1))
    sh = svc(min_runtime_s=0.0, max_lost_s=300.0)
    started(state, [make_job("long", gpus=8, preemptible=True)], 0.0, sh)
    new = make_job("new", gpus=8, t=900.0)
    assert not go(state, [new], 1000.0, sh).preemptions  # 1,000 s of work at risk
    state.apply(JobCheckpointed("long", 800.0))
    (p,) = go(state, [new], 1000.0, sh).preemptions  # 200 s at risk
    assert p.job_id == "long" and p.reason is ReasonCode.ATTAINED_SERVICE


def test_the_victim_with_most_service_goes_first_and_gangs_go_whole() -> None:
    state = ClusterState(make_fabric(1, 4))  # 32 GPUs
    sh = svc(min_runtime_s=0.0)
    started(state, [make_job("gang", tasks=2, gpus=8, preemptible=True)], 0.0, sh)
    started(state, [make_job("late", tasks=2, gpus=8, preemptible=True, t=5.0)], 1000.0, sh)
    # At t=1100: gang has 16 x 1100 = 17,600 GPU-s (queue 1), late 16 x 100 = 1,600 (queue 1): a tie in queue,
    # broken by the work lost (late loses less). Both free 16 GPUs, so one whole gang is enough.
    r = go(state, [make_job("new", gpus=8, t=1050.0)], 1100.0, sh)
    assert [p.job_id for p in r.preemptions] == ["late"]
    state2 = ClusterState(make_fabric(1, 2))
    started(state2, [make_job("big", gpus=8, preemptible=True)], 0.0, sh)
    started(state2, [make_job("small", gpus=8, preemptible=True, t=1.0)], 99000.0, sh)
    # big: 8 x 100,000 = 800,000 GPU-s (queue 2); small: 8,000 (queue 1): the higher queue goes first.
    (p,) = go(state2, [make_job("new", gpus=8, t=99500.0)], 100000.0, sh).preemptions
    assert p.job_id == "big"


# ------------------------------------------------------------------ pools and services

CAL = """\
timezone = "UTC"
default_pool = "training"
[[pool]]
name = "inference"
hosts = ["node001", "node002", "node003", "node004"]
share = 1.0
share_outside = 0.25
windows = [{ days = "mon-sun", start = "08:00", end = "22:00" }]
"""
DAY0 = 1715212800.0  # 2024-05-09 00:00 UTC


def test_a_service_is_not_placed_on_another_pools_lent_hosts_but_preemptible_work_is() -> None:
    state = ClusterState(make_fabric(1, 4))
    sh = SharingPolicy(calendar=parse_calendar(CAL, "pools.toml"), lend_pools=True)
    night = DAY0 + 3 * 3600  # inference owns node001 only
    started(state, [make_job("i0", gpus=8, pool="inference")], night, sh)
    r = go(state, [make_job("svc", gpus=8, pool="inference", t=1.0)], night + 1, sh)
    assert not r.placements
    r2 = go(state, [make_job("batch", gpus=8, pool="inference", preemptible=True, t=1.0)], night + 1, sh)
    assert [t.host for a in r2.placements for t in a.tasks] != ["node001"] and r2.placements


def test_a_closing_window_keeps_the_hosts_services_occupy_and_never_reclaims_them() -> None:
    cal = parse_calendar(CAL, "pools.toml")
    state = ClusterState(make_fabric(1, 4))
    sh = SharingPolicy(calendar=cal, preemption=PreemptionConfig(grace_s=60.0))
    noon = DAY0 + 12 * 3600
    jobs = [make_job(f"i{i}", gpus=8, pool="inference", t=float(i)) for i in range(4)]
    started(state, jobs, noon, sh)
    # Two services end; the other two sit on node002 and node004.
    snap = state.snapshot()
    ix = snap.index
    on = {r.spec.job_id: r.allocation.tasks[0].host for r in snap.running.values()}
    keep = {on["i1"], on["i3"]}
    for j in ("i0", "i2"):
        state.apply(JobFinished(j, noon + 10))
    closed = DAY0 + 22 * 3600 + 30
    busy = pool_busy(ix, state.snapshot().running)
    pools = pool_map(ix, cal, closed, (), busy)
    owned = {ix.host_name(int(h)) for h in np.flatnonzero(pools.owned_by("inference"))}
    assert len(owned) == 1 and owned <= keep  # one host at night, and one a service occupies
    plain = pool_map(ix, cal, closed)
    assert {ix.host_name(int(h)) for h in np.flatnonzero(plain.owned_by("inference"))} == {"node001"}
    r = go(state, [], closed + 3600, sh)
    assert not r.preemptions and not r.signals  # the other service is a borrower now, yet kept


def test_a_pool_reclaim_takes_the_preemptible_borrower() -> None:
    state = ClusterState(make_fabric(1, 4))
    cal = parse_calendar(CAL, "pools.toml")
    sh = SharingPolicy(calendar=cal, preemption=PreemptionConfig(grace_s=0.0, by_priority=False))
    night = DAY0 + 3 * 3600
    # At night inference owns node001 and training the rest: three training services fill training's hosts,
    # and only the preemptible batch job may borrow node001, so the inference job reclaims exactly it.
    fill = [make_job(f"t{i}", gpus=8, pool="training", t=float(i)) for i in range(3)]
    started(state, fill, night, sh)
    started(state, [make_job("tb", gpus=8, pool="training", preemptible=True, t=5.0)], night, sh)
    r = go(state, [make_job("inf", gpus=8, pool="inference", t=10.0)], night + 100, sh)
    assert [(p.job_id, p.reason) for p in r.preemptions] == [("tb", ReasonCode.POOL_RECLAIM)]


def test_hosts_kept_for_a_pools_demand_are_not_lent() -> None:
    state = ClusterState(make_fabric(1, 4))
    cal = parse_calendar(CAL, "pools.toml")
    night = DAY0 + 3 * 3600  # inference owns node001, training node002-node004
    lend = SharingPolicy(calendar=cal, lend_pools=True)
    started(state, [make_job(f"t{i}", gpus=8, pool="training", t=float(i)) for i in range(3)], night, lend)
    extra = make_job("extra", gpus=8, pool="training", preemptible=True, t=5.0)
    r = go(state, [extra], night + 1, lend)
    assert [t.host for a in r.placements for t in a.tasks] == ["node001"]  # idle, so lent
    demand = CycleInputs(pool_demand=(PoolDemand("inference", 0, 1, 0.0, 4),))
    r2 = go(state, [extra], night + 1, lend, demand)
    assert not r2.placements  # node001 is its headroom: kept, so a new service starts at once
    inf = go(state, [make_job("svc", gpus=4, pool="inference", t=6.0)], night + 2, lend, demand)
    assert [t.host for a in inf.placements for t in a.tasks] == ["node001"]
