"""Property tests for sharing: quotas and lending hold, reclaims finish within the grace, gangs stay whole."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from sched_builders import make_job

from gpupool.cluster import ClusterState, FabricIndex
from gpupool.domain.events import JobPlaced, JobPreempted, JobStarted, JobSubmitted
from gpupool.domain.jobs import MILLI_PER_GPU, JobSpec
from gpupool.domain.sharing import Quota
from gpupool.fabric.generators import leaf_spine
from gpupool.scheduler import PreemptionConfig, SchedulerConfig, ScheduleRequest, SharingPolicy, schedule
from gpupool.scheduler.quotas import QuotaBook

FAB = leaf_spine(2, 2, 3, gpus_per_host=8)  # 48 GPUs
IX = FabricIndex(FAB)
TENANTS = ("a", "b", "c")
SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def quotas(draw: st.DrawFn) -> tuple[Quota, ...]:
    return tuple(
        Quota(
            t,
            "p",
            draw(st.integers(0, 24)),
            borrowing_limit_gpus=draw(st.one_of(st.none(), st.integers(0, 16))),
            lending_limit_gpus=draw(st.one_of(st.none(), st.integers(0, 16))),
            cohort=draw(st.sampled_from(["c", "c", ""])),
        )
        for t in TENANTS
    )


@st.composite
def jobs(draw: st.DrawFn, prefix: str, t0: float = 0.0) -> list[JobSpec]:
    out = []
    for i in range(draw(st.integers(1, 10))):
        out.append(
            make_job(
                f"{prefix}{i}",
                tasks=draw(st.integers(1, 3)),
                gpus=draw(st.sampled_from([1, 2, 4, 8])),
                t=t0 + i,
                tenant=draw(st.sampled_from(TENANTS)),
                pool="p",
                priority=draw(st.sampled_from([1, 2, 3])),
                preemptible=draw(st.booleans()),
            )
        )
    return out


def _cohort_ok(book: QuotaBook) -> bool:
    for k in book.quotas:
        members = book.cohort_members(k)
        if sum(book.borrowed(m) for m in members) > sum(book.lent_idle(m) for m in members if book.borrowed(m) == 0):
            return False
        q = book.quotas[k]
        if q.borrowing_limit_gpus is not None and book.borrowed(k) > q.borrowing_limit_gpus * MILLI_PER_GPU:
            return False
        if not q.cohort and book.borrowed(k) > 0:
            return False
    return True


def _apply(state: ClusterState, placements, by_id, now: float) -> None:  # type: ignore[no-untyped-def]
    for a in placements:
        if state.job_state(a.job_id) is None:
            state.apply(JobSubmitted(by_id[a.job_id], now))
        state.apply(JobPlaced(a, now))
        state.apply(JobStarted(a.job_id, now))


@SETTINGS
@given(quotas(), jobs("j"))
def test_borrowing_never_exceeds_what_the_cohort_lends_nor_the_borrowing_limit(qs, js) -> None:  # type: ignore[no-untyped-def]
    state = ClusterState(IX)
    sh = SharingPolicy(quotas=qs)
    r = schedule(ScheduleRequest(state.snapshot(), tuple(js), 0.0, SchedulerConfig(), sh))
    by_id = {j.job_id: j for j in js}
    # Replay the decisions in order: every admission beyond nominal quota must keep the cohort's books.
    book = QuotaBook(qs, {}, require=False)
    for a in r.placements:
        job = by_id[a.job_id]
        key = (job.tenant, job.pool, "")
        book.add(job, sum(t.milli_gpu * len(t.gpus) for t in a.tasks))
        if book.borrowed(key) > 0:  # a borrow: lending must cover it now (an owner's later use may not)
            assert _cohort_ok(book), (a.job_id, book.usage)
    _apply(state, r.placements, by_id, 0.0)


@SETTINGS
@given(st.data())
def test_owner_reclaims_lent_capacity_within_the_grace_and_gangs_go_whole(data: st.DataObject) -> None:
    state = ClusterState(IX)
    grace = 100.0
    qs = (Quota("a", "p", 24, cohort="c"), Quota("b", "p", 24, cohort="c"))
    sh = SharingPolicy(quotas=qs, preemption=PreemptionConfig(grace_s=grace, min_runtime_s=1e9))
    borrowers = [
        make_job(
            f"b{i}",
            tasks=data.draw(st.integers(1, 3)),
            gpus=data.draw(st.sampled_from([2, 4, 8])),
            tenant="b",
            pool="p",
        )
        for i in range(data.draw(st.integers(1, 12)))
    ]
    r = schedule(ScheduleRequest(state.snapshot(), tuple(borrowers), 0.0, SchedulerConfig(), sh))
    by_id = {j.job_id: j for j in borrowers}
    _apply(state, r.placements, by_id, 0.0)
    # Only borrowed capacity is reclaimable: when b stays within its own nominal quota, a fragmented
    # cluster may rightly keep the owner waiting (b0 = 3 x 4 GPUs and b1 = 8 GPUs leave no 3 whole hosts).
    assume(sum(t.milli_gpu * len(t.gpus) for a in r.placements for t in a.tasks) > 24 * MILLI_PER_GPU)
    n = data.draw(st.sampled_from([4, 8, 16, 24]))
    owner = make_job("own", tasks=n // 8 or 1, gpus=min(n, 8), t=10.0, tenant="a", pool="p")
    now = 10.0
    placed = False
    while now <= 10.0 + grace + grace / 2:  # due at submit + grace; placed the cycle after
        snap = state.snapshot()
        res = schedule(ScheduleRequest(snap, (owner,), now, SchedulerConfig(), sh))
        if res.placed_ids():
            placed = True
            break
        for p in res.preemptions:
            victim = snap.running[p.job_id]
            before = state.snapshot().free_gpus()
            state.apply(JobPreempted(p.job_id, now))
            # the whole gang comes back: every task's GPUs, never part of them
            assert state.snapshot().free_gpus() == before + sum(len(t.gpus) for t in victim.allocation.tasks)
        now += grace / 2
    assert placed, "the owner is within its nominal quota: its capacity must be back within the grace"


@SETTINGS
@given(jobs("r"), jobs("n", t0=100.0))
def test_priority_preemption_names_only_running_preemptible_lower_priority_jobs(run_js, new_js) -> None:  # type: ignore[no-untyped-def]
    state = ClusterState(IX)
    sh = SharingPolicy(preemption=PreemptionConfig(min_runtime_s=10.0))
    r = schedule(ScheduleRequest(state.snapshot(), tuple(run_js), 0.0, SchedulerConfig(), sh))
    _apply(state, r.placements, {j.job_id: j for j in run_js}, 0.0)
    snap = state.snapshot()
    r2 = schedule(ScheduleRequest(snap, (*snap.pending, *new_js), 50.0, SchedulerConfig(), sh))
    waiting = {w.job_id for w in r2.waiting}
    assert not waiting & r2.placed_ids()
    top = max((j.priority for j in new_js + list(snap.pending)), default=0)
    for p in r2.preemptions:
        victim = snap.running[p.job_id]
        assert victim.spec.preemptible and victim.spec.priority < top
    assert len({p.job_id for p in r2.preemptions}) == len(r2.preemptions)
    for p in r2.preemptions:
        state.apply(JobPreempted(p.job_id, 50.0))
    assert int((state.snapshot().gpu_used_milli < 0).sum()) == 0
