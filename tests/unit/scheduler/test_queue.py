"""The queue kept between cycles (``scheduler.queue``) and the cycle that visits its shapes (``scheduler.grouped``).

Invariants: the kept order is the policy's own order of the state's pending jobs, whatever entered and left
the queue and however the state's feed was renewed; a cycle over the kept queue decides exactly what the
job-by-job cycle decides (placements, every reason, their order); and a blocked queue costs one placement
try per shape, not per job.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from heapq import merge
from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_builders import make_fabric, make_job
from test_properties import FABRICS, INDEXES, _state, jobs, place_first

import gpupool.scheduler.grouped as grouped
import gpupool.scheduler.stages as stages
from gpupool.cluster import ClusterState
from gpupool.domain.events import JobCancelled, JobPlaced, JobPreempted, JobSubmitted
from gpupool.domain.jobs import JobSpec, PriorityClass, Scaling
from gpupool.scheduler import NO_SHARING, PLACERS, POLICIES, SchedulerConfig, ScheduleRequest, schedule
from gpupool.scheduler.driver import CycleDriver
from gpupool.scheduler.policies import get_policy, keyed_as_restarted
from gpupool.scheduler.queue import QueueIndex
from gpupool.scheduler.settings import SchedulerSettings, scheduler_config, sharing_policy
from gpupool.scheduler.shapes import shape
from gpupool.scheduler.types import BackfillMode, JobNumbers, QueueView

STATIC = sorted(p for p, pol in POLICIES.items() if pol.static_key is not None)
GROUPED_PLACERS = sorted(p for p, pl in PLACERS.items() if not pl.uses_mix)


def _in_order(view: QueueView) -> list[JobSpec]:
    return [j for _, j in merge(*(zip(g.keys, g.jobs, strict=True) for g in view.groups))]


def _whole(view: QueueView, state: ClusterState, policy: str) -> None:
    """Every part of a kept view is what the state's queue makes of it, worked out here: each group holds the
    pending jobs of its shape in key order, with their ids and numbers (NaN equal to NaN); the order of all
    is the policy's (a deadline job preempted before keyed with its restart counted); the held and deadline
    counts are the queue's."""
    static = get_policy(policy).static_key
    assert static is not None
    key = keyed_as_restarted(static, state.snapshot().preemption_count)
    pending = state.snapshot().pending
    by_shape = Counter(shape(j) for j in pending)
    assert {g.shape: len(g.jobs) for g in view.groups} == dict(by_shape)
    for g in view.groups:
        assert list(g.keys) == sorted(key(j) for j in g.jobs) == [key(j) for j in g.jobs]
        assert {shape(j) for j in g.jobs} == {g.shape} and g.ids == tuple(j.job_id for j in g.jobs)
        assert g.numbers is not None
        assert np.array_equal(g.numbers.table, JobNumbers.of(g.jobs).table, equal_nan=True)
    assert view.order == tuple(j.job_id for j in _scratch(state, policy))
    assert view.held == sum(1 for j in pending if j.after or j.array_cap)
    assert view.deadlines == sum(1 for j in pending if j.deadline_s is not None)


def _scratch(state: ClusterState, policy: str) -> list[JobSpec]:
    snap = state.snapshot()
    return get_policy(policy).order(ScheduleRequest(snap, snap.pending, 0.0, SchedulerConfig(policy=policy)))


