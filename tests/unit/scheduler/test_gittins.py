"""The Gittins index of attained service (``scheduler.gittins``) and the ``gittins`` policy: the index
against hand-computed values, the learned distribution per GPU count, the prior, and preemption by index."""

from __future__ import annotations

import math

import pytest
from sched_builders import make_fabric, make_job

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobPlaced, JobStarted, JobSubmitted
from gpupool.domain.jobs import JobSpec
from gpupool.scheduler import (
    POLICIES,
    CycleInputs,
    PreemptionConfig,
    ReasonCode,
    SchedulerConfig,
    ScheduleRequest,
    SharingPolicy,
    schedule,
)
from gpupool.scheduler.gittins import ALL, GittinsConfig, HistoryBuilder, ServiceHistory
from gpupool.scheduler.policies import get_policy, order

NO_PRIOR = GittinsConfig(prior_weight=0.0, by_gpu_count=True, min_group_samples=2, min_quantum_gpu_s=0.0)


def test_the_index_matches_the_definition_on_a_two_point_distribution() -> None:
    # Half the jobs need 100 GPU-s, half 1,000. From 0: stop at 100 -> 0.5 / 100; at 1,000 -> 1 / 550.
    h = ServiceHistory({1: [100.0, 1000.0]}, NO_PRIOR)
    assert h.index(1, 0.0) == pytest.approx(0.5 / 100.0)
    # Past 100 s only the 1,000 s job is left: 1 / (1,000 - a). The index rises as it nears its end.
    assert h.index(1, 100.0) == pytest.approx(1 / 900.0)
    assert h.index(1, 500.0) == pytest.approx(1 / 500.0)
    assert h.index(1, 500.0) > h.index(1, 100.0)  # increasing hazard: a started job goes on (FIFO-like)
    # Past every sample the tail is assumed as long again.
    assert h.index(1, 2000.0) == pytest.approx(1 / 4000.0)


def test_a_heavy_tail_gives_least_attained_service_first() -> None:
    pareto = [100.0 / (1 - (k + 0.5) / 400) for k in range(400)]  # alpha = 1: a decreasing hazard
    h = ServiceHistory({1: pareto}, GittinsConfig(prior_weight=0.0, min_quantum_gpu_s=600.0))
    values = [h.index(1, a) for a in (200.0, 1000.0, 5000.0, 30000.0)]
    assert values == sorted(values, reverse=True)


def test_a_minimum_quantum_smooths_the_spike_of_a_sample_just_ahead() -> None:
    raw = ServiceHistory({1: [1000.0, 5000.0, 9000.0]}, NO_PRIOR)
    smooth = ServiceHistory({1: [1000.0, 5000.0, 9000.0]}, GittinsConfig(prior_weight=0.0, min_quantum_gpu_s=600.0))
    assert raw.index(1, 999.0) == pytest.approx(1 / 3.0)  # 1 GPU-s from a likely end
    # With quanta of at least 600: finishing within 600 costs 1 + 2 x 600 GPU-s for 1 of 3 jobs, or all.
    assert smooth.index(1, 999.0) == pytest.approx(max(1 / 1201.0, 3 / (1 + 4001 + 2 * 4001)))


def test_groups_by_gpu_count_need_enough_samples_and_the_prior_fills_in() -> None:
    cfg = GittinsConfig(prior_weight=0.0, by_gpu_count=True, min_group_samples=3, min_quantum_gpu_s=0.0)
    h = ServiceHistory({1: [100.0, 100.0, 100.0], 8: [8000.0, 8000.0]}, cfg)
    assert ServiceHistory({1: [100.0] * 5}, GittinsConfig()).group(1) == ALL  # one shared distribution by default
    assert h.group(1) == 1 and h.group(8) == ALL and h.group(4) == ALL
    assert h.counts[ALL] == 5
    assert h.index(1, 0.0) == pytest.approx(1 / 100.0)
    assert h.index(8, 0.0) == pytest.approx(h.index(4, 0.0))  # both pooled
    prior_only = ServiceHistory.empty()  # log-uniform: least attained service first
    values = [prior_only.index(1, a) for a in (0.0, 1e3, 1e4, 1e5, 1e6, 1e7)]
    assert all(math.isfinite(v) and v > 0 for v in values) and values == sorted(values, reverse=True)


