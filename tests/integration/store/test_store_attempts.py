"""Runs of a job in the store: every attempt recorded with how it ended, retries decided in the rank's
transaction by the job's retry policy, requeues that a policy counts (a lost node, a preemption), and the
usage of each run tied to it. On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from databases import Clock
from gpupool.domain.jobs import Allocation, JobSpec, RetryOn, RetryPolicy, TaskAllocation
from gpupool.domain.states import JobState
from gpupool.store import Store
from gpupool.store.ranks import RankReport

Spec = Callable[..., JobSpec]


@pytest.fixture
def nodes(store: Store) -> Store:
    store.upsert_node("h1", gpu_model="H100", gpu_count=8, actor="agent")
    store.upsert_node("h2", gpu_model="H100", gpu_count=8, actor="agent")
    return store


def place(store: Store, job_id: str) -> int:
    """Place the job's two ranks on h1 and h2; its allocation number."""
    rec = store.get_job(job_id)
    alloc = Allocation(job_id, (TaskAllocation("h1", (0,)), TaskAllocation("h2", (0,))))
    return store.record_allocation(job_id, rec.version, alloc, "scheduler").version


def confirm_gone(store: Store, job_id: str, alloc: int) -> None:
    """The agents of h1 and h2 confirm the ranks of that allocation gone: their GPUs are free again. A rank
    stopped before any report of its launch holds its GPUs until then too (its launch may have been carried
    out with the report still on its way)."""
    for rank, host in enumerate(("h1", "h2")):
        store.release_ranks(host, [f"{job_id}.{alloc}.{rank}"])


def run_and_exit(store: Store, clock: Clock, job_id: str, codes: tuple[int, int]) -> JobState | None:
    alloc = place(store, job_id)
    clock.t += 10
    for rank, host in enumerate(("h1", "h2")):
        store.record_rank(RankReport(job_id, alloc, rank, host, "running", None), "agent")
    clock.t += 100
    for rank, host in enumerate(("h1", "h2")):
        store.record_rank(RankReport(job_id, alloc, rank, host, "exited", codes[rank]), "agent")
        # The agent confirms the process gone (a rank still running when its job failed kept its GPU).
        store.release_ranks(host, [f"{job_id}.{alloc}.{rank}"])
    return store.get_job(job_id).state


def test_a_failing_job_is_retried_twice_then_fails_with_three_attempts(
    nodes: Store, clock: Clock, make_spec: Spec
) -> None:
    nodes.submit_job(make_spec("j", tasks=2, retry=RetryPolicy(2)), None, "t")
    assert run_and_exit(nodes, clock, "j", (0, 3)) is JobState.PENDING
    assert "retry 1 of 2" in nodes.get_job("j").reason
    assert run_and_exit(nodes, clock, "j", (3, 0)) is JobState.PENDING
    assert run_and_exit(nodes, clock, "j", (0, 7)) is JobState.FAILED
    job = nodes.get_job("j")
    assert job.attempt == 3 and "no retry left (2 used)" in job.reason
    attempts = nodes.attempts("j")
    assert [(a.attempt, a.state, a.exit_code) for a in attempts] == [
        (1, "failed", 3),
        (2, "failed", 3),
        (3, "failed", 7),
    ]
    assert all(a.hosts == ("h1", "h2") and a.milli_gpu == 2000 and a.gpu_model == "H100" for a in attempts)
    assert all(a.ended_s is not None and a.started_s is not None and a.ended_s - a.started_s == 100 for a in attempts)
    # Each run's GPU time is its own: 2 GPUs x 110 s (placed to ended), three times.
    assert sum(u.gpu_seconds for u in nodes.usage(0, clock.t + 1)) == pytest.approx(3 * 2 * 110)


def test_a_success_ends_the_retries_and_a_job_without_a_policy_fails_at_once(
    nodes: Store, clock: Clock, make_spec: Spec
) -> None:
    nodes.submit_job(make_spec("r", tasks=2, retry=RetryPolicy(5)), None, "t")
    nodes.submit_job(make_spec("plain", tasks=2), None, "t")
    assert run_and_exit(nodes, clock, "r", (1, 0)) is JobState.PENDING
    assert run_and_exit(nodes, clock, "r", (0, 0)) is JobState.FINISHED
    assert [(a.state, a.exit_code) for a in nodes.attempts("r")] == [("failed", 1), ("finished", 0)]
    assert run_and_exit(nodes, clock, "plain", (0, 2)) is JobState.FAILED
    assert [a.state for a in nodes.attempts("plain")] == ["failed"]


def test_a_lost_rank_is_retried_only_when_the_policy_names_node_lost(
    nodes: Store, clock: Clock, make_spec: Spec
) -> None:
    nodes.submit_job(make_spec("lost", tasks=2, retry=RetryPolicy(1, frozenset({RetryOn.NODE_LOST}))), None, "t")
    nodes.submit_job(make_spec("exits", tasks=2, retry=RetryPolicy(1, frozenset({RetryOn.NODE_LOST}))), None, "t")
    alloc = place(nodes, "lost")
    out = nodes.record_rank(RankReport("lost", alloc, 1, "h2", "lost", None), "agent")
    assert out.state is JobState.PENDING
    assert nodes.attempts("lost")[0].state == "node_lost"
    confirm_gone(nodes, "lost", alloc)  # rank 0, never reported launched, held h1's GPU 0 until now
    assert run_and_exit(nodes, clock, "exits", (0, 1)) is JobState.FAILED  # a failure is not a cause it names


def test_requeues_are_free_unless_the_policy_counts_them(nodes: Store, clock: Clock, make_spec: Spec) -> None:
    counted = RetryPolicy(1, frozenset({RetryOn.PREEMPTION}))
    nodes.submit_job(make_spec("free", tasks=2), None, "t")
    nodes.submit_job(make_spec("counted", tasks=2, retry=counted), None, "t")
    for _ in range(3):  # a job without a policy is requeued however often it is preempted
        alloc = place(nodes, "free")
        rec = nodes.release_allocation("free", nodes.get_job("free").version, "scheduler", cause=RetryOn.PREEMPTION)
        assert rec.state is JobState.PENDING
        confirm_gone(nodes, "free", alloc)
    assert [a.state for a in nodes.attempts("free")] == ["preempted"] * 3
    alloc = place(nodes, "counted")
    rec = nodes.release_allocation(
        "counted", nodes.get_job("counted").version, "s", reason="x", cause=RetryOn.PREEMPTION
    )
    assert rec.state is JobState.PENDING and "retry 1 of 1" in rec.reason
    confirm_gone(nodes, "counted", alloc)
    place(nodes, "counted")
    rec = nodes.release_allocation(
        "counted", nodes.get_job("counted").version, "s", reason="x", cause=RetryOn.PREEMPTION
    )
    assert rec.state is JobState.FAILED and "no retry left" in rec.reason
    assert [a.state for a in nodes.attempts("counted")] == ["preempted", "preempted"]
