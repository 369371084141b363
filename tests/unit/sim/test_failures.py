"""Failure traces: parsing with file and line on every problem, and failures applied at their times."""

from __future__ import annotations

import pytest

from gpupool.domain.errors import ParseError
from gpupool.domain.jobs import JobSpec
from gpupool.scheduler.settings import SchedulerSettings
from gpupool.sim.engine import Engine
from gpupool.sim.fabrics import uniform_fabric
from gpupool.sim.failures import FailureEvent, FailureKind, parse_failures
from gpupool.sim.world import FailureRates, SimJob, WorldConfig

FAB = uniform_fabric(16, 8)
WORLD = WorldConfig(
    launch_latency_s=0.0, exit_latency_s=0.0, checkpoint_interval_s=0.0, failures=FailureRates(repair_s=500.0)
)


def test_parse_sorts_by_time_and_skips_header_comments_and_blanks() -> None:
    text = "time_s,kind,host,gpu\n# a comment\n\n300,host,node002\n100.5,gpu,node001,7  # XID 79\n200,LEAF,node001\n"
    got = parse_failures(text, "f.csv", FAB)
    assert got == (
        FailureEvent(100.5, FailureKind.GPU, 0, 7),
        FailureEvent(200.0, FailureKind.LEAF, 0),
        FailureEvent(300.0, FailureKind.HOST, 1),
    )


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("x,host,node001", "not a number"),
        ("-5,host,node001", ">= 0"),
        ("10,fire,node001", "unknown kind"),
        ("10,host,node009", "unknown host"),
        ("10,gpu,node001", "GPU index from 0 to 7"),
        ("10,gpu,node001,8", "GPU index from 0 to 7"),
        ("10,host,node001,3", "only gpu failures"),
        ("10,host", "expected time_s,kind,host"),
    ],
)
def test_bad_lines_name_the_file_and_line(line: str, says: str) -> None:
    with pytest.raises(ParseError) as e:
        parse_failures(f"1,host,node002\n{line}\n", "f.csv", FAB)
    assert says in str(e.value) and e.value.line == 2 and e.value.source == "f.csv"


def run(failures: tuple[FailureEvent, ...]) -> dict[str, object]:
    jobs = [SimJob(JobSpec("a", 0.0, gpus_per_task=8), 1000.0), SimJob(JobSpec("b", 0.0, gpus_per_task=8), 1000.0)]
    res = Engine(FAB, jobs, SchedulerSettings(policy="fifo", placer="topology"), WORLD, failure_trace=failures).run()
    assert res.failures == len(failures)
    return {r.job_id: r for r in res.records}


def test_a_lost_host_requeues_its_job_which_waits_for_the_repair() -> None:
    r = run(parse_failures("400,host,node001\n", "f.csv", FAB))
    hit = [x for x in r.values() if x.preemptions]  # type: ignore[attr-defined]
    assert len(hit) == 1
    # Checkpointed continuously: it resumes the remaining 600 s after the repair at 900 s and a restart.
    assert hit[0].end_s == 400.0 + 500.0 + 60.0 + 600.0  # type: ignore[attr-defined]


def test_a_failed_gpu_preempts_only_the_job_on_it() -> None:
    r = run(parse_failures("400,gpu,node002,3\n", "f.csv", FAB))
    assert sorted(x.preemptions for x in r.values()) == [0, 1]  # type: ignore[attr-defined]
