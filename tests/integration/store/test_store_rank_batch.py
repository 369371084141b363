"""Rank reports stored in batches (``Store.record_ranks``, the server's group commit ``RankBatcher``): a batch does
what its reports would have done one transaction each, in order; a batch stored again (an agent repeating
reports whose answer it never got) changes nothing; and a server killed with SIGKILL between a batch's
commit and its answer loses nothing and, when the reports come again to a fresh process, applies nothing
twice. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from gpupool.domain.jobs import Allocation, JobSpec, TaskAllocation
from gpupool.domain.states import JobState
from gpupool.server.rankbatch import RankBatcher
from gpupool.store import Store
from gpupool.store.ranks import RankOutcome, RankReport

Spec = Callable[..., JobSpec]


def _setup(store: Store, make_spec: Spec, p: str, gpu: int = 0) -> dict[str, int]:
    """Jobs ``{p}a`` (2 ranks, h1 and h2), ``{p}b`` (1 rank, h1), ``{p}c`` (2 ranks): placed on GPUs ``gpu`` to
    ``gpu + 2``; their allocations."""
    for name, tasks in (("a", 2), ("b", 1), ("c", 2)):
        store.submit_job(make_spec(f"{p}{name}", tasks=tasks), None, "t")
    out = {}
    for k, (name, hosts) in enumerate((("a", ("h1", "h2")), ("b", ("h1",)), ("c", ("h1", "h2")))):
        job_id = f"{p}{name}"
        rec = store.get_job(job_id)
        alloc = Allocation(job_id, tuple(TaskAllocation(h, (gpu + k,)) for h in hosts))
        out[name] = store.record_allocation(job_id, rec.version, alloc, "scheduler").version
    return out


def _reports(p: str, v: dict[str, int]) -> list[tuple[RankReport, str]]:
    """A mix whose outcomes depend on order: a gang that starts and finishes within the batch, a repeat after
    its end, a rank reported from the wrong host, a gang failed by one rank with its other rank reported
    after, a job the store does not hold."""
    a, b, c = f"{p}a", f"{p}b", f"{p}c"
    raw = [
        RankReport(a, v["a"], 0, "h1", "running", None),
        RankReport(a, v["a"], 1, "h2", "running", None),
        RankReport(a, v["a"], 0, "h1", "exited", 0),
        RankReport(b, v["b"], 0, "h2", "running", None),  # not its host
        RankReport(a, v["a"], 1, "h2", "exited", 0),  # the gang finishes here
        RankReport(a, v["a"], 1, "h2", "exited", 0),  # a repeat after the end
        RankReport(c, v["c"], 0, "h1", "exited", 3, "boom"),  # fails the gang
        RankReport(c, v["c"], 1, "h2", "running", None),  # after the failure: its job no longer holds GPUs
        RankReport(f"{p}x", 1, 0, "h1", "running", None),
        RankReport(b, v["b"], 0, "h1", "running", None),
    ]
    return [(r, f"agent:{r.host}") for r in raw]


def _audit(store: Store, p: str) -> list[tuple[str, str]]:
    with store._engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT subject, action FROM audit_events WHERE subject LIKE :s"), {"s": f"job/{p}%"}
        )
        return sorted((r[0].removeprefix(f"job/{p}"), r[1]) for r in rows)


def _states(store: Store, p: str) -> dict[str, JobState]:
    return {n: store.get_job(f"{p}{n}").state for n in "abc"}


def _strip(outs: list[RankOutcome]) -> list[tuple[bool, bool, JobState | None]]:
    return [(o.stored, o.changed, o.state) for o in outs]


def test_a_batch_does_what_its_reports_do_one_at_a_time_and_a_repeat_does_nothing(
    store: Store, make_spec: Spec
) -> None:
    for h in ("h1", "h2"):
        store.upsert_node(h, gpu_model="H100", gpu_count=8, actor="agent")
    one = _setup(store, make_spec, "s-")
    alone = [store.record_rank(r, actor) for r, actor in _reports("s-", one)]
    many = _setup(store, make_spec, "m-", gpu=3)
    batch = store.record_ranks(_reports("m-", many))

    assert _strip(batch) == _strip(alone)
    expected = {"a": JobState.FINISHED, "b": JobState.RUNNING, "c": JobState.FAILED}
    assert _states(store, "m-") == _states(store, "s-") == expected
    assert _audit(store, "m-") == _audit(store, "s-")
    assert [o.changed for o in batch].count(True) >= 5  # the batch did move ranks and jobs

    # The same batch again (its answer lost): every report is settled or stale; nothing moves, no audit line.
    audit = _audit(store, "m-")
    again = store.record_ranks(_reports("m-", many))
    assert not any(o.changed for o in again)
    assert _states(store, "m-") == _states(store, "s-")
    assert _audit(store, "m-") == audit


def test_a_server_killed_after_a_batch_commit_before_its_answer_applies_nothing_twice(
    store: Store, make_spec: Spec, db_url: str
) -> None:
    for h in ("h1", "h2"):
        store.upsert_node(h, gpu_model="H100", gpu_count=8, actor="agent")
    v = _setup(store, make_spec, "k-")
    reports = _reports("k-", v)
    wire = [[r.job_id, r.allocation, r.rank, r.host, r.state, r.exit_code, r.reason] for r, _ in reports]
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("store_reporter.py")), db_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        child.stdin.write(json.dumps(wire) + "\n")
        child.stdin.flush()
        line = child.stdout.readline()  # written after the batch committed, where the server would answer
        assert line.strip() == "committed", child.stderr.read() if child.stderr else ""
        child.send_signal(signal.SIGKILL)  # before the answer
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    committed = _states(store, "k-")
    assert committed == {"a": JobState.FINISHED, "b": JobState.RUNNING, "c": JobState.FAILED}
    audit = _audit(store, "k-")

    # The agents repeat every report to a fresh process (a restarted server): nothing is applied twice.
    with Store(db_url) as again:
        outs = asyncio.run(RankBatcher(again.record_ranks).stored(reports))
        assert all(isinstance(o, RankOutcome) and not o.changed for o in outs)
    assert _states(store, "k-") == committed
    assert _audit(store, "k-") == audit
    with store._engine.connect() as conn:
        attempts = conn.execute(
            sa.text("SELECT job_id, count(*) FROM job_attempts WHERE job_id LIKE 'k-%' GROUP BY job_id")
        ).all()
    assert sorted(attempts) == [("k-a", 1), ("k-b", 1), ("k-c", 1)]
