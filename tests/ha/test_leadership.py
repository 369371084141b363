"""Leadership on real server processes and the real PostgreSQL: a lease with a fencing token.

Invariants: one leader at a time, whatever bytes the replicas' database URLs differ in (the lease is named
by ``cluster_name``); a leader paused for 25 s (SIGSTOP) is replaced within 10 s; woken (SIGCONT) it places
nothing: every placement written after the takeover carries the new leader's token, which the database's
fencing check alone lets through."""

from __future__ import annotations

import signal
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.engine import make_url

from gpupool.store import Store
from procs import ServerProc, pg_schema, setup_pool, until, wait_for

PAUSE_S = 25.0


def with_app_name(url: str, name: str) -> str:
    return make_url(url).update_query_dict({"application_name": name}).render_as_string(hide_password=False)


def leaders(*servers: ServerProc) -> list[bool]:
    return [s.is_leader() for s in servers]


def placements(store: Store) -> dict[str, tuple[int | None, float]]:
    """job id -> (the leader token its allocation was written under, when it was placed)."""
    with store._engine.connect() as conn:
        rows = conn.execute(text("SELECT job_id, leader_token, placed_s FROM allocations")).all()
    return {str(j): (t, float(p)) for j, t, p in rows}


def no_gpu_twice(store: Store) -> int:
    used: dict[tuple[str, int], int] = defaultdict(int)
    for alloc in store.load_state().allocations:
        for t in alloc.tasks:
            for g in t.gpus:
                used[(t.host, g)] += t.milli_gpu
    assert all(v <= 1000 for v in used.values()), used
    return len(used)


def test_a_paused_leader_is_replaced_within_10_s_and_places_nothing_when_it_wakes(tmp_path: Path) -> None:
    gen = pg_schema()
    url = next(gen)
    store = Store(url)
    a = ServerProc(with_app_name(url, "replica-a"), tmp_path, tmp_path / "a.log")
    b: ServerProc | None = None
    paused = False
    try:
        wait_for(a.is_leader, 15, "the first replica to lead")
        b = ServerProc(with_app_name(url, "replica-b"), tmp_path, tmp_path / "b.log")
        for _ in range(10):  # URLs that differ in a byte: still one lease, one leader
            assert leaders(a, b) == [True, False]
        tenant = setup_pool(b.base, hosts=1)  # 8 GPUs
        headers = {"Authorization": f"Bearer {tenant}"}

        def submit(srv: ServerProc) -> str:
            r = httpx.post(f"{srv.base}/v1/jobs", json={"command": ["true"], "gpus_per_task": 1}, headers=headers)
            assert r.status_code == 201, r.text
            return str(r.json()["job"]["id"])

        def placed(*jobs: str) -> bool:
            got = placements(store)
            return all(j in got for j in jobs)

        first = submit(b)
        wait_for(lambda: placed(first), 15, "a placement by the leader")
        before = store.lease("default")
        assert before is not None

        a.proc.send_signal(signal.SIGSTOP)
        paused, paused_at = True, time.monotonic()
        second = submit(b)
        wait_for(lambda: placed(second), 10, "the standby to take over and place")
        assert time.monotonic() - paused_at < 10
        after = store.lease("default")
        assert after is not None and after.token > before.token and after.holder != before.holder
        during = [submit(b) for _ in range(2)]
        wait_for(lambda: placed(*during), 10, "placements by the new leader")
        threading.Event().wait(max(0.0, PAUSE_S - (time.monotonic() - paused_at)))  # the fault lasts 25 s
        a.proc.send_signal(signal.SIGCONT)
        paused = False
        # Submitted through the woken replica itself, whose loop its own submits nudge at once.
        woken = [submit(a) for _ in range(3)]
        wait_for(lambda: placed(*woken), 15, "the jobs submitted after the wake-up placed")

        got = placements(store)
        assert got[first][0] == before.token
        later = [second, *during, *woken]
        assert {j: got[j][0] for j in later} == dict.fromkeys(later, after.token)
        events = store.list_audit(action="job.placed", limit=100)
        assert sorted(e.data["leader_token"] for e in events) == [before.token] + [after.token] * 6
        for _ in range(10):
            assert leaders(a, b) == [False, True]
        lease = store.lease("default")
        assert lease is not None and lease.token == after.token  # nobody took over again
        assert no_gpu_twice(store) == 7
        log = a.log_path.read_text()
        assert "leadership" in log and ("ran out" in log or "refused" in log or "lost the" in log), log[-2000:]
    finally:
        if paused:
            a.proc.send_signal(signal.SIGCONT)
        a.stop()
        if b is not None:
            b.stop()
        store.close()
        next(gen, None)


def test_replicas_whose_urls_differ_never_both_lead_and_a_clean_stop_hands_over_at_once(tmp_path: Path) -> None:
    gen = pg_schema()
    url = next(gen)
    servers = [ServerProc(with_app_name(url, f"r{i}"), tmp_path, tmp_path / f"r{i}.log") for i in range(3)]
    try:
        until(lambda: leaders(*servers).count(True) == 1, 15, "one leader")
        for _ in range(20):
            assert leaders(*servers).count(True) <= 1
        leader = next(s for s in servers if s.is_leader())
        stopped_at = time.monotonic()
        leader.stop()  # gives the lease up: a standby takes over on its next try, not at the lease's expiry
        rest = [s for s in servers if s is not leader]
        wait_for(lambda: leaders(*rest).count(True) == 1, 10, "a standby to take over")
        took: Any = time.monotonic() - stopped_at
        assert took < 6.0, took  # well under the 6 s lease
    finally:
        for s in servers:
            s.stop()
        next(gen, None)
