"""The sharing loop's remembered refusals change no decision: with and without them, results are identical.

Queues are drawn from a few job templates so that shapes repeat (that is when refusals are remembered),
over clusters already partly used by earlier cycles, with quotas, a pool calendar, backfill, deadlines,
elastic sizes and preemption in play.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_builders import make_job

from gpupool.cluster import ClusterState, FabricIndex
from gpupool.domain.calendar import parse_calendar
from gpupool.domain.events import JobPlaced, JobStarted, JobSubmitted
from gpupool.domain.jobs import JobSpec, PriorityClass, Scaling, Scope
from gpupool.domain.sharing import PoolDemand, Quota
from gpupool.fabric.generators import leaf_spine
from gpupool.scheduler import (
    PLACERS,
    BackfillMode,
    CycleInputs,
    PreemptionConfig,
    ReasonCode,
    SchedulerConfig,
    ScheduleRequest,
    SharingPolicy,
    schedule,
)
from gpupool.scheduler import stages as stages_mod
from gpupool.scheduler.capacity import Capacity
from gpupool.scheduler.diagnose import diagnose
from gpupool.scheduler.placement import make_need
from gpupool.scheduler.refusals import PlaceKey, Refusals
from gpupool.scheduler.telemetry import penalties

IX = FabricIndex(leaf_spine(2, 2, 4, gpus_per_host=8))  # 8 hosts, 64 GPUs
CAL = parse_calendar(
    'timezone = "UTC"\ndefault_pool = "training"\n[[pool]]\nname = "inference"\n'
    'hosts = ["node001", "node002", "node003", "node004", "node005"]\nshare = 0.6\nshare_outside = 0.2\n'
    'windows = [{ days = "mon-sun", start = "08:00", end = "22:00" }]\n',
    "pools.toml",
)
DAY0 = 1715212800.0  # 2024-05-09 00:00 UTC
TENANTS = ("a", "b", "c")
POOLS = ("training", "inference")


@st.composite
def template(draw: st.DrawFn) -> JobSpec:
    share = draw(st.sampled_from([None, None, None, (250, 10000), (500, 20000)]))
    tasks = draw(st.integers(1, 4))
    gpus = 1 if share else draw(st.sampled_from([1, 2, 4, 8]))
    scope = draw(st.sampled_from([Scope.ANY, Scope.ANY, Scope.LEAF, Scope.NVLINK]))
    deadline = draw(st.one_of(st.none(), st.floats(200.0, 20000.0)))
    elastic = deadline is not None and tasks > 1 and draw(st.booleans())
    return make_job(
        "template",
        tasks=tasks,
        gpus=gpus,
        share=share,
        scope=scope,
        required=draw(st.booleans()),
        rail_aligned=share is None and draw(st.booleans()),
        cpu_millicores=draw(st.sampled_from([0, 0, 8000])),
        estimated_runtime_s=draw(st.one_of(st.none(), st.sampled_from([100.0, 1000.0, 5000.0]))),
        deadline_s=deadline,
        min_tasks=1 if elastic else None,
        scaling=Scaling.LINEAR if elastic else Scaling.NONE,
    )


@st.composite
def queue(draw: st.DrawFn, prefix: str, t0: float) -> list[JobSpec]:
    shapes = draw(st.lists(template(), min_size=1, max_size=5))
    out = []
    for i in range(draw(st.integers(1, 30))):
        base = draw(st.sampled_from(shapes))
        dl = None if base.deadline_s is None else t0 + base.deadline_s
        out.append(
            replace(
                base,
                job_id=f"{prefix}{i}",
                submit_time_s=t0 + draw(st.integers(0, 5)),
                tenant=draw(st.sampled_from(TENANTS)),
                pool=draw(st.sampled_from(POOLS)),
                priority=PriorityClass(draw(st.sampled_from([1, 2, 3, 4]))),
                preemptible=draw(st.booleans()),
                deadline_s=dl,
            )
        )
    return out


@st.composite
def sharing(draw: st.DrawFn) -> tuple[SharingPolicy, CycleInputs]:
    quotas: tuple[Quota, ...] = ()
    if draw(st.booleans()):
        quotas = tuple(
            Quota(
                t,
                p,
                draw(st.integers(0, 40)),
                borrowing_limit_gpus=draw(st.one_of(st.none(), st.integers(0, 16))),
                cohort=draw(st.sampled_from(["c", ""])),
            )
            for t in TENANTS
            for p in POOLS
        )
    demand = draw(
        st.sampled_from([(), (PoolDemand("inference", 3, 8, DAY0 + 9 * 3600),), (PoolDemand("inference", 1, 4, 0.0),)])
    )
    policy = SharingPolicy(
        quotas=quotas,
        require_quota=draw(st.booleans()),
        calendar=CAL if draw(st.booleans()) else None,
        lend_pools=draw(st.booleans()),
        preemption=PreemptionConfig(
            enabled=draw(st.booleans()),
            min_runtime_s=draw(st.sampled_from([0.0, 300.0])),
            grace_s=draw(st.sampled_from([0.0, 300.0])),
            max_preemptors_per_cycle=draw(st.sampled_from([1, 16])),
            by_service=draw(st.booleans()),
            max_lost_s=draw(st.sampled_from([None, 600.0, 100000.0])),
        ),
        backfill=draw(st.sampled_from(list(BackfillMode))),
        max_reservations=draw(st.sampled_from([1, 4])),
        default_runtime_s=draw(st.sampled_from([600.0, 3600.0])),
        deadline_admission=draw(st.booleans()),
    )
    return policy, CycleInputs(pool_demand=demand)


def _run_state(
    first: list[JobSpec], sh: SharingPolicy, inputs: CycleInputs, cfg: SchedulerConfig, t0: float
) -> ClusterState:
    """A cluster partly used by an earlier cycle of the same rules."""
    state = ClusterState(IX)
    r = schedule(ScheduleRequest(state.snapshot(), tuple(first), t0, cfg, sh, inputs))
    by_id = {j.job_id: j for j in first}
    for a in r.placements:
        state.apply(JobSubmitted(by_id[a.job_id], t0))
        state.apply(JobPlaced(a, t0))
        state.apply(JobStarted(a.job_id, t0))
    return state


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    first=queue("r", DAY0 + 3 * 3600),
    second=queue("p", DAY0 + 9 * 3600),
    sh=sharing(),
    placer=st.sampled_from(sorted(PLACERS)),
    policy=st.sampled_from(["priority", "fifo", "fair", "slack", "las"]),
    limit=st.sampled_from([1000, 3]),
    strict=st.booleans(),
    later=st.sampled_from([0.0, 600.0]),
)
def test_remembered_refusals_decide_exactly_as_deciding_every_job_afresh(
    first: list[JobSpec],
    second: list[JobSpec],
    sh: tuple[SharingPolicy, CycleInputs],
    placer: str,
    policy: str,
    limit: int,
    strict: bool,
    later: float,
) -> None:
    rules, inputs = sh
    cfg = SchedulerConfig(policy=policy, placer=placer, max_placements_per_cycle=limit, strict=strict)
    state = _run_state(first, rules, inputs, replace(cfg, max_placements_per_cycle=1000, strict=False), DAY0 + 3 * 3600)
    snap = state.snapshot()
    # The first cycle's leftovers wait with the new jobs, after the window opened (and perhaps its grace).
    req = ScheduleRequest(snap, (*snap.pending, *second), DAY0 + 9 * 3600 + later, cfg, rules, inputs)
    fresh = schedule(req, remember_refusals=False)
    remembered = schedule(req)
    assert remembered == fresh
    assert len(remembered.waiting) + len(remembered.placements) == len(req.pending)


def _blocked_queue(n: int) -> list[JobSpec]:
    return [make_job(f"j{i}", tasks=2, gpus=8, t=float(i), tenant="a") for i in range(n)]


def test_a_queue_of_one_blocked_shape_is_diagnosed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of it: a full cluster refuses 50 gangs of one shape after one search and one diagnosis."""
    state = ClusterState(IX)
    fill = [make_job(f"f{i}", gpus=8, t=float(i)) for i in range(7)]
    r = schedule(ScheduleRequest(state.snapshot(), tuple(fill), 0.0))
    for a in r.placements:
        state.apply(JobSubmitted(fill[int(a.job_id[1:])], 0.0))
        state.apply(JobPlaced(a, 0.0))
    calls = {"diagnose": 0}
    real = diagnose

    def counting(*args: object) -> tuple[ReasonCode, str]:
        calls["diagnose"] += 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(stages_mod, "diagnose", counting)
    req = ScheduleRequest(state.snapshot(), tuple(_blocked_queue(50)), 1.0, SchedulerConfig(), SharingPolicy())
    result = schedule(req)
    assert not result.placements
    assert {w.reason for w in result.waiting} == {ReasonCode.NO_CAPACITY}
    assert calls["diagnose"] == 1
    assert schedule(req, remember_refusals=False) == result
    assert calls["diagnose"] == 51