def test_the_policies_that_keep_their_order_are_the_ones_whose_key_ignores_time_and_state() -> None:
    assert STATIC == ["edf", "fifo", "priority", "sjf", "srt"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(st.tuples(st.sampled_from(["submit", "cancel", "place", "preempt", "sync"]), st.integers(0, 40))),
    policy=st.sampled_from(STATIC),
)
def test_the_kept_order_is_the_policys_order_of_the_states_queue(steps: list[tuple[str, int]], policy: str) -> None:
    state = ClusterState(make_fabric(2, 2))
    index = QueueIndex(policy)
    n = 0
    for what, x in steps:
        snap = state.snapshot()
        if what == "submit":  # a burst: many jobs of a shape enter between two syncs
            for y in range(x, x + 1 + x // 8):
                est, dl = (None, None) if y % 3 == 0 else (float(10 + y), float(100 + 7 * y))
                job = make_job(
                    f"j{n}", tasks=1 + y % 2, gpus=1 + y % 4, t=float(y % 5), priority=PriorityClass(y % 5),
                    estimated_runtime_s=est, deadline_s=dl,
                )  # fmt: skip
                state.apply(JobSubmitted(job, 0.0))
                n += 1
        elif what == "cancel" and snap.pending:  # and several leave
            for job in snap.pending[x % len(snap.pending) :][: 1 + x // 10]:
                state.apply(JobCancelled(job.job_id, 0.0))
        elif what == "place" and snap.pending:
            job = snap.pending[x % len(snap.pending)]
            got = schedule(ScheduleRequest(snap, (job,), 0.0))
            for a in got.placements:
                state.apply(JobPlaced(a, 0.0))
        elif what == "preempt" and snap.running:
            state.apply(JobPreempted(sorted(snap.running)[x % len(snap.running)], 0.0))
        elif what == "sync":
            assert index.sync(state.snapshot())
            assert _in_order(index.view()) == _scratch(state, policy)
            _whole(index.view(), state, policy)
    assert index.sync(state.snapshot())
    view = index.view()
    assert _in_order(view) == _scratch(state, policy) and view.count == len(state.snapshot().pending)
    _whole(view, state, policy)
    assert index.elastic == sum(1 for j in state.snapshot().pending if j.elastic is not None)


def test_a_renewed_feed_is_read_from_the_queue_itself() -> None:
    state = ClusterState(make_fabric(1, 1))
    index = QueueIndex("fifo")
    keep = [make_job(f"k{i}", t=float(i)) for i in range(3)]
    for j in keep:
        state.apply(JobSubmitted(j, 0.0))
    assert index.sync(state.snapshot())
    first = state.snapshot().pending_feed
    for i in range(3000):  # far more changes than the queue is long: the state starts a new feed
        state.apply(JobSubmitted(make_job(f"x{i}"), 0.0))
        state.apply(JobCancelled(f"x{i}", 0.0))
    snap = state.snapshot()
    assert snap.pending_feed is not first
    assert index.sync(snap) and _in_order(index.view()) == keep


def test_a_snapshot_without_a_feed_leaves_the_index_alone() -> None:
    state = ClusterState(make_fabric(1, 1))
    state.apply(JobSubmitted(make_job("a"), 0.0))
    snap = state.snapshot()
    index = QueueIndex("priority")
    hand_built = ScheduleRequest(snap, snap.pending, 0.0).snapshot.__class__(
        **{f: getattr(snap, f) for f in snap.__dataclass_fields__ if f not in ("pending_feed", "pending_feed_at")}
    )
    assert not index.sync(hand_built) and len(index) == 0
    with pytest.raises(ValueError, match="no static order"):
        QueueIndex("las")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    fab_key=st.sampled_from(sorted(FABRICS)),
    placer=st.sampled_from(GROUPED_PLACERS),
    policy=st.sampled_from(STATIC),
    limit=st.sampled_from([1000, 3, 1, 0]),
    strict=st.booleans(),
)
def test_a_cycle_over_the_kept_queue_decides_as_the_job_by_job_cycle(
    data: st.DataObject, fab_key: str, placer: str, policy: str, limit: int, strict: bool
) -> None:
    state = _state(fab_key, data)
    pending = data.draw(jobs("j", 16))
    # Runs of jobs of one shape: refused for good (an exact search), or until the next placement (rail-aligned
    # gangs: a bounded search), so a shape leaves the cycle with many jobs and comes back after a placement.
    pending += [make_job(f"same{i}", gpus=3, t=float(i)) for i in range(data.draw(st.integers(0, 5)))]
    rails = data.draw(st.sampled_from([(2, 4), (3, 2), (2, 8)]))
    pending += [
        make_job(f"rail{i}", tasks=rails[0], gpus=rails[1], t=float(i), rail_aligned=True)
        for i in range(data.draw(st.integers(0, 5)))
    ]
    cfg = SchedulerConfig(policy=policy, placer=placer, max_placements_per_cycle=limit, strict=strict)
    index = QueueIndex(policy)
    index.reset(pending)
    plain = ScheduleRequest(state.snapshot(), tuple(pending), 1.0, cfg, NO_SHARING)
    kept = ScheduleRequest(state.snapshot(), tuple(pending), 1.0, cfg, NO_SHARING, queue=index.view())
    got, want = schedule(kept), schedule(plain)
    assert len(got.waiting) == len(want.waiting)  # known without making the list
    assert got == want
    assert [w.job_id for w in got.waiting] == [j.job_id for j in _scratch_of(plain) if j.job_id not in got.placed_ids()]


def _scratch_of(req: ScheduleRequest) -> list[JobSpec]:
    return get_policy(req.config.policy).order(req)


def test_a_blocked_queue_costs_one_try_per_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    state = ClusterState(make_fabric(1, 2))  # 16 GPUs
    full = [make_job(f"f{i}", gpus=8) for i in range(2)]
    for a in schedule(ScheduleRequest(state.snapshot(), tuple(full), 0.0)).placements:
        state.apply(JobSubmitted(next(j for j in full if j.job_id == a.job_id), 0.0))
        state.apply(JobPlaced(a, 0.0))
    queue = [make_job(f"q{i}", gpus=1 + i % 2, t=float(i)) for i in range(3000)]
    index = QueueIndex("priority")
    index.reset(queue)
    tries = []
    real = stages.place
    monkeypatch.setattr(stages, "place", lambda *a: tries.append(a[1].job.job_id) or real(*a))
    got = schedule(
        ScheduleRequest(state.snapshot(), tuple(queue), 0.0, SchedulerConfig(policy="priority"), queue=index.view())
    )
    assert tries == ["q0", "q1"]  # each shape's first job, then the shape waits whole
    assert len(got.waiting) == 3000 and {w.reason.value for w in got.waiting} == {"no_capacity"}


def test_the_driver_keeps_the_queue_only_for_the_snapshots_own_tuple() -> None:
    state = ClusterState(make_fabric(1, 1))
    for i in range(3):
        state.apply(JobSubmitted(make_job(f"a{i}", gpus=8, t=float(i)), 0.0))
    driver = CycleDriver(SchedulerConfig(policy="fifo"), 3600.0)

    class Quiet:
        def preempt(self, *_: object) -> bool:
            return True

        def place(self, allocation: object, now_s: float) -> bool:
            state.apply(JobPlaced(allocation, now_s))  # type: ignore[arg-type]
            return True

        def signal(self, *_: object) -> bool:
            return True

        def waiting(self, *_: object) -> None:
            pass

    snap = state.snapshot()
    run = driver.run_cycle(snap, snap.pending, NO_SHARING, Quiet(), 0.0)
    assert run.request.queue is not None and run.placed == 1
    snap = state.snapshot()
    again = driver.run_cycle(snap, tuple(list(snap.pending)), NO_SHARING, Quiet(), 1.0)
    assert again.request.queue is None and again.placed == 0 and len(again.result.waiting) == 2
    assert CycleDriver(SchedulerConfig(policy="las"), 3600.0).queue is None


def test_jobs_with_an_array_cap_are_counted_and_decided_one_by_one() -> None:
    state = ClusterState(make_fabric(1, 1))  # 8 GPUs: room for all four, but the array allows one at a time
    queue = [make_job(f"a{i}", t=float(i), array_id="arr", array_cap=1) for i in range(3)] + [make_job("b", t=9.0)]
    index = QueueIndex("fifo")
    index.reset(queue)
    assert index.view().held == 3
    index.change(["a2"])  # a2 left the queue, as a feed says it
    view = index.view()
    assert view.held == 2
    got = schedule(
        ScheduleRequest(state.snapshot(), tuple(queue[:2] + queue[3:]), 0.0, SchedulerConfig(policy="fifo"), queue=view)
    )
    assert sorted(a.job_id for a in got.placements) == ["a0", "b"]
    assert [(w.job_id, w.reason.value) for w in got.waiting] == [("a1", "array_limit")]


def _timed(job: JobSpec, draw: st.DrawFn, now: float, *, elastic: bool) -> JobSpec:
    """``job`` with an estimate and a deadline or not: some that cannot make it, some at risk, some at ease."""
    est = draw(st.sampled_from([None, 60.0, 600.0, 3600.0]))
    dl = None
    if draw(st.booleans()):
        runtime = est if est is not None else 3600.0
        dl = now + 0.4 + runtime * draw(st.sampled_from([0.5, 1.0, 1.05, 1.5, 4.0]))
    kw: dict[str, object] = {"estimated_runtime_s": est, "deadline_s": dl}
    if elastic and job.tasks > 1 and job.share is None and dl is not None and est is not None:
        kw |= {"min_tasks": 1, "scaling": Scaling.LINEAR}
    return dataclasses.replace(job, **kw)  # type: ignore[arg-type]


@st.composite
def _busy(draw: st.DrawFn, fab_key: str) -> ClusterState:
    """A cluster with running jobs that have estimates (so EASY reserves), some that are preemptible, and some
    with deadlines (a deadline job at risk may preempt one that still meets its own after a restart)."""
    state = ClusterState(INDEXES[fab_key])
    pre = [
        dataclasses.replace(
            j,
            estimated_runtime_s=draw(st.sampled_from([None, 500.0, 2000.0])),
            preemptible=draw(st.booleans()),
            deadline_s=draw(st.sampled_from([None, None, 1500.0, 4000.0])),
        )
        for j in draw(jobs("pre", 10))
    ]
    # Whole hosts taken too, most of the cluster at times, so that jobs wait and reservations are made.
    per_host, n_hosts = int(INDEXES[fab_key].host_gpus[0]), len(FABRICS[fab_key].hosts)
    for i in range(draw(st.integers(0, n_hosts))):
        est = draw(st.sampled_from([None, 300.0, 900.0, 5000.0]))
        pre.append(make_job(f"fill{i}", gpus=per_host, estimated_runtime_s=est, preemptible=draw(st.booleans())))
    place_first(state, pre)
    return state


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    fab_key=st.sampled_from(sorted(FABRICS)),
    placer=st.sampled_from(GROUPED_PLACERS),
    policy=st.sampled_from(["srt", "edf", "fifo", "priority"]),
    limit=st.sampled_from([1000, 3, 1]),
    backfill=st.sampled_from([BackfillMode.EASY, BackfillMode.EASY, BackfillMode.NONE]),
    preemption=st.booleans(),
)
def test_the_default_settings_decide_from_the_kept_queue_as_job_by_job(
    data: st.DataObject, fab_key: str, placer: str, policy: str, limit: int, backfill: BackfillMode, preemption: bool
) -> None:
    # The defaults (deadline admission, EASY backfill, deadline preemption, topology) with deadlines and
    # estimates: the kept queue's cycle visits only what can change, and decides as deciding every job afresh.
    state = data.draw(_busy(fab_key))
    now = 400.0
    elastic = data.draw(st.booleans())
    pending = [_timed(j, data.draw, now, elastic=elastic) for j in data.draw(jobs("j", 16))]
    for i in range(data.draw(st.integers(0, 12))):  # long runs of one shape, with deadlines of every kind
        pending.append(_timed(make_job(f"same{i}", gpus=3, t=float(i)), data.draw, now, elastic=False))
    rails = data.draw(st.sampled_from([(2, 4), (3, 2), (2, 8)]))
    for i in range(data.draw(st.integers(0, 6))):
        rail = make_job(f"rail{i}", tasks=rails[0], gpus=rails[1], t=float(i), rail_aligned=True)
        pending.append(_timed(rail, data.draw, now, elastic=elastic))
    s = SchedulerSettings(
        policy=policy, placer=placer, max_placements_per_cycle=limit, backfill=backfill, preemption=preemption
    )
    cfg, sharing = scheduler_config(s), sharing_policy(s)
    # Some were preempted before: their deadlines count a restart, which the queue's numbers do not; the
    # order counts it too (``policies.as_ordered``).
    again = data.draw(st.lists(st.booleans(), min_size=len(pending), max_size=len(pending)))
    restarted = MappingProxyType({j.job_id: 1 for j, a in zip(pending, again, strict=True) if a})
    index = QueueIndex(policy)
    index.reset(pending, restarted)
    snap = dataclasses.replace(state.snapshot(), preemption_count=restarted)
    plain = ScheduleRequest(snap, tuple(pending), now, cfg, sharing)
    kept = dataclasses.replace(plain, queue=index.view())
    got, want, fresh = schedule(kept), schedule(plain), schedule(plain, remember_refusals=False)
    assert len(got.waiting) == len(want.waiting)
    assert want == fresh
    assert got == want
    assert [w.job_id for w in got.waiting] == [j.job_id for j in _scratch_of(plain) if j.job_id not in got.placed_ids()]


