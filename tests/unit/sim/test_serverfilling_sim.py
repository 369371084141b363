"""``sf-srpt`` and ``sf-gittins`` in the simulator, end to end on tiny traces: a large job of the prefix gets
a whole host, a short job preempts a long one at its checkpoint, and every job finishes."""

from __future__ import annotations

import pytest

from gpupool.domain.jobs import JobSpec
from gpupool.scheduler.settings import SchedulerSettings, sharing_policy
from gpupool.sim.engine import Engine
from gpupool.sim.fabrics import uniform_fabric
from gpupool.sim.world import JobRecord, SimJob, WorldConfig

WORLD = WorldConfig(launch_latency_s=0.0, exit_latency_s=0.0, restart_overhead_s=60.0, checkpoint_interval_s=1000.0)


def _job(job_id: str, t: float, gpus: int, runtime_s: float, *, know: bool) -> SimJob:
    spec = JobSpec(job_id, t, gpus_per_task=gpus, preemptible=True, estimated_runtime_s=runtime_s if know else None)
    return SimJob(spec, runtime_s)


def _run(policy: str, jobs: list[SimJob], gpus: int) -> dict[str, JobRecord]:
    res = Engine(uniform_fabric(gpus, 8), jobs, SchedulerSettings(policy=policy), WORLD).run()
    assert all(r.end_s is not None for r in res.records)  # every job finished
    return {r.job_id: r for r in res.records}


@pytest.mark.parametrize("policy", ["sf-srpt", "sf-gittins"])
def test_a_short_job_preempts_a_long_one_at_its_checkpoint(policy: str) -> None:
    know = policy == "sf-srpt"
    assert sharing_policy(SchedulerSettings(policy=policy)).preemption.max_lost_s == 60.0  # implied, as gittins
    rec = _run(policy, [_job("long", 0.0, 8, 20000.0, know=know), _job("short", 5500.0, 8, 100.0, know=know)], 8)
    # The short job is the prefix alone (SRPT: less work left; Gittins: the prior ranks like LAS): the long
    # job yields at its checkpoint at t=6000 and pays the restart, nothing else.
    assert rec["short"].start_s == 6000.0 and rec["short"].end_s == 6100.0
    assert rec["long"].preemptions == 1 and rec["long"].end_s == 20000.0 + 100.0 + 60.0


def test_sf_srpt_gives_the_large_job_a_whole_host_where_sjf_makes_it_wait() -> None:
    # 2 hosts x 8 at t=0: twelve short 1-GPU jobs, one 8-GPU job of medium work, four long 1-GPU jobs.
    def trace() -> list[SimJob]:
        shorts = [_job(f"a{i:02d}", 0.0, 1, 1000.0, know=True) for i in range(12)]
        longs = [_job(f"c{i}", 0.0, 1, 50000.0, know=True) for i in range(4)]
        return [*shorts, _job("b", 0.0, 8, 2000.0, know=True), *longs]

    sf = _run("sf-srpt", trace(), 16)
    assert sf["b"].start_s == 0.0 and sf["b"].end_s == 2000.0
    assert max(r.end_s or 0.0 for k, r in sf.items() if k.startswith("a")) == 2000.0  # 8 then 4 short jobs
    sjf = _run("sjf", trace(), 16)
    assert (sjf["b"].start_s or 0.0) >= 1000.0  # the long jobs took the GPUs beside the short ones
    assert sjf["c0"].start_s == 0.0 and (sf["c0"].start_s or 0.0) >= 1000.0  # outside the prefix: after it
