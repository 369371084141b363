"""Allocations: a GPU is never given twice, shares of one GPU never pass 1000 milli, releases free GPUs, usage."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from gpupool.domain.errors import (
    AllocationConflictError,
    ConflictError,
    InputError,
    NotFoundError,
    StaleVersionError,
)
from gpupool.domain.jobs import Allocation, GpuShare, JobSpec, TaskAllocation
from gpupool.domain.states import JobState
from gpupool.store import Store, UsageTotal

Spec = Callable[..., JobSpec]


@pytest.fixture
def nodes(store: Store) -> Store:
    store.upsert_node("h1", gpu_model="H100", gpu_count=8, actor="agent")
    store.upsert_node("h2", gpu_model="A100", gpu_count=4, actor="agent")
    return store


def whole(job_id: str, host: str, *gpus: int) -> Allocation:
    return Allocation(job_id, (TaskAllocation(host, tuple(gpus)),))


def share(job_id: str, host: str, gpu: int, milli: int) -> Allocation:
    return Allocation(job_id, (TaskAllocation(host, (gpu,), milli_gpu=milli, gpu_memory_mib=1024),))


def _allocation_rows(store: Store) -> int:
    with store._engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM allocations")).scalar_one())


def test_allocation_places_the_job_and_is_loaded_back(nodes: Store, make_spec: Spec) -> None:
    job, _ = nodes.submit_job(make_spec("j1", gpus_per_task=2), None, actor="a")
    placed = nodes.record_allocation("j1", job.version, whole("j1", "h1", 0, 1), actor="scheduler")
    assert (placed.state, placed.version) == (JobState.PLACED, 2)
    state = nodes.load_state()
    assert state.allocations == (whole("j1", "h1", 0, 1),)
    assert [j.job_id for j in state.jobs] == ["j1"]
    event = nodes.list_audit(action="job.placed")[0]
    assert (event.actor, event.data["tasks"][0]["gpus"]) == ("scheduler", [0, 1])


def test_a_whole_gpu_already_held_is_refused_and_nothing_is_written(nodes: Store, make_spec: Spec) -> None:
    a, _ = nodes.submit_job(make_spec("a", gpus_per_task=2), None, actor="u")
    b, _ = nodes.submit_job(make_spec("b", gpus_per_task=2), None, actor="u")
    nodes.record_allocation("a", a.version, whole("a", "h1", 0, 1), actor="s")
    with pytest.raises(AllocationConflictError, match="GPU 1 of h1 is held whole") as err:
        nodes.record_allocation("b", b.version, whole("b", "h1", 1, 2), actor="s")
    assert err.value.code == "ALLOCATION_CONFLICT"
    assert isinstance(err.value, ConflictError)
    assert nodes.get_job("b") == b
    assert _allocation_rows(nodes) == 1
    # A share on a GPU held whole is refused as well.
    c, _ = nodes.submit_job(make_spec("c", share=GpuShare(100)), None, actor="u")
    with pytest.raises(AllocationConflictError):
        nodes.record_allocation("c", c.version, share("c", "h1", 0, 100), actor="s")
    # Other GPUs of the host, and the same GPU index on another host, are free.
    nodes.record_allocation("b", b.version, whole("b", "h1", 2, 3), actor="s")
    nodes.record_allocation("c", c.version, share("c", "h2", 0, 100), actor="s")


def test_fractional_shares_on_one_gpu_sum_to_at_most_1000(nodes: Store, make_spec: Spec) -> None:
    for name, milli in [("s1", 500), ("s2", 300), ("s3", 200), ("s4", 1)]:
        nodes.submit_job(make_spec(name, share=GpuShare(milli)), None, actor="u")
    nodes.record_allocation("s1", 1, share("s1", "h2", 3, 500), actor="s")
    nodes.record_allocation("s2", 1, share("s2", "h2", 3, 300), actor="s")
    nodes.record_allocation("s3", 1, share("s3", "h2", 3, 200), actor="s")  # exactly 1000: allowed
    with pytest.raises(AllocationConflictError, match="1000 milli already given; 1 more would pass 1000"):
        nodes.record_allocation("s4", 1, share("s4", "h2", 3, 1), actor="s")
    # A whole-GPU job cannot take a GPU that carries shares.
    w, _ = nodes.submit_job(make_spec("w"), None, actor="u")
    with pytest.raises(AllocationConflictError, match="1000 milli already given"):
        nodes.record_allocation("w", w.version, whole("w", "h2", 3), actor="s")
    # Releasing one share makes room again once its agent confirms the process gone (it was never reported
    # launched, but its launch may have been carried out).
    nodes.release_allocation("s2", 2, actor="s", new_state=JobState.FAILED)
    with pytest.raises(AllocationConflictError, match="1000 milli already given"):
        nodes.record_allocation("s4", 1, share("s4", "h2", 3, 1), actor="s")
    assert nodes.release_ranks("h2", ["s2.2.0"]) == 1
    nodes.record_allocation("s4", 1, share("s4", "h2", 3, 1), actor="s")


def test_two_tasks_of_one_job_may_not_share_a_whole_gpu(nodes: Store, make_spec: Spec) -> None:
    nodes.submit_job(make_spec("g", tasks=2), None, actor="u")
    alloc = Allocation("g", (TaskAllocation("h1", (5,)), TaskAllocation("h1", (5,))))
    with pytest.raises(AllocationConflictError, match="GPU 5 of h1"):
        nodes.record_allocation("g", 1, alloc, actor="s")


def test_concurrent_placements_on_one_gpu_let_exactly_one_win(nodes: Store, make_spec: Spec) -> None:
    n = 6
    for i in range(n):
        nodes.submit_job(make_spec(f"r{i}"), None, actor="u")
    barrier = threading.Barrier(n)
    outcomes: list[str] = []

    def place(i: int) -> None:
        barrier.wait()
        try:
            nodes.record_allocation(f"r{i}", 1, whole(f"r{i}", "h1", 7), actor="s")
            outcomes.append("ok")
        except AllocationConflictError:
            outcomes.append("refused")

    threads = [threading.Thread(target=place, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok"] + ["refused"] * (n - 1)
    assert _allocation_rows(nodes) == 1


def test_allocations_must_match_the_job_and_the_node(nodes: Store, make_spec: Spec) -> None:
    job, _ = nodes.submit_job(make_spec("j", gpus_per_task=2), None, actor="u")
    with pytest.raises(InputError, match="do not give 2 distinct GPUs"):
        nodes.record_allocation("j", 1, whole("j", "h1", 0), actor="s")
    with pytest.raises(InputError, match="names job 'x'"):
        nodes.record_allocation("j", 1, whole("x", "h1", 0, 1), actor="s")
    with pytest.raises(NotFoundError, match="node 'h9' is not registered"):
        nodes.record_allocation("j", 1, whole("j", "h9", 0, 1), actor="s")
    with pytest.raises(AllocationConflictError, match="h2 has no GPU 4"):
        nodes.record_allocation("j", 1, whole("j", "h2", 3, 4), actor="s")
    with pytest.raises(StaleVersionError):
        nodes.record_allocation("j", 7, whole("j", "h1", 0, 1), actor="s")
    nodes.drain_node("h1", "maintenance", actor="op")
    with pytest.raises(AllocationConflictError, match="h1 is drained"):
        nodes.record_allocation("j", 1, whole("j", "h1", 0, 1), actor="s")
    assert nodes.get_job("j") == job


def test_leaving_placed_or_running_frees_the_gpus(nodes: Store, make_spec: Spec) -> None:
    nodes.submit_job(make_spec("a"), None, actor="u")
    nodes.submit_job(make_spec("b"), None, actor="u")
    job = nodes.record_allocation("a", 1, whole("a", "h1", 0), actor="s")
    job = nodes.transition_job("a", job.version, JobState.RUNNING, "started", actor="agent")
    assert _allocation_rows(nodes) == 1  # running keeps the allocation
    job = nodes.transition_job("a", job.version, JobState.PENDING, "preempted", actor="s", reason_code="PREEMPTED")
    assert (job.state, job.reason_code) == (JobState.PENDING, "PREEMPTED")
    # No longer the job's allocation, but its rank holds the GPU (releasing) until its agent says it is gone.
    assert nodes.load_state().allocations == ()
    assert _allocation_rows(nodes) == 1
    with pytest.raises(AllocationConflictError, match="GPU 0 of h1"):
        nodes.record_allocation("b", 1, whole("b", "h1", 0), actor="s")
    assert nodes.release_ranks("h1", ["a.2.0"]) == 1
    assert _allocation_rows(nodes) == 0
    nodes.record_allocation("b", 1, whole("b", "h1", 0), actor="s")
    with pytest.raises(InputError, match="holds no allocation"):
        nodes.release_allocation("a", job.version, actor="s")


def test_usage_is_clipped_to_the_window_and_counts_shares(nodes: Store, make_spec: Spec, clock: object) -> None:
    from databases import Clock

    assert isinstance(clock, Clock)
    nodes.submit_job(make_spec("w", gpus_per_task=2, pool="p"), None, actor="u")
    nodes.submit_job(make_spec("f", share=GpuShare(250), tenant="beta"), None, actor="u")
    clock.t = 100.0
    w = nodes.record_allocation("w", 1, whole("w", "h1", 0, 1), actor="s")  # 2 GPUs from t=100
    clock.t = 150.0
    nodes.record_allocation("f", 1, share("f", "h2", 0, 250), actor="s")  # a quarter GPU from t=150
    clock.t = 300.0
    w = nodes.transition_job("w", w.version, JobState.RUNNING, "", actor="a")
    nodes.transition_job("w", w.version, JobState.FINISHED, "", actor="a")  # w ends at 300
    clock.t = 500.0  # f is still open: it counts up to now
    totals = nodes.usage(200.0, 1_000.0)
    assert totals == [
        UsageTotal("acme", "H100", "p", 2 * 100.0),  # [200, 300) on 2 GPUs
        UsageTotal("beta", "A100", "default", 0.25 * 300.0),  # [200, 500) on a quarter GPU
    ]
    assert nodes.usage(0.0, 120.0) == [UsageTotal("acme", "H100", "p", 2 * 20.0)]
    assert nodes.usage(600.0, 700.0) == []
    with pytest.raises(InputError, match="ends"):
        nodes.usage(10.0, 5.0)


def test_a_batch_stores_every_placement_that_fits_and_refuses_only_the_others(nodes: Store, make_spec: Spec) -> None:
    """One cycle's placements in one transaction: each is checked against what is stored AND the placements
    before it in the batch; a refused one stores nothing of itself and leaves the rest of the batch alone."""
    for name in ("a", "b", "c", "d", "e"):
        nodes.submit_job(make_spec(name, gpus_per_task=2), None, actor="u")
    nodes.record_allocation("e", 1, whole("e", "h2", 0, 1), actor="s")  # stored before the batch
    got = nodes.record_allocations(
        [
            ("a", 1, whole("a", "h1", 0, 1)),
            ("b", 1, whole("b", "h1", 1, 2)),  # GPU 1 given to a just before it in this batch
            ("c", 7, whole("c", "h1", 2, 3)),  # a stale version
            ("d", 1, whole("d", "h2", 1, 2)),  # GPU 1 of h2 held by e, stored before
            ("a", 1, whole("a", "h1", 4, 5)),  # the same job twice
            ("c", 1, whole("c", "h1", 2, 3)),
        ],
        actor="s",
    )
    kinds = [type(g).__name__ for g in got]
    assert kinds == [
        "JobRecord",
        "AllocationConflictError",
        "StaleVersionError",
        "AllocationConflictError",
        "StaleVersionError",
        "JobRecord",
    ]
    assert "GPU 1 of h1 is held whole" in str(got[1]) and "GPU 1 of h2 is held whole" in str(got[3])
    for rec, job in ((got[0], "a"), (got[5], "c")):
        assert isinstance(rec, type(nodes.get_job(job))) and rec == nodes.get_job(job)
        assert (rec.state, rec.version) == (JobState.PLACED, 2)
    assert {nodes.get_job(j).state for j in ("b", "d")} == {JobState.PENDING}
    assert set(nodes.load_state().allocations) == {
        whole("a", "h1", 0, 1),
        whole("c", "h1", 2, 3),
        whole("e", "h2", 0, 1),
    }
    assert sorted(e.subject for e in nodes.list_audit(action="job.placed")) == ["job/a", "job/c", "job/e"]
    assert nodes.record_allocations([], actor="s") == []


def test_a_batch_of_shares_counts_its_own_shares_on_one_gpu(nodes: Store, make_spec: Spec) -> None:
    for name, milli in [("s1", 600), ("s2", 400), ("s3", 1)]:
        nodes.submit_job(make_spec(name, share=GpuShare(milli)), None, actor="u")
    got = nodes.record_allocations(
        [(n, 1, share(n, "h2", 3, m)) for n, m in [("s1", 600), ("s2", 400), ("s3", 1)]], actor="s"
    )
    assert [type(g).__name__ for g in got] == ["JobRecord", "JobRecord", "AllocationConflictError"]
    assert "shared with 1000 milli already given" in str(got[2])


def test_a_batch_past_the_in_list_chunk_reads_every_job_and_host(store: Store, make_spec: Spec) -> None:
    """A whole cycle's placements in one write, more jobs and hosts than one ``IN`` list takes (500): every one
    is read and checked, a conflict with a placement of an earlier chunk is still refused, each GPU given once."""
    hosts = [f"n{i:03d}" for i in range(520)]
    for h in hosts:
        store.upsert_node(h, gpu_model="H100", gpu_count=2, actor="agent")
    ids = [f"j{i:03d}" for i in range(601)]
    for j in ids:
        store.submit_job(make_spec(j), None, actor="u")
    batch = [(j, 1, whole(j, hosts[i % 520], i // 520)) for i, j in enumerate(ids[:600])]
    batch.append((ids[600], 1, whole(ids[600], hosts[3], 0)))  # job 3's GPU, placed in the first chunk
    got = store.record_allocations(batch, actor="s")
    assert [type(g).__name__ for g in got] == ["JobRecord"] * 600 + ["AllocationConflictError"]
    gpus = [(t.host, g) for a in store.load_state().allocations for t in a.tasks for g in t.gpus]
    assert len(gpus) == len(set(gpus)) == 600
    assert store.get_job(ids[600]).state is JobState.PENDING