def test_refusals_of_bounded_searches_last_only_until_the_state_changes() -> None:
    snap = ClusterState(IX).snapshot()
    cap = Capacity(snap, penalties(snap, SchedulerConfig().telemetry))
    plain = make_need(make_job("x", tasks=2, gpus=8), cap, None)
    railed = make_need(make_job("y", tasks=2, gpus=8, rail_aligned=True), cap, None)
    seen = Refusals(cap)
    seen.refuse(seen.fits_not, 0, plain)
    seen.refuse(seen.fits_not, 1, railed)
    assert seen.refused(seen.fits_not, 0) and seen.refused(seen.fits_not, 1)
    assert not seen.refused(seen.place, PlaceKey(0, 1, None, None, None))  # each question has its own memo
    seen.bump()  # a placement: capacity shrank
    assert seen.refused(seen.fits_not, 0) and not seen.refused(seen.fits_not, 1)
    cap.releases += 1  # capacity grew: nothing refused still holds
    assert not seen.refused(seen.fits_not, 0)
    off = Refusals(cap, enabled=False)
    off.refuse(off.fits_not, 0, plain)
    assert not off.refused(off.fits_not, 0)


def _started(jobs: list[JobSpec], at: float, **cfg: object) -> ClusterState:
    state = ClusterState(IX)
    r = schedule(ScheduleRequest(state.snapshot(), tuple(jobs), at, SchedulerConfig(**cfg)))  # type: ignore[arg-type]
    by_id = {j.job_id: j for j in jobs}
    for a in r.placements:
        state.apply(JobSubmitted(by_id[a.job_id], at))
        state.apply(JobPlaced(a, at))
        state.apply(JobStarted(a.job_id, at))
    assert len(r.placements) == len(jobs)
    return state