def test_a_long_deadline_queue_with_nothing_placeable_visits_one_job_per_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    # The defaults, a full cluster whose running jobs have estimates (EASY reserves for the first job that
    # waits), and 4,000 deadline jobs of two shapes, a quarter of them too late to make their deadline.
    state = ClusterState(make_fabric(1, 2))  # 16 GPUs
    full = [make_job(f"f{i}", gpus=8, estimated_runtime_s=1000.0) for i in range(2)]
    for a in schedule(ScheduleRequest(state.snapshot(), tuple(full), 0.0)).placements:
        state.apply(JobSubmitted(next(j for j in full if j.job_id == a.job_id), 0.0))
        state.apply(JobPlaced(a, 0.0))
    now = 100.0
    queue = [
        make_job(
            f"q{i}",
            gpus=1 + i % 2,
            t=float(i),
            estimated_runtime_s=600.0,
            deadline_s=now + (100.0 if i % 4 == 3 else 5000.0 + i),
        )
        for i in range(4000)
    ]
    s = SchedulerSettings()
    index = QueueIndex(s.policy)
    index.reset(queue)
    tries = []
    real = stages.decide
    monkeypatch.setattr(grouped, "decide", lambda cy, ask: tries.append(ask.job.job_id) or real(cy, ask))
    req = ScheduleRequest(state.snapshot(), tuple(queue), now, scheduler_config(s), sharing_policy(s))
    got = schedule(dataclasses.replace(req, queue=index.view()))
    assert len(tries) <= 4  # the first job of each shape, and the one EASY reserves for with its shape's next
    reasons = Counter(w.reason.value for w in got.waiting)
    assert reasons["deadline_infeasible"] == 1000 and sum(reasons.values()) == 4000
    assert got == schedule(req, remember_refusals=False)