def test_the_builder_keeps_its_history_until_a_job_finishes() -> None:
    b = HistoryBuilder(NO_PRIOR)
    first = b.history()
    assert b.history() is first
    b.finished(2, 50.0)
    b.finished(2, float("nan"))  # ignored
    second = b.history()
    assert second is not first and second.counts[2] == 1 and second.counts[ALL] == 1


def test_the_builder_holds_a_bounded_window_and_builds_what_the_whole_list_would() -> None:
    cfg = GittinsConfig(prior_weight=0.0, max_samples=3, max_cohort_samples=4, cohort_window_s=100.0, cohort_min=2)
    b = HistoryBuilder(cfg)
    services = [100.0, 200.0, 300.0, 400.0, 500.0, 600.0]
    for k, s in enumerate(services):
        b.finished(2, s, submit_s=10.0 * k)
    assert b.completions == 4  # a long-running server keeps a window, not every completion
    h = b.history()
    assert h.counts[2] == 3  # ``ServiceHistory`` uses the last ``max_samples`` per group either way
    whole = ServiceHistory({2: services}, cfg, [(10.0 * k, s, 2) for k, s in enumerate(services)][-4:])
    for a in (0.0, 350.0, 450.0, 550.0):
        assert h.index(2, a) == whole.index(2, a)
    assert h.view(()).index(2, 450.0, 25.0) == whole.view(()).index(2, 450.0, 25.0)


def test_the_policy_orders_by_index_then_submission() -> None:
    state = ClusterState(make_fabric(1, 1))
    hist = ServiceHistory({1: [100.0, 100.0, 5000.0, 5000.0], 4: [40000.0, 40000.0]}, NO_PRIOR)
    jobs = [make_job("big", gpus=4, t=0.0), make_job("b", gpus=1, t=2.0), make_job("a", gpus=1, t=1.0)]
    cfg = SchedulerConfig(policy="gittins")
    req = ScheduleRequest(state.snapshot(), tuple(jobs), 10.0, cfg, inputs=CycleInputs(service_history=hist))
    got = order(get_policy("gittins"), req)
    assert [j.job_id for j in got] == ["a", "b", "big"]
    assert get_policy("gittins").service_ranker(req)(jobs[1], 0.0, False) == -hist.index(1, 0.0)
    las = SchedulerConfig(policy="las", las_thresholds_gpu_s=(100.0,))
    las_req = ScheduleRequest(state.snapshot(), tuple(jobs), 10.0, las)
    assert get_policy("las").service_ranker(las_req)(jobs[1], 150.0, True) == 1.0


def test_only_the_gittins_policies_learn_from_completions_and_only_the_ranked_ones_preempt_by_service() -> None:
    # Callers (the loop driver, the settings) read these declarations instead of testing a policy's name.
    assert {n for n, p in POLICIES.items() if p.uses_service_history} == {"gittins", "sf-gittins"}
    assert {n for n, p in POLICIES.items() if p.preempts_by_service} == {"gittins", "sf-gittins", "sf-srpt"}


def _start(
    state: ClusterState, job: JobSpec, at: float, sh: SharingPolicy, cfg: SchedulerConfig, inputs: CycleInputs
) -> None:
    r = schedule(ScheduleRequest(state.snapshot(), (job,), at, cfg, sh, inputs))
    (a,) = r.placements
    state.apply(JobSubmitted(job, at))
    state.apply(JobPlaced(a, at))
    state.apply(JobStarted(a.job_id, at))


def test_a_job_with_a_higher_index_preempts_one_past_the_common_size() -> None:
    # Most jobs need 800 GPU-s (8 GPUs x 100 s), a few 80,000. A job that ran 8 x 200 s is a long one now:
    # a new job's index is higher, so it takes the GPUs; a job at 8 x 50 s is near its likely end and stays.
    hist = ServiceHistory({8: [800.0] * 9 + [80000.0]}, NO_PRIOR)
    cfg = SchedulerConfig(policy="gittins")
    pre = PreemptionConfig(by_priority=False, by_service=True, min_runtime_s=0.0)
    sh = SharingPolicy(preemption=pre)
    inputs = CycleInputs(service_history=hist)
    state = ClusterState(make_fabric(1, 1))  # 8 GPUs
    _start(state, make_job("old", gpus=8, preemptible=True), 0.0, sh, cfg, inputs)
    new = make_job("new", gpus=8, t=40.0)
    early = ScheduleRequest(state.snapshot(), (new,), 50.0, cfg, sh, inputs)
    assert not schedule(early).preemptions
    late = ScheduleRequest(state.snapshot(), (new,), 200.0, cfg, sh, inputs)
    r = schedule(late)
    assert [(p.job_id, p.reason) for p in r.preemptions] == [("old", ReasonCode.ATTAINED_SERVICE)]
    assert r == schedule(late, remember_refusals=False)
    bonus = SchedulerConfig(policy="gittins", gittins=GittinsConfig(running_bonus=100.0))
    assert not schedule(ScheduleRequest(state.snapshot(), (new,), 200.0, bonus, sh, inputs)).preemptions


