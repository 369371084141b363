"""The sharing rules in the simulator: priority preemption with checkpoints, calendar reclaims with a
CHECKPOINT signal before the preemption."""

from __future__ import annotations

from gpupool.domain.calendar import Calendar, parse_calendar
from gpupool.domain.jobs import JobSpec, PriorityClass
from gpupool.scheduler.settings import SchedulerSettings
from gpupool.sim.engine import Engine
from gpupool.sim.fabrics import uniform_fabric
from gpupool.sim.world import SimJob, WorldConfig

WORLD = WorldConfig(launch_latency_s=0.0, exit_latency_s=0.0, restart_overhead_s=60.0, checkpoint_interval_s=1000.0)


def job(i: str, submit: float, dur: float, gpus: int, *, prio: PriorityClass = PriorityClass.NORMAL, pool: str = "default",
        preemptible: bool = True) -> SimJob:  # fmt: skip
    return SimJob(JobSpec(i, submit, gpus_per_task=gpus, priority=prio, pool=pool, preemptible=preemptible), dur)


def run(jobs: list[SimJob], settings: SchedulerSettings, calendar: Calendar | None = None) -> dict[str, object]:
    res = Engine(uniform_fabric(8, 8), jobs, settings, WORLD, calendar=calendar).run()
    return {r.job_id: r for r in res.records}


def test_a_high_priority_job_preempts_and_the_victim_loses_only_work_since_its_checkpoint() -> None:
    jobs = [job("low", 0.0, 5000.0, 8), job("high", 2500.0, 100.0, 8, prio=PriorityClass.HIGH)]
    r = run(jobs, SchedulerSettings())
    low, high = r["low"], r["high"]
    assert low.preemptions == 1 and high.start_s is not None and high.start_s < 2600.0  # type: ignore[attr-defined]
    # Checkpointed at t=2000: 500 s of 8 GPUs lost plus the restart overhead; the rest resumes after "high".
    assert low.lost_gpu_s == (500.0 + 60.0) * 8  # type: ignore[attr-defined]
    assert low.end_s == high.end_s + 60.0 + (5000.0 - 2000.0)  # type: ignore[attr-defined]


def test_without_preemption_the_high_priority_job_waits() -> None:
    jobs = [job("low", 0.0, 5000.0, 8), job("high", 2500.0, 100.0, 8, prio=PriorityClass.HIGH)]
    r = run(jobs, SchedulerSettings(preemption=False))
    assert r["low"].preemptions == 0 and r["high"].start_s == 5000.0  # type: ignore[attr-defined]


CALENDAR = """
timezone = "UTC"
default_pool = "training"

[[pool]]
name = "inference"
hosts = ["node001"]
share = 1.0
share_outside = 0.0
windows = [{ days = "mon-sun", start = "08:00", end = "20:00" }]
"""


def test_a_window_opening_signals_a_checkpoint_then_preempts_the_borrower_after_the_grace() -> None:
    cal = parse_calendar(CALENDAR, "cal.toml")
    world = WorldConfig(launch_latency_s=0.0, exit_latency_s=0.0, restart_overhead_s=60.0, checkpoint_interval_s=5000.0)
    # t=0 is 00:00 UTC: the host is training's until 08:00 (t=28,800), when inference takes it back.
    jobs = [job("train", 0.0, 40000.0, 8, pool="training")]
    ends = {}
    for lend in (True, False):
        settings = SchedulerSettings(lend_pools=lend)
        res = Engine(uniform_fabric(8, 8), jobs, settings, world, calendar=cal)
        (tr,) = res.run().records
        assert tr.preemptions == 1
        # Checkpointed when signalled at 28,800 (its own last one was at 25,000); preempted 300 s later.
        assert tr.lost_gpu_s == (300.0 + 60.0) * 8
        ends[lend] = tr.end_s
    # Lending: the idle inference host takes it back at once. Without: it waits for 20:00 (t=72,000).
    assert ends[True] == 29100.0 + 60.0 + (40000.0 - 28800.0)
    assert ends[False] == 72000.0 + 60.0 + (40000.0 - 28800.0)


def test_an_owner_job_reclaims_its_lent_host_after_the_grace() -> None:
    cal = parse_calendar(CALENDAR, "cal.toml")
    jobs = [job("train", 0.0, 40000.0, 8, pool="training"), job("serve", 30000.0, 3600.0, 8, pool="inference",
            prio=PriorityClass.HIGH, preemptible=False)]  # fmt: skip
    r = run(jobs, SchedulerSettings(), cal)
    # Training is back on the idle inference host after the window opened (t=29,100); the service reclaims
    # it with a CHECKPOINT signal and starts when the grace counted from its submission ends.
    assert r["serve"].start_s == 30000.0 + 300.0  # type: ignore[attr-defined]
    assert r["train"].preemptions == 2  # type: ignore[attr-defined]


def test_services_keep_their_hosts_past_a_closing_window_with_a_demand_target() -> None:
    cal = parse_calendar(CALENDAR.replace('default_pool = "training"', 'default_pool = "default"'), "cal.toml")
    # A replica from 19:00 (t=68,400) for two hours: the window closes under it at 20:00 (t=72,000).
    serve = SimJob(JobSpec("serve", 68400.0, pool="inference", priority=PriorityClass.HIGH), 7200.0, "inference")
    fab, settings = uniform_fabric(16, 8), SchedulerSettings(lend_pools=False)
    (plain,) = Engine(fab, [serve], settings, WORLD, calendar=cal).run().records
    (kept,) = Engine(fab, [serve], settings, WORLD, calendar=cal, demand_headroom_gpus=0).run().records
    # A service is never reclaimed (brief I4): its host went back to the default pool, yet it runs to its end.
    assert plain.preemptions == 0 and plain.end_s == 68400.0 + 7200.0
    assert kept.preemptions == 0 and kept.end_s == 68400.0 + 7200.0