def test_what_a_shape_knew_before_a_placement_is_asked_again_after_it() -> None:
    # 16 GPUs, 8 of them busy until t=1000. FIFO: a gang of 16 reserves both hosts from t=1000; a 4-GPU job
    # that would run past it waits RESERVED (it fits, off the reservation it does not); a short 6-GPU job
    # ends before it and is placed; the next 4-GPU job no longer fits at all: it waits for capacity.
    state = ClusterState(make_fabric(1, 2))
    run = make_job("r", gpus=8, estimated_runtime_s=1000.0)
    for a in schedule(ScheduleRequest(state.snapshot(), (run,), 0.0)).placements:
        state.apply(JobSubmitted(run, 0.0))
        state.apply(JobPlaced(a, 0.0))
    queue = [
        make_job("big", tasks=2, gpus=8, t=1.0, estimated_runtime_s=100.0),
        make_job("a1", gpus=4, t=2.0, estimated_runtime_s=5000.0),
        make_job("b1", gpus=6, t=3.0, estimated_runtime_s=100.0),
        make_job("a2", gpus=4, t=4.0, estimated_runtime_s=5000.0),
    ]
    s = SchedulerSettings(policy="fifo")
    index = QueueIndex("fifo")
    index.reset(queue)
    req = ScheduleRequest(state.snapshot(), tuple(queue), 100.0, scheduler_config(s), sharing_policy(s))
    got = schedule(dataclasses.replace(req, queue=index.view()))
    assert [a.job_id for a in got.placements] == ["b1"]
    assert [(w.job_id, w.reason.value) for w in got.waiting] == [
        ("big", "waiting_for_reservation"),
        ("a1", "reserved"),
        ("a2", "no_capacity"),
    ]
    assert got == schedule(req, remember_refusals=False)


