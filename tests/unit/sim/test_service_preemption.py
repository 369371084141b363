"""Tiresias' preemption by attained service in the simulator: the options reach the scheduler, and a short
job arriving behind a long one on a full cluster runs before it ends."""

from __future__ import annotations

from gpupool.domain.jobs import JobSpec
from gpupool.scheduler.settings import SchedulerSettings, sharing_policy
from gpupool.sim.engine import Engine
from gpupool.sim.fabrics import uniform_fabric
from gpupool.sim.world import SimJob, WorldConfig

WORLD = WorldConfig(launch_latency_s=0.0, exit_latency_s=0.0, restart_overhead_s=60.0, checkpoint_interval_s=1000.0)


def test_by_service_and_max_lost_reach_the_preemption_config() -> None:
    pol = sharing_policy(SchedulerSettings(preemption_by_service=True, max_lost_s=600.0))
    assert pol.preemption.by_service and pol.preemption.max_lost_s == 600.0
    plain = sharing_policy(SchedulerSettings())
    assert not plain.preemption.by_service and plain.preemption.max_lost_s is None
    # A preemptive policy implies it, sparing victims with more than a minute since their checkpoint.
    implied = sharing_policy(SchedulerSettings(policy="gittins"))
    assert implied.preemption.by_service and implied.preemption.max_lost_s == 60.0
    assert not sharing_policy(SchedulerSettings(policy="gittins", preemption=False)).preemption.enabled


def _records(settings: SchedulerSettings) -> dict[str, float]:
    jobs = [
        SimJob(JobSpec("long", 0.0, gpus_per_task=8, preemptible=True), 20000.0),
        SimJob(JobSpec("short", 5000.0, gpus_per_task=8, preemptible=True), 100.0),
    ]
    res = Engine(uniform_fabric(8, 8), jobs, settings, WORLD).run()
    return {r.job_id: r.end_s for r in res.records if r.end_s is not None}


def test_a_short_job_preempts_a_long_one_in_a_higher_las_queue() -> None:
    without = _records(SchedulerSettings(policy="las"))
    assert without["short"] > 20000.0  # waits for the long job: LAS alone cannot preempt within a class
    with_service = _records(SchedulerSettings(policy="las", preemption_by_service=True))
    assert with_service["short"] < 6000.0
    assert with_service["long"] > 20000.0  # it restarted from its checkpoint and paid the restart


def test_gittins_preempts_at_the_victims_checkpoint_and_learns_from_completions() -> None:
    jobs = [
        SimJob(JobSpec("long", 0.0, gpus_per_task=8, preemptible=True), 20000.0),
        SimJob(JobSpec("short", 5500.0, gpus_per_task=8, preemptible=True), 100.0),
    ]
    engine = Engine(uniform_fabric(8, 8), jobs, SchedulerSettings(policy="gittins", max_lost_s=0.0), WORLD)
    res = engine.run()
    rec = {r.job_id: r for r in res.records}
    # The prior alone (nothing finished yet) ranks like LAS; the long job yields at its checkpoint at t=6000,
    # losing no work: only the restart overhead is charged.
    assert rec["short"].start_s == 6000.0 and rec["short"].end_s == 6100.0
    assert rec["long"].preemptions == 1 and rec["long"].lost_gpu_s == 60.0 * 8
    assert rec["long"].end_s == 20000.0 + 100.0 + 60.0
    assert engine.driver.history is not None
    hist = engine.driver.history.history()
    assert hist.counts[8] == 2  # both completions, with their service in GPU-seconds
