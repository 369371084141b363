"""The queue kept between cycles (``scheduler.queue``) and the cycle that visits its shapes (``scheduler.grouped``).

Invariants: the kept order is the policy's own order of the state's pending jobs, whatever entered and left
the queue and however the state's feed was renewed; a cycle over the kept queue decides exactly what the
job-by-job cycle decides (placements, every reason, their order); and a blocked queue costs one placement
try per shape, not per job.
"""

from __future__ import annotations

from heapq import merge

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_builders import make_fabric, make_job
from test_properties import FABRICS, _state, jobs

import gpupool.scheduler.grouped as grouped
from gpupool.cluster import ClusterState
from gpupool.domain.events import JobCancelled, JobPlaced, JobPreempted, JobSubmitted
from gpupool.domain.jobs import JobSpec, PriorityClass
from gpupool.scheduler import NO_SHARING, PLACERS, POLICIES, SchedulerConfig, ScheduleRequest, schedule
from gpupool.scheduler.driver import CycleDriver
from gpupool.scheduler.policies import get_policy
from gpupool.scheduler.queue import QueueIndex
from gpupool.scheduler.types import QueueView

STATIC = sorted(p for p, pol in POLICIES.items() if pol.static_key is not None)
GROUPED_PLACERS = sorted(p for p, pl in PLACERS.items() if not pl.uses_mix)


def _in_order(view: QueueView) -> list[JobSpec]:
    return [j for _, j in merge(*(zip(g.keys, g.jobs, strict=True) for g in view.groups))]


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
        if what == "submit":
            est, dl = (None, None) if x % 3 == 0 else (float(10 + x), float(100 + 7 * x))
            job = make_job(
                f"j{n}", tasks=1 + x % 2, gpus=1 + x % 4, t=float(x % 5), priority=PriorityClass(x % 5),
                estimated_runtime_s=est, deadline_s=dl,
            )  # fmt: skip
            state.apply(JobSubmitted(job, 0.0))
            n += 1
        elif what == "cancel" and snap.pending:
            state.apply(JobCancelled(snap.pending[x % len(snap.pending)].job_id, 0.0))
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
    assert index.sync(state.snapshot())
    view = index.view()
    assert _in_order(view) == _scratch(state, policy) and view.count == len(state.snapshot().pending)


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
    real = grouped.place
    monkeypatch.setattr(grouped, "place", lambda *a: tries.append(a[1].job.job_id) or real(*a))
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
    index.discard("a2")
    view = index.view()
    assert view.held == 2
    got = schedule(
        ScheduleRequest(state.snapshot(), tuple(queue[:2] + queue[3:]), 0.0, SchedulerConfig(policy="fifo"), queue=view)
    )
    assert sorted(a.job_id for a in got.placements) == ["a0", "b"]
    assert [(w.job_id, w.reason.value) for w in got.waiting] == [("a1", "array_limit")]