def test_a_cohort_counts_its_running_jobs_as_censored_samples() -> None:
    # A burst at t=100,000: three short jobs (100 GPU-s) finished, three others have run 3,000 GPU-s and go
    # on. The completions alone say "the burst is short"; counting the survivors (Kaplan-Meier), half of
    # the burst is still running past 3,000, so a job at 0 is not sure to be short.
    cfg = GittinsConfig(
        prior_weight=0.0, min_quantum_gpu_s=0.0, cohort_window_s=1000.0, cohort_min=3, cohort_pooled_weight=0.0
    )
    early = [(float(t), 5000.0) for t in range(50)]
    burst = [(100000.0 + t, 100.0) for t in range(3)]
    pairs = early + burst
    hist = ServiceHistory({1: [v for _, v in pairs]}, cfg, pairs)
    alone = hist.view(())
    censored = hist.view([(100010.0 + t, 3000.0) for t in range(3)])
    assert alone.index(1, 0.0, 100500.0) == pytest.approx(1 / 100.0)  # all finished at 100
    # Half finish at 100, the rest run past 3,000 (placed at 6,000, twice the longest seen): a quantum of 100
    # finishes half the jobs and costs 100 GPU-s each.
    assert censored.index(1, 0.0, 100500.0) == pytest.approx(0.5 / (0.5 * 100 + 0.5 * 100))
    assert censored.index(1, 0.0, 100500.0) < alone.index(1, 0.0, 100500.0)
    # Far from the burst: the whole history, and a job that never ran is not censored data.
    assert censored.index(1, 0.0, 50000.0) == hist.index(1, 0.0)


def test_with_survivors_counted_a_burst_without_completions_ranks_its_running_jobs_first() -> None:
    # The history says "short" (100 GPU-s); a burst at t=100,000 has no completion yet, and its five running
    # jobs all passed 2,000 GPU-s. Counting survivors, the burst is ranked on its own: a job of it at 2,000
    # (placed at twice the longest seen, 4,000) outranks a new one; by completions alone, the history decides.
    def cfg(survivors: bool) -> GittinsConfig:
        return GittinsConfig(
            prior_weight=0.0,
            min_quantum_gpu_s=0.0,
            cohort_window_s=1000.0,
            cohort_min=5,
            cohort_pooled_weight=0.0,
            cohort_counts_survivors=survivors,
        )

    pairs = [(float(t), 100.0) for t in range(50)]
    alive = [(100010.0 + t, 2000.0) for t in range(5)]
    plain = ServiceHistory({1: [v for _, v in pairs]}, cfg(False), pairs).view(alive)
    assert plain.index(1, 0.0, 100500.0) > plain.index(1, 2000.0, 100500.0)  # the history: LAS-like past 100
    surv = ServiceHistory({1: [v for _, v in pairs]}, cfg(True), pairs).view(alive)
    assert surv.index(1, 2000.0, 100500.0) == pytest.approx(1 / 2000.0)
    assert surv.index(1, 0.0, 100500.0) == pytest.approx(1 / 4000.0)


def _batch_cfg(**kw: float | bool) -> GittinsConfig:
    base: dict[str, float | bool] = dict(
        prior_weight=0.0, min_quantum_gpu_s=0.0, cohort_window_s=0.0, cohort_pooled_weight=0.0, batch_gap_s=5.0
    )
    return GittinsConfig(**{**base, **kw})  # type: ignore[arg-type]


