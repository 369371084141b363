"""The cycle skeleton both worlds run (``scheduler.driver``): decisions reach the actuator in one order,
each checkpoint signal once until it took effect, and the per-cycle inputs are measured by the driver."""

from __future__ import annotations

from collections.abc import Sequence

from sched_builders import make_fabric, make_job
from test_sharing_rules import CAL, DAY0

from gpupool.cluster import ClusterState
from gpupool.domain.calendar import parse_calendar
from gpupool.domain.events import JobEnded, JobPlaced, JobPreempted, JobStarted, JobSubmitted
from gpupool.domain.jobs import Allocation
from gpupool.domain.states import JobState
from gpupool.scheduler import NO_SHARING, Ending, Preemption, ReasonCode, Signal, Waiting
from gpupool.scheduler.driver import CycleDriver
from gpupool.scheduler.settings import SchedulerSettings, scheduler_config, sharing_policy


class Recorder:
    """An actuator that applies decisions to a ``ClusterState`` and writes down what it was asked, in order."""

    def __init__(self, state: ClusterState, *, signals_take: bool = True) -> None:
        self.state, self.signals_take = state, signals_take
        self.calls: list[tuple[str, str]] = []

    def end(self, ending: Ending, now_s: float) -> bool:
        self.calls.append(("end", ending.job_id))
        final = JobState.TIMEOUT if ending.reason is ReasonCode.TIME_LIMIT else JobState.CANCELLED
        self.state.apply(JobEnded(ending.job_id, final, now_s))
        return True

    def preempt(self, preemption: Preemption, now_s: float) -> bool:
        self.calls.append(("preempt", preemption.job_id))
        self.state.apply(JobPreempted(preemption.job_id, now_s))
        return True

    def place(self, allocation: Allocation, now_s: float) -> bool:
        self.calls.append(("place", allocation.job_id))
        self.state.apply(JobPlaced(allocation, now_s))
        self.state.apply(JobStarted(allocation.job_id, now_s))
        return True

    def signal(self, signal: Signal, now_s: float) -> bool:
        self.calls.append(("signal", signal.job_id))
        return self.signals_take

    def waiting(self, waiting: Sequence[Waiting]) -> None:
        self.calls.append(("waiting", ",".join(w.job_id for w in waiting)))


def test_a_reclaim_signals_once_then_preempts_and_places_the_owner_in_one_order() -> None:
    settings = SchedulerSettings(preemption_grace_s=600.0)
    sharing = sharing_policy(settings, calendar=parse_calendar(CAL, "pools.toml"))
    driver = CycleDriver(scheduler_config(settings), settings.usage_half_life_s)
    state = ClusterState(make_fabric(1, 4))
    act = Recorder(state)
    train = [make_job(f"t{i}", gpus=8, pool="training", preemptible=True) for i in range(4)]
    for j in train:
        state.apply(JobSubmitted(j, 0.0))
    night, opened = DAY0 + 3 * 3600, DAY0 + 8 * 3600
    run = driver.run_cycle(state.snapshot(), train, sharing, act, night)
    assert run.placed == 4 and [c[0] for c in act.calls] == ["place"] * 4 + ["waiting"]
    for at in (opened + 60, opened + 120):  # the scheduler repeats the signal every cycle: sent once
        act.calls.clear()
        driver.run_cycle(state.snapshot(), (), sharing, act, at)
        signalled = [c[1] for c in act.calls if c[0] == "signal"]
        assert signalled == (["t0", "t1"] if at == opened + 60 else [])
    act.calls.clear()
    inf = [make_job("i0", gpus=8, pool="inference", t=opened)]
    state.apply(JobSubmitted(inf[0], opened))
    run = driver.run_cycle(state.snapshot(), inf, sharing, act, opened + 600)
    assert run.preempted == 2
    assert [c[0] for c in act.calls] == ["preempt", "preempt", "waiting"]  # the owner is placed next cycle
    act.calls.clear()
    run = driver.run_cycle(state.snapshot(), inf, sharing, act, opened + 601)
    assert act.calls == [("place", "i0"), ("waiting", "")]


def test_a_signal_that_did_not_take_is_sent_again_and_usage_is_measured_each_cycle() -> None:
    settings = SchedulerSettings(preemption_grace_s=600.0, policy="fair")
    sharing = sharing_policy(settings, calendar=parse_calendar(CAL, "pools.toml"))
    driver = CycleDriver(scheduler_config(settings), settings.usage_half_life_s)
    state = ClusterState(make_fabric(1, 4))
    job = make_job("t0", gpus=8, pool="training", preemptible=True, tenant="a")
    state.apply(JobSubmitted(job, 0.0))
    night, opened = DAY0 + 3 * 3600, DAY0 + 8 * 3600
    driver.run_cycle(state.snapshot(), (job,), sharing, Recorder(state), night)
    refusing = Recorder(state, signals_take=False)
    first = driver.run_cycle(state.snapshot(), (), sharing, refusing, opened + 60)
    again = driver.run_cycle(state.snapshot(), (), sharing, refusing, opened + 61)
    assert [c for c in refusing.calls if c[0] == "signal"] == [("signal", "t0")] * 2
    # 8 GPUs held for 5 h 1 min since the first cycle: fair share's history, then 1 s more (the old decayed).
    assert first.request.inputs.usage_gpu_s["a"] == 8 * (opened + 60 - night)
    assert first.request.inputs.usage_gpu_s["a"] < again.request.inputs.usage_gpu_s["a"]


def test_endings_come_first_and_what_they_free_is_placed_by_the_next_cycle() -> None:
    settings = SchedulerSettings(time_limit_lead_s=30.0)
    driver = CycleDriver(scheduler_config(settings), settings.usage_half_life_s)
    state = ClusterState(make_fabric(1, 1))
    act = Recorder(state)
    limited = make_job("limited", gpus=8, time_limit_s=100.0)
    state.apply(JobSubmitted(limited, 0.0))
    driver.run_cycle(state.snapshot(), (limited,), NO_SHARING, act, 0.0)
    nxt = make_job("next", gpus=8, t=1.0)
    state.apply(JobSubmitted(nxt, 1.0))
    act.calls.clear()
    driver.run_cycle(state.snapshot(), (nxt,), NO_SHARING, act, 80.0)
    assert act.calls == [("signal", "limited"), ("waiting", "next")]
    act.calls.clear()
    run = driver.run_cycle(state.snapshot(), (nxt,), NO_SHARING, act, 100.0)
    assert run.ended == 1 and act.calls == [("end", "limited"), ("waiting", "next")]  # signalled already
    assert state.job_state("limited") is JobState.TIMEOUT
    act.calls.clear()
    driver.run_cycle(state.snapshot(), (nxt,), NO_SHARING, act, 101.0)
    assert act.calls == [("place", "next"), ("waiting", "")]


def test_a_job_whose_lead_no_cycle_saw_is_signalled_before_it_is_stopped() -> None:
    settings = SchedulerSettings(time_limit_lead_s=30.0)
    driver = CycleDriver(scheduler_config(settings), settings.usage_half_life_s)
    state = ClusterState(make_fabric(1, 1))
    act = Recorder(state)
    limited = make_job("limited", gpus=8, time_limit_s=100.0)
    state.apply(JobSubmitted(limited, 0.0))
    driver.run_cycle(state.snapshot(), (limited,), NO_SHARING, act, 0.0)
    act.calls.clear()
    driver.run_cycle(state.snapshot(), (), NO_SHARING, act, 500.0)  # the loop slept through the lead
    assert act.calls == [("signal", "limited"), ("end", "limited"), ("waiting", "")]