def test_a_job_that_may_preempt_is_decided_even_when_its_shape_waits() -> None:
    # FIFO, 16 GPUs busy with preemptible jobs of the normal class: 500 normal jobs of one shape wait for
    # capacity, and the high-priority one behind them, of the same shape, preempts.
    state = ClusterState(make_fabric(1, 2))
    full = [make_job(f"f{i}", gpus=8, preemptible=True) for i in range(2)]
    for a in schedule(ScheduleRequest(state.snapshot(), tuple(full), 0.0)).placements:
        state.apply(JobSubmitted(next(j for j in full if j.job_id == a.job_id), 0.0))
        state.apply(JobPlaced(a, 0.0))
    queue = [make_job(f"q{i}", gpus=4, t=float(i)) for i in range(500)]
    queue.append(make_job("vip", gpus=4, t=600.0, priority=PriorityClass.HIGH))
    s = SchedulerSettings(policy="fifo")
    index = QueueIndex("fifo")
    index.reset(queue)
    req = ScheduleRequest(state.snapshot(), tuple(queue), 1000.0, scheduler_config(s), sharing_policy(s))
    got = schedule(dataclasses.replace(req, queue=index.view()))
    assert [(p.reason.value, p.job_id) for p in got.preemptions] == [("priority", "f0")]
    assert got.waiting[-1].job_id == "vip" and got.waiting[-1].reason.value == "preempting"
    assert got == schedule(req, remember_refusals=False)
