"""The jobs list in the store (``job_page``): filters, search, every sort, offset pages with a total, each job's
current run, and ranks (``job_ranks``). On SQLite and PostgreSQL: the same answers from both."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from databases import Clock
from gpupool.domain.errors import InputError
from gpupool.domain.jobs import Allocation, GpuShare, JobSpec, TaskAllocation
from gpupool.domain.states import JobState
from gpupool.store import Store
from gpupool.store.joblist import JobQuery, JobSort
from gpupool.store.ranks import RankReport
from gpupool.store.rows import JobRow
from gpupool.store.server_ops import ServerOps, Submission

Spec = Callable[..., JobSpec]


def ids(store: Store, **kw: object) -> list[str]:
    return [j.record.job_id for j in store.job_page(JobQuery(**kw)).jobs]  # type: ignore[arg-type]


@pytest.fixture
def jobs(store: Store, clock: Clock, make_spec: Spec) -> Store:
    """Six jobs: j0 (oldest) .. j5 (newest). j1 runs on h1 (2 GPUs, started at 1010), j2 finished (exit 0 after
    30 s), j3 cancelled, j0, j4 and j5 pending; names mixed case; j4 is beta's in pool p2."""
    store.upsert_node("h1", gpu_model="H100", gpu_count=8, actor="agent")
    names = ["Train-Alpha", "train-beta", "eval_gamma", "train%delta", "serve", "TRAIN-zeta"]
    for i, name in enumerate(names):
        kw: dict[str, object] = {"name": name, "submit_time_s": 100.0 + i, "gpus_per_task": i + 1}
        if i == 4:
            kw.update(tenant="beta", pool="p2", share=GpuShare(250, 0), gpus_per_task=1)
        store.submit_job(make_spec(f"j{i}", **kw), None, actor="a")
    for job_id, gpus in (("j1", (0, 1)), ("j2", (2, 3, 4))):
        rec = store.get_job(job_id)
        v = store.record_allocation(job_id, rec.version, Allocation(job_id, (TaskAllocation("h1", gpus),)), "s").version
        clock.t = 1_010.0
        store.record_rank(RankReport(job_id, v, 0, "h1", "running", None), "agent")
    clock.t = 1_040.0
    store.record_rank(RankReport("j2", 2, 0, "h1", "exited", 0), "agent")
    store.release_ranks("h1", ["j2.2.0"])
    store.transition_job("j3", 1, JobState.CANCELLED, "cancelled", actor="a")
    clock.t = 1_100.0
    return store


def test_default_order_is_active_first_newest_first_and_pages_cover_it_once(jobs: Store) -> None:
    assert ids(jobs) == ["j5", "j4", "j1", "j0", "j3", "j2"]
    assert ids(jobs, descending=False) == ["j0", "j1", "j4", "j5", "j2", "j3"]
    pages = [jobs.job_page(JobQuery(limit=4, offset=o)) for o in (0, 4, 8)]
    assert [j.record.job_id for p in pages for j in p.jobs] == ["j5", "j4", "j1", "j0", "j3", "j2"]
    assert [p.total for p in pages] == [6, 6, 6]


def test_filters_combine_and_total_counts_every_match(jobs: Store) -> None:
    assert ids(jobs, states=frozenset({JobState.PENDING})) == ["j5", "j4", "j0"]
    assert ids(jobs, states=frozenset({JobState.CANCELLED, JobState.FINISHED})) == ["j3", "j2"]
    assert ids(jobs, active=True) == ["j5", "j4", "j1", "j0"]
    assert ids(jobs, active=False) == ["j3", "j2"]
    assert ids(jobs, tenant="beta") == ["j4"]
    assert ids(jobs, pool="p2") == ["j4"]
    assert ids(jobs, submitted_after=101.0, submitted_before=104.0) == ["j1", "j3", "j2"]
    page = jobs.job_page(JobQuery(tenant="acme", limit=1))
    assert (len(page.jobs), page.total) == (1, 5)


def test_search_is_a_case_insensitive_part_of_the_name_or_the_start_of_the_id(jobs: Store) -> None:
    assert ids(jobs, text="train") == ["j5", "j1", "j0", "j3"]
    assert ids(jobs, text="TRAIN-") == ["j5", "j1", "j0"]
    assert ids(jobs, text="%") == ["j3"]  # a LIKE wildcard is a character here
    assert ids(jobs, text="_gam") == ["j2"]
    assert ids(jobs, text="j4") == ["j4"]
    assert ids(jobs, text="4") == []  # ids match from their start only