def test_a_refusal_is_not_reused_for_a_job_of_the_same_shape_that_may_preempt() -> None:
    # Every GPU runs preemptible low-priority work; a low-priority job has no victims, a high one does.
    state = _started([make_job(f"r{i}", gpus=8, preemptible=True, priority=1) for i in range(8)], 0.0)
    low = make_job("low", gpus=8, t=1.0, priority=1)
    high = make_job("high", gpus=8, t=2.0, priority=3)
    sh = SharingPolicy(preemption=PreemptionConfig(min_runtime_s=10.0))
    req = ScheduleRequest(state.snapshot(), (low, high), 100.0, SchedulerConfig(policy="fifo"), sh)
    result = schedule(req)
    assert result == schedule(req, remember_refusals=False)
    why = {w.job_id: w.reason for w in result.waiting}
    assert why == {"low": ReasonCode.NO_CAPACITY, "high": ReasonCode.PREEMPTING}


def test_a_reserved_refusal_is_not_reused_for_a_shorter_job_of_the_same_shape() -> None:
    # node001 (4 GPUs free) is reserved for the head from t=1000; only a job ending by then may use it.
    half = make_job("half", gpus=4, estimated_runtime_s=1000.0)
    full = [make_job(f"f{i}", gpus=8, t=1.0 + i, estimated_runtime_s=5000.0) for i in range(7)]
    state = _started([half, *full], 0.0, policy="fifo", placer="first-fit")
    head = make_job("head", gpus=8, t=10.0)
    long = make_job("long", gpus=4, t=11.0, estimated_runtime_s=5000.0)
    short = make_job("short", gpus=4, t=12.0, estimated_runtime_s=500.0)
    sh = SharingPolicy(backfill=BackfillMode.EASY)
    req = ScheduleRequest(state.snapshot(), (head, long, short), 100.0, SchedulerConfig(policy="fifo"), sh)
    result = schedule(req)
    assert result == schedule(req, remember_refusals=False)
    why = {w.job_id: w.reason for w in result.waiting}
    assert why == {"head": ReasonCode.WAITING_FOR_RESERVATION, "long": ReasonCode.RESERVED}
    assert [a.job_id for a in result.placements] == ["short"]
