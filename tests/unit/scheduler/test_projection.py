"""The forward projection of expected starts (``scheduler.projection``) and its runtime estimates
(``scheduler.estimates``): the live state run forward through the production cycle, unknown where nothing
says when a job ends, never a made-up time."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sched_builders import make_fabric, make_job

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobEnded, JobPlaced, JobStarted, JobSubmitted, RanksReleasing
from gpupool.domain.jobs import Allocation, JobSpec, TaskAllocation
from gpupool.domain.states import JobState
from gpupool.scheduler import NO_SHARING, SchedulerConfig
from gpupool.scheduler.estimates import NO_HISTORY, RuntimeHistory, expected_runtime_s
from gpupool.scheduler.projection import ProjectionConfig, ProjectionInput, project

NOW = 1_000.0
EXIT, LAUNCH = 0.5, 0.25
CFG = ProjectionConfig(launch_latency_s=LAUNCH, exit_latency_s=EXIT, step_fraction=0.0)


def one_host() -> ClusterState:
    return ClusterState(make_fabric(leaves=1, hosts_per_leaf=1, gpus=8))


def host_name(state: ClusterState) -> str:
    return state.index.fabric.hosts[0].name


def running(state: ClusterState, spec: JobSpec, gpus: tuple[int, ...], started: float | None) -> None:
    state.apply(JobSubmitted(spec, 0.0))
    state.apply(JobPlaced(Allocation(spec.job_id, (TaskAllocation(host_name(state), gpus),)), 0.0))
    if started is not None:
        state.apply(JobStarted(spec.job_id, started))


def queue(state: ClusterState, *specs: JobSpec) -> None:
    for s in specs:
        state.apply(JobSubmitted(s, s.submit_time_s))


def inp(state: ClusterState, now: float = NOW, policy: str = "fifo", **kw: object) -> ProjectionInput:
    snap = state.snapshot()
    return ProjectionInput(snap, snap.pending, now, SchedulerConfig(policy=policy), NO_SHARING, **kw)  # type: ignore[arg-type]


def test_an_empty_cluster_starts_a_job_now_plus_the_launch_latency() -> None:
    state = one_host()
    queue(state, make_job("a", gpus=4))
    p = project(inp(state), config=CFG)
    assert p.starts == {"a": NOW + LAUNCH}
    assert p.stopped == "done"
    assert p.cycles == 1


def test_a_job_behind_a_running_job_starts_at_its_expected_end() -> None:
    """The end is its start plus its estimate; its GPUs are free an exit latency later, the next job starts a
    launch latency after that."""
    state = one_host()
    running(state, make_job("r", gpus=8, estimated_runtime_s=600.0), tuple(range(8)), started=700.0)
    queue(state, make_job("w", gpus=8, t=900.0))
    p = project(inp(state), config=CFG)
    assert p.starts["w"] == pytest.approx(700.0 + 600.0 + EXIT + LAUNCH)


def test_jobs_placed_on_the_way_hold_their_gpus_for_their_own_estimate() -> None:
    state = one_host()
    running(state, make_job("r", gpus=8, estimated_runtime_s=100.0), tuple(range(8)), started=NOW)
    queue(
        state, make_job("a", gpus=8, t=1.0, estimated_runtime_s=50.0), make_job("b", gpus=8, t=2.0, time_limit_s=30.0)
    )
    queue(state, make_job("c", gpus=4, t=3.0))
    p = project(inp(state), config=CFG)
    a = NOW + 100.0 + EXIT + LAUNCH
    b = a + 50.0 + EXIT + LAUNCH
    assert p.starts == pytest.approx({"a": a, "b": b, "c": b + 30.0 + EXIT + LAUNCH})


def test_a_job_behind_a_job_with_no_estimate_has_no_expected_start() -> None:
    """Nothing says when the running job ends: the waiting job's start is unknown (None), not a guess; a job
    that fits beside it is still projected."""
    state = one_host()
    running(state, make_job("r", gpus=6), tuple(range(6)), started=500.0)
    queue(state, make_job("big", gpus=4, t=1.0), make_job("small", gpus=2, t=2.0))
    p = project(inp(state, policy="fifo"), config=CFG)
    assert p.starts == {"big": None, "small": NOW + LAUNCH}
    assert p.stopped == "idle"


def test_a_placed_job_not_yet_started_counts_from_its_launch() -> None:
    state = one_host()
    running(state, make_job("r", gpus=8, estimated_runtime_s=60.0), tuple(range(8)), started=None)
    queue(state, make_job("w", gpus=8, t=1.0))
    p = project(inp(state, now=0.0), config=CFG)  # placed at 0, starts at LAUNCH
    assert p.starts["w"] == pytest.approx(LAUNCH + 60.0 + EXIT + LAUNCH)


def test_releasing_ranks_hold_their_gpus_until_an_exit_latency_from_now() -> None:
    state = one_host()
    running(state, make_job("old", gpus=8), tuple(range(8)), started=10.0)
    held = state.snapshot().running["old"].allocation
    state.apply(JobEnded("old", JobState.CANCELLED, 20.0))
    state.apply(RanksReleasing(held, 20.0))
    queue(state, make_job("w", gpus=8, t=30.0))
    no_release = project(inp(state), config=CFG)
    assert no_release.starts["w"] is None  # without being told they are releasing, nothing frees them
    p = project(inp(state, releasing=state.releasing), config=CFG)
    assert p.starts["w"] == pytest.approx(NOW + EXIT + LAUNCH)


def test_past_the_horizon_or_the_cycle_bound_the_start_is_unknown() -> None:
    state = one_host()
    running(state, make_job("r", gpus=8, estimated_runtime_s=10 * 86400.0), tuple(range(8)), started=NOW)
    queue(state, make_job("w", gpus=8, t=1.0))
    p = project(inp(state), config=CFG)
    assert (p.starts["w"], p.stopped) == (None, "horizon")
    far = project(inp(state), config=replace(CFG, horizon_s=11 * 86400.0))
    assert far.starts["w"] == pytest.approx(NOW + 10 * 86400.0 + EXIT + LAUNCH)
    capped = project(inp(state), config=replace(CFG, horizon_s=11 * 86400.0, max_cycles=1))
    assert (capped.starts["w"], capped.stopped, capped.cycles) == (None, "cycles", 1)


def test_the_policy_decides_who_goes_first() -> None:
    """The projection runs the configured policy: sjf starts the short job first, fifo the old one."""
    state = one_host()
    running(state, make_job("r", gpus=8, estimated_runtime_s=100.0), tuple(range(8)), started=NOW)
    queue(state, make_job("long", gpus=8, t=1.0, estimated_runtime_s=500.0))
    queue(state, make_job("short", gpus=8, t=2.0, estimated_runtime_s=50.0))
    free = NOW + 100.0 + EXIT + LAUNCH
    fifo = project(inp(state, policy="fifo"), config=CFG)
    sjf = project(inp(state, policy="sjf"), config=CFG)
    assert fifo.starts == pytest.approx({"long": free, "short": free + 500.0 + EXIT + LAUNCH})
    assert sjf.starts == pytest.approx({"short": free, "long": free + 50.0 + EXIT + LAUNCH})


def test_the_same_input_gives_the_same_projection_and_leaves_the_live_state_alone() -> None:
    state = one_host()
    running(state, make_job("r", gpus=4, estimated_runtime_s=300.0), (0, 1, 2, 3), started=NOW - 10)
    queue(state, *(make_job(f"j{i}", gpus=1 + i % 4, t=float(i), estimated_runtime_s=30.0 + i) for i in range(12)))
    before = state.snapshot()
    first, second = project(inp(state), config=CFG), project(inp(state), config=CFG)
    assert first == second
    assert state.snapshot() is before  # the live state saw no event
    assert all(v is not None for v in first.starts.values())


def test_only_the_given_queue_is_projected() -> None:
    """A job the loop does not schedule (its stored state moved on) neither gets a start nor takes GPUs."""
    state = one_host()
    queue(state, make_job("gone", gpus=8, t=1.0, estimated_runtime_s=100.0), make_job("w", gpus=8, t=2.0))
    snap = state.snapshot()
    p = project(ProjectionInput(snap, snap.pending[1:], NOW, SchedulerConfig(policy="fifo"), NO_SHARING), config=CFG)
    assert p.starts == {"w": NOW + LAUNCH}


def test_estimates_come_from_the_estimate_then_the_history_then_the_time_limit() -> None:
    hist = RuntimeHistory.of(
        [("t", "train", 100.0), ("t", "train", 200.0), ("t", "train", 5000.0)] + [("t", "x", 40.0)] * 3
    )
    job = make_job("a", tenant="t", name="train")
    assert expected_runtime_s(replace(job, estimated_runtime_s=300.0), 0.0, hist) == 300.0
    # Past its estimate, the history of longer runs answers: the median of those that outlasted 350 s.
    assert expected_runtime_s(replace(job, estimated_runtime_s=300.0), 350.0, hist) is None  # 1 run < 3 samples
    assert expected_runtime_s(job, 0.0, hist) == 200.0
    assert expected_runtime_s(job, 150.0, hist) is None  # 2 runs outlasted 150 s, under this name or the tenant
    assert expected_runtime_s(job, 50.0, hist) == 200.0
    assert expected_runtime_s(replace(job, name="other"), 0.0, hist) == 70.0  # ... the tenant's 6 runs' median
    assert expected_runtime_s(replace(job, time_limit_s=150.0), 0.0, hist) == 150.0  # capped by the limit
    assert expected_runtime_s(replace(job, tenant="new", time_limit_s=900.0), 0.0, hist) == 900.0
    assert expected_runtime_s(replace(job, tenant="new"), 0.0, hist) is None
    assert expected_runtime_s(replace(job, tenant="new"), 0.0, NO_HISTORY) is None


def test_the_history_of_a_workload_gives_a_running_job_its_expected_end() -> None:
    state = one_host()
    spec = make_job("r", gpus=8, tenant="t", name="train")
    running(state, spec, tuple(range(8)), started=NOW - 50.0)
    queue(state, make_job("w", gpus=8, t=1.0))
    hist = RuntimeHistory.of([("t", "train", s) for s in (30.0, 120.0, 130.0, 140.0)])
    p = project(inp(state), hist, CFG)
    assert p.starts["w"] == pytest.approx(NOW - 50.0 + 130.0 + EXIT + LAUNCH)


def test_cycles_are_a_step_fraction_of_the_lead_apart() -> None:
    """Ends 0.5 s apart, 1,000 s ahead: with 1% steps the first end gets its cycle, the next seven are folded
    into one cycle 10 s later (each start at most 1% of its lead late); without, one cycle per end."""
    state = one_host()
    for g in range(8):
        running(state, make_job(f"r{g}", gpus=1, estimated_runtime_s=1000.0 + 0.5 * g), (g,), started=NOW)
    queue(state, *(make_job(f"q{i}", gpus=1, t=float(i)) for i in range(8)))
    exact = project(inp(state), config=CFG)
    coarse = project(inp(state), config=replace(CFG, step_fraction=0.01))
    assert (exact.cycles, coarse.cycles) == (9, 3)
    first = NOW + 1000.0 + EXIT
    assert coarse.starts["q0"] == exact.starts["q0"] == pytest.approx(first + LAUNCH)
    for job, start in coarse.starts.items():
        lead = exact.starts[job] - NOW  # type: ignore[operator]
        assert exact.starts[job] <= start <= exact.starts[job] + 0.01 * lead  # type: ignore[operator]
    assert coarse.starts["q7"] == pytest.approx(first + 0.01 * (first - NOW) + LAUNCH)
