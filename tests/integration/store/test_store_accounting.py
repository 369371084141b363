"""Accounting records in the store, on SQLite and PostgreSQL: one per run of a job (a retried job has three),
each with its GPU time clipped to the window, summing to the window's usage whatever the window; a tenant
filter and paging."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import pytest

from databases import Clock
from gpupool.domain.errors import InputError
from gpupool.domain.jobs import Allocation, JobSpec, RetryPolicy, TaskAllocation
from gpupool.store import Store
from gpupool.store.ranks import RankReport

Spec = Callable[..., JobSpec]


@pytest.fixture
def nodes(store: Store) -> Store:
    store.upsert_node("h1", gpu_model="H100", gpu_count=8, actor="agent")
    store.upsert_node("h2", gpu_model="A100", gpu_count=8, actor="agent")
    return store


def run(store: Store, clock: Clock, job_id: str, host: str, gpus: tuple[int, ...], seconds: float, code: int) -> None:
    rec = store.get_job(job_id)
    alloc = store.record_allocation(job_id, rec.version, Allocation(job_id, (TaskAllocation(host, gpus),)), "s")
    clock.t += 5
    store.record_rank(RankReport(job_id, alloc.version, 0, host, "running", None), "agent")
    clock.t += seconds
    store.record_rank(RankReport(job_id, alloc.version, 0, host, "exited", code), "agent")
    store.release_ranks(host, [f"{job_id}.{alloc.version}.0"])


def test_records_are_runs_and_sum_to_usage_in_any_window(nodes: Store, clock: Clock, make_spec: Spec) -> None:
    clock.t = 1000.0
    nodes.submit_job(make_spec("retried", retry=RetryPolicy(2), gpus_per_task=2), None, "alice")
    nodes.submit_job(make_spec("other", tenant="beta"), None, "bob")
    nodes.submit_job(make_spec("open", gpus_per_task=4), None, "alice")
    for _ in range(3):
        run(nodes, clock, "retried", "h1", (0, 1), 100.0, 1)
        clock.t += 20
    run(nodes, clock, "other", "h2", (0,), 50.0, 0)
    nodes.record_allocation(
        "open", nodes.get_job("open").version, Allocation("open", (TaskAllocation("h1", (2, 3, 4, 5)),)), "s"
    )
    clock.t += 300  # "open" still holds its 4 GPUs: counted up to now
    recs = nodes.accounting(0.0, clock.t + 1)
    assert [(r.run.job_id, r.run.attempt, r.run.state, r.run.exit_code) for r in recs] == [
        ("retried", 1, "failed", 1), ("retried", 2, "failed", 1), ("retried", 3, "failed", 1),
        ("other", 1, "finished", 0), ("open", 1, "placed", None),
    ]  # fmt: skip
    assert recs[0].user == "alice" and recs[0].run.hosts == ("h1",) and recs[0].run.milli_gpu == 2000
    assert recs[3].run.gpu_model == "A100" and recs[3].run.tenant == "beta"
    for window in [(0.0, clock.t + 1), (1050.0, 1200.0), (1100.0, clock.t - 100), (clock.t - 10, clock.t + 5)]:
        by_key: dict[tuple[str, str, str], float] = defaultdict(float)
        for r in nodes.accounting(*window):
            by_key[(r.run.tenant, r.run.gpu_model, r.run.pool)] += r.gpu_seconds
        usage = {(u.tenant, u.gpu_model, u.pool): u.gpu_seconds for u in nodes.usage(*window)}
        assert set(usage) <= set(by_key)
        for k, v in by_key.items():
            assert v == pytest.approx(usage.get(k, 0.0)), (window, k)
    assert sum(r.gpu_seconds for r in nodes.accounting(1050.0, 1200.0)) > 0  # the window cuts into runs


def test_tenant_filter_paging_and_bad_pages(nodes: Store, clock: Clock, make_spec: Spec) -> None:
    clock.t = 10.0
    for i in range(5):
        nodes.submit_job(make_spec(f"j{i}", tenant="beta" if i % 2 else "acme"), None, "u")
        run(nodes, clock, f"j{i}", "h1", (0,), 10.0, 0)
    assert [r.run.job_id for r in nodes.accounting(0, 1e6, "beta")] == ["j1", "j3"]
    pages = [nodes.accounting(0, 1e6, offset=o, limit=2) for o in (0, 2, 4)]
    assert [[r.run.job_id for r in p] for p in pages] == [["j0", "j1"], ["j2", "j3"], ["j4"]]
    with pytest.raises(InputError, match="a page has"):
        nodes.accounting(0, 1e6, limit=0)
    with pytest.raises(InputError, match="a page has"):  # schemathesis: 2**63 overflowed SQLite's OFFSET
        nodes.accounting(0, 1e6, offset=2**63)
    with pytest.raises(InputError, match="ends"):
        nodes.accounting(10.0, 5.0)