def test_every_sort_orders_as_named_and_ends_in_submit_time(jobs: Store) -> None:
    assert ids(jobs, sort=JobSort.SUBMITTED) == ["j5", "j4", "j3", "j2", "j1", "j0"]
    # By code point, case folded, on both databases: '%' (0x25) comes before '-' (0x2d).
    assert ids(jobs, sort=JobSort.NAME) == ["j2", "j4", "j3", "j0", "j1", "j5"]
    assert ids(jobs, sort=JobSort.STATE) == ["j0", "j4", "j5", "j1", "j2", "j3"]
    assert ids(jobs, sort=JobSort.TENANT, descending=True)[0] == "j4"
    # GPUs: j5 6, j3 4, j2 3, j1 2, j0 1, j4 a quarter of one.
    assert ids(jobs, sort=JobSort.GPUS) == ["j5", "j3", "j2", "j1", "j0", "j4"]
    # Runtime: j1 runs since 1010 (90 s at 1100), j2 ran 30 s; jobs that never ran go last either way.
    assert ids(jobs, sort=JobSort.RUNTIME)[:2] == ["j1", "j2"]
    assert ids(jobs, sort=JobSort.RUNTIME, descending=False)[:2] == ["j2", "j1"]


def test_each_job_comes_with_its_current_run(jobs: Store) -> None:
    runs = {j.record.job_id: (j.started_s, j.ended_s, j.exit_code) for j in jobs.job_page(JobQuery()).jobs}
    assert runs["j1"] == (1_010.0, None, None)
    assert runs["j2"] == (1_010.0, 1_040.0, 0)
    assert runs["j0"] == (None, None, None)


def test_ranks_are_the_latest_placements_rows(jobs: Store) -> None:
    (rank,) = jobs.job_ranks("j1")
    assert (rank.rank, rank.host, rank.gpus, rank.started_s, rank.exited_s) == (0, "h1", (0, 1), 1_010.0, None)
    assert jobs.job_ranks("j2") == []  # over and confirmed gone: its rows are deleted
    assert jobs.job_ranks("j0") == []


@pytest.mark.parametrize(
    ("query", "source"),
    [
        (JobQuery(limit=0), "limit"),
        (JobQuery(limit=1001), "limit"),
        (JobQuery(offset=-1), "offset"),
        (JobQuery(submitted_after=5.0, submitted_before=5.0), "submitted_after"),
    ],
)
def test_a_query_out_of_range_is_refused_naming_its_parameter(store: Store, query: JobQuery, source: str) -> None:
    with pytest.raises(InputError) as e:
        store.job_page(query)
    assert e.value.source == source


def test_five_thousand_jobs_page_in_every_order(store: Store, make_spec: Spec) -> None:
    """Every sort pages through 5,000 jobs (200 active) without a repeat or a gap; each page is one bounded
    read. The time is printed for the record, never asserted (benchmarks/job_list.py measures it)."""
    specs = [
        make_spec(f"k{i:05d}", name=f"job-{i}", submit_time_s=float(i), gpus_per_task=1 + i % 8) for i in range(5000)
    ]
    ServerOps(store).submit_many([Submission(s, ("true",), {}, None, "a") for s in specs])  # one transaction
    with store._engine.begin() as conn:  # only the 8-GPU jobs among the first 1,600 stay active: 200
        conn.execute(sa.update(JobRow).where(JobRow.gpu_milli != 8000).values(state="finished"))
        conn.execute(
            sa.update(JobRow).where(JobRow.gpu_milli == 8000, JobRow.submit_time_s >= 1600).values(state="finished")
        )
    assert store.job_page(JobQuery(active=True, limit=1)).total == 200
    for sort in JobSort:
        t0 = time.perf_counter()
        seen = [
            j.record.job_id
            for o in range(0, 5000, 1000)
            for j in store.job_page(JobQuery(sort=sort, limit=1000, offset=o)).jobs
        ]
        print(f"{sort}: 5 pages in {time.perf_counter() - t0:.3f} s")
        assert len(seen) == len(set(seen)) == 5000, sort
