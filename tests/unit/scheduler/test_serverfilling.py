"""ServerFilling (``scheduler.serverfilling``) and its policies ``sf-srpt`` and ``sf-gittins``: the prefix and
its largest-first order on hand cases, that it fills every server with power-of-two needs, and what a cycle
places and preempts with it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from sched_builders import make_fabric, make_job

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobCheckpointed, JobPlaced, JobStarted, JobSubmitted
from gpupool.domain.jobs import JobSpec
from gpupool.scheduler import (
    CycleInputs,
    PreemptionConfig,
    ReasonCode,
    SchedulerConfig,
    ScheduleRequest,
    SharingPolicy,
    schedule,
)
from gpupool.scheduler.gittins import GittinsConfig, ServiceHistory
from gpupool.scheduler.policies import get_policy, order, remaining_work
from gpupool.scheduler.serverfilling import server_filling

BY_SERVICE = SharingPolicy(
    preemption=PreemptionConfig(by_priority=False, by_service=True, max_lost_s=60.0, min_runtime_s=0.0)
)


def test_the_minimal_prefix_is_served_largest_first_and_the_rest_keep_their_rank() -> None:
    got = server_filling([("a", 1), ("b", 4), ("c", 1), ("d", 2), ("e", 8)], 8)
    assert got.served == {"a", "b", "c", "d"}  # 1 + 4 + 1 + 2 = 8: the first prefix that needs all 8
    assert got.order == ("b", "d", "a", "c", "e")


def test_the_job_that_crosses_k_is_in_the_prefix_and_a_short_queue_is_served_whole() -> None:
    got = server_filling([("a", 2), ("b", 8), ("c", 1)], 8)
    assert got.served == {"a", "b"} and got.order == ("b", "a", "c")  # b fills the 8; a waits inside
    small = server_filling([("a", 1), ("f", 0), ("b", 2)], 16)  # fewer than k in all; a fraction counts 1
    assert small.served == {"a", "b", "f"} and small.order == ("b", "a", "f")
    assert server_filling([], 8).order == ()


@given(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=40))
def test_largest_first_fills_every_gpu_of_two_hosts_when_the_queue_needs_them(needs: list[int]) -> None:
    # The paper's claim on hosts: needs that are powers of two dividing the host size, placed first fit in
    # the prefix's order, leave no GPU of 2 x 8 free while the queue needs 16 or more.
    got = server_filling([(str(i), n) for i, n in enumerate(needs)], 16)
    free = [8, 8]
    for jid in got.order[: len(got.served)]:
        n = needs[int(jid)]
        host = next((h for h in (0, 1) if free[h] >= n), None)
        if host is not None:
            free[host] -= n
    assert sum(free) == max(0, 16 - sum(needs))


def _srpt_job(job_id: str, gpus: int, runtime_s: float, t: float = 0.0) -> JobSpec:
    return make_job(job_id, gpus=gpus, t=t, estimated_runtime_s=runtime_s, preemptible=True)


def test_sf_srpt_keeps_the_free_host_for_the_large_job_of_the_prefix() -> None:
    # 2 hosts x 8. Twelve short 1-GPU jobs and an 8-GPU job of medium work fill the prefix (20 >= 16): the
    # 8-GPU job takes a host, eight short jobs the other. SJF places the short jobs first and the 8-GPU job
    # finds no whole host; the long jobs outside the prefix take the GPUs left.
    state = ClusterState(make_fabric(1, 2))
    shorts = [_srpt_job(f"a{i:02d}", 1, 1000.0, t=float(i)) for i in range(12)]
    jobs = (*shorts, _srpt_job("b", 8, 2000.0), *(_srpt_job(f"c{i}", 1, 50000.0) for i in range(4)))
    sf = schedule(ScheduleRequest(state.snapshot(), jobs, 100.0, SchedulerConfig(policy="sf-srpt")))
    assert {a.job_id for a in sf.placements} == {"b", *(f"a{i:02d}" for i in range(8))}
    sjf = schedule(ScheduleRequest(state.snapshot(), jobs, 100.0, SchedulerConfig(policy="sjf")))
    placed = {a.job_id for a in sjf.placements}
    assert "b" not in placed and {"c0", "c1", "c2", "c3"} <= placed


def _run(state: ClusterState, job: JobSpec, at: float) -> None:
    (a,) = schedule(ScheduleRequest(state.snapshot(), (job,), at, SchedulerConfig(policy="sf-srpt"))).placements
    state.apply(JobSubmitted(job, at))
    state.apply(JobPlaced(a, at))
    state.apply(JobStarted(a.job_id, at))


def test_sf_srpt_preempts_only_jobs_outside_the_prefix_at_their_checkpoint() -> None:
    state = ClusterState(make_fabric(1, 1))  # 8 GPUs
    _run(state, _srpt_job("long", 8, 5000.0), 0.0)
    cfg = SchedulerConfig(policy="sf-srpt")
    # A 4-GPU job with less work left: the prefix needs the running job too (4 + 8 >= 8), and largest first
    # serves it: the short one waits, nothing is preempted (SRPT alone would preempt).
    half = _srpt_job("half", 4, 100.0, t=900.0)
    state.apply(JobCheckpointed("long", 1000.0))
    assert not schedule(ScheduleRequest(state.snapshot(), (half,), 1000.0, cfg, BY_SERVICE)).preemptions
    # An 8-GPU job with less work left is the prefix alone: the running job yields, but only at a checkpoint.
    whole = _srpt_job("whole", 8, 100.0, t=900.0)
    r = schedule(ScheduleRequest(state.snapshot(), (whole,), 1000.0, cfg, BY_SERVICE))
    assert [(p.job_id, p.reason) for p in r.preemptions] == [("long", ReasonCode.ATTAINED_SERVICE)]
    assert r == schedule(ScheduleRequest(state.snapshot(), (whole,), 1000.0, cfg, BY_SERVICE), remember_refusals=False)
    assert not schedule(ScheduleRequest(state.snapshot(), (whole,), 1100.0, cfg, BY_SERVICE)).preemptions
    # Remaining work is the estimate's GPU-seconds less the service so far, never below 0.
    assert remaining_work(whole, 300.0) == 500.0 and remaining_work(whole, 900.0) == 0.0
    assert remaining_work(make_job("x"), 0.0) == float("inf")


def test_sf_gittins_ranks_by_the_index_and_fills_largest_first() -> None:
    # Most 1-GPU jobs need 100 GPU-s; 4-GPU jobs 40,000: the 1-GPU jobs rank first, and with k = 1 x 1 x 8
    # GPUs the prefix is the three 1-GPU jobs and the 4-GPU one (3 + 4 < 8 with all four: every job served).
    state = ClusterState(make_fabric(1, 1))
    cfg0 = GittinsConfig(prior_weight=0.0, by_gpu_count=True, min_group_samples=2, min_quantum_gpu_s=0.0)
    hist = ServiceHistory({1: [100.0, 100.0, 5000.0, 5000.0], 4: [40000.0, 40000.0]}, cfg0)
    jobs = [make_job("big", gpus=4, t=0.0), make_job("b", gpus=1, t=2.0), make_job("a", gpus=1, t=1.0)]
    cfg = SchedulerConfig(policy="sf-gittins", gittins=cfg0)
    req = ScheduleRequest(state.snapshot(), tuple(jobs), 10.0, cfg, inputs=CycleInputs(service_history=hist))
    assert [j.job_id for j in order(get_policy("sf-gittins"), req)] == ["big", "a", "b"]
    rank = get_policy("sf-gittins").service_ranker(req)
    assert rank(jobs[0], 0.0, False) == rank(jobs[1], 0.0, False) == -1.0  # in the prefix: equals
    many = [*jobs, *(make_job(f"z{i}", gpus=4, t=5.0 + i) for i in range(2))]
    req2 = ScheduleRequest(state.snapshot(), tuple(many), 10.0, cfg, inputs=CycleInputs(service_history=hist))
    # a, b (1 GPU each) then big (4) then z0 (4): 10 >= 8, so z1 is outside, ranked by its place (5th).
    assert [j.job_id for j in order(get_policy("sf-gittins"), req2)] == ["big", "z0", "a", "b", "z1"]
    assert get_policy("sf-gittins").service_ranker(req2)(many[4], 0.0, False) == 4.0