def test_a_batch_with_a_completion_ranks_its_jobs_against_it() -> None:
    # The history says "1,000 GPU-s or 20,000". A sweep of 1-GPU jobs submitted 2 s apart at t=1,000: one
    # finished at 5,000 GPU-s; its siblings are ranked against that (a spike at 5,000), not the history.
    pairs = [(float(t), 1000.0 if t % 2 else 20000.0, 1) for t in range(40)] + [(1000.0, 5000.0, 1)]
    hist = ServiceHistory({1: [p[1] for p in pairs]}, _batch_cfg(), pairs)
    view = hist.view([(1002.0, 4000.0, 1), (1004.0, 0.0, 1), (1010.0, 0.0, 1), (1003.0, 0.0, 2)])
    assert view.index(1, 4000.0, 1002.0) == pytest.approx(1 / 1000.0)  # 1,000 GPU-s left, surely
    assert view.index(1, 0.0, 1004.0) == pytest.approx(1 / 5000.0)
    # 6 s after the last sibling: not of the batch; nor a 2-GPU job submitted among them.
    assert view.index(1, 0.0, 1010.0) == hist.index(1, 0.0)
    assert view.index(2, 0.0, 1003.0) == hist.index(2, 0.0)
    # The history alone ranks a fresh job above one at 4,000 (LAS-like past 1,000); the batch reverses it.
    assert hist.index(1, 0.0) > hist.index(1, 4000.0)
    assert view.index(1, 4000.0, 1002.0) > view.index(1, 0.0, 1004.0)
    off = ServiceHistory({1: [p[1] for p in pairs]}, _batch_cfg(batch_gap_s=0.0), pairs)
    assert off.view([(1002.0, 4000.0, 1)]).index(1, 4000.0, 1002.0) == off.index(1, 4000.0)


def test_before_its_first_completion_a_batch_knows_its_jobs_outlive_its_leader() -> None:
    # A heavy-tailed history (LAS-like); a batch at t=1,000 whose leader ran 3,000 GPU-s and goes on. A
    # fresh sibling needs more than 3,000 too: it ranks below the leader and below a fresh job of no batch.
    pareto = [100.0 / (1 - (k + 0.5) / 400) for k in range(400)]
    pairs = [(float(t), s, 1) for t, s in enumerate(pareto)]
    alive = [(1000.0, 3000.0, 1), (1003.0, 0.0, 1), (5000.0, 0.0, 1)]
    floor = ServiceHistory({1: pareto}, _batch_cfg(min_quantum_gpu_s=600.0), pairs).view(alive)
    plain = ServiceHistory({1: pareto}, _batch_cfg(min_quantum_gpu_s=600.0, batch_floor=False), pairs).view(alive)
    assert plain.index(1, 0.0, 1003.0) > plain.index(1, 3000.0, 1000.0)  # least attained service first
    assert floor.index(1, 3000.0, 1000.0) == plain.index(1, 3000.0, 1000.0)  # the leader is ranked as before
    assert floor.index(1, 0.0, 1003.0) < floor.index(1, 3000.0, 1000.0)
    assert floor.index(1, 0.0, 1003.0) < floor.index(1, 0.0, 5000.0) == plain.index(1, 0.0, 5000.0)


def test_the_policy_serves_a_sibling_of_a_short_batch_first() -> None:
    # Every finished job of the history needed 50,000 GPU-s but one: the first of a batch at t=100, 100 GPU-s.
    # Its sibling (t=102) goes before an older job of no batch; without batches, submission order decides.
    pairs = [(float(t), 50000.0, 1) for t in range(10)] + [(100.0, 100.0, 1)]
    state = ClusterState(make_fabric(1, 1))
    jobs = (make_job("old", gpus=1, t=50.0), make_job("sib", gpus=1, t=102.0))
    b = HistoryBuilder(_batch_cfg())
    for t, s, g in pairs:
        b.finished(g, s, submit_s=t)
    for cfg, first in ((_batch_cfg(), "sib"), (_batch_cfg(batch_gap_s=0.0), "old")):
        hist = ServiceHistory({1: [p[1] for p in pairs]}, cfg, pairs)
        sched = SchedulerConfig(policy="gittins", gittins=cfg)
        req = ScheduleRequest(state.snapshot(), jobs, 200.0, sched, inputs=CycleInputs(service_history=hist))
        assert order(get_policy("gittins"), req)[0].job_id == first
    built = b.history().view([(102.0, 0.0, 1)])  # the builder keeps each completion's GPU count
    assert built.index(1, 0.0, 102.0) == pytest.approx(1 / 100.0)
