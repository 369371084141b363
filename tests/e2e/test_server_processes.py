"""Real server processes on loopback: kill -9 during a burst of submissions (SQLite and PostgreSQL), and
failover between two replicas on PostgreSQL. Everything waits on conditions with deadlines, never sleeps."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpupool.store import Store
from procs import ServerProc, admin, pg_schema, setup_pool, wait_for


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'gpupool.db'}"
    else:
        yield from pg_schema()


def no_gpu_twice(url: str) -> dict[tuple[str, int], int]:
    with Store(url) as store:
        used: dict[tuple[str, int], int] = defaultdict(int)
        for alloc in store.load_state().allocations:
            for t in alloc.tasks:
                for g in t.gpus:
                    used[(t.host, g)] += t.milli_gpu
    assert all(v <= 1000 for v in used.values()), used
    return used


def test_kill9_during_a_burst_loses_and_duplicates_nothing(db_url: str, tmp_path: Path) -> None:
    srv = ServerProc(db_url, tmp_path, tmp_path / "server.log")
    token = setup_pool(srv.base, hosts=2)
    acked: dict[str, str] = {}
    tried: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def submitter(worker: int) -> None:
        with httpx.Client(base_url=srv.base, headers={"Authorization": f"Bearer {token}"}, timeout=5) as c:
            n = 0
            while not stop.is_set():
                key = f"w{worker}-{n}"
                n += 1
                with lock:
                    tried.append(key)
                body = {"command": ["true"], "gpus_per_task": 1 + n % 4}
                try:
                    r = c.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})
                except httpx.HTTPError:
                    return  # the server is gone: this key may or may not be stored
                assert r.status_code == 201, r.text
                with lock:
                    acked[key] = r.json()["job"]["id"]

    workers = [threading.Thread(target=submitter, args=(w,)) for w in range(4)]
    for w in workers:
        w.start()
    wait_for(lambda: len(acked) >= 150, 60, "150 acknowledged submissions")
    srv.kill9()
    stop.set()
    for w in workers:
        w.join(10)
    srv2 = ServerProc(db_url, tmp_path, tmp_path / "server2.log")
    try:
        # Clients retry everything they sent: an acknowledged key returns its job, an unacknowledged one is new.
        with httpx.Client(base_url=srv2.base, headers={"Authorization": f"Bearer {token}"}, timeout=10) as c:
            for key in tried:
                r = c.post("/v1/jobs", json={"command": ["true"]}, headers={"Idempotency-Key": key})
                assert r.status_code in (200, 201), r.text
                if key in acked:
                    assert r.status_code == 200 and r.json()["job"]["id"] == acked[key]
        jobs: list[dict[str, Any]] = []
        while True:  # oldest first: no page shifts under the next one
            params = {"limit": 1000, "offset": len(jobs), "sort": "submitted", "order": "asc"}
            page = admin(srv2.base, "GET", "/v1/jobs", params=params)
            jobs += page["jobs"]
            if len(jobs) >= page["total"] or not page["jobs"]:
                break
        keys = [j["idempotency_key"] for j in jobs]
        assert len(keys) == len(set(keys)) == len(set(tried))
        assert {j["id"] for j in jobs} >= set(acked.values())
        wait_for(
            lambda: admin(srv2.base, "GET", "/v1/jobs", params={"state": "placed", "limit": 1})["total"] > 0,
            15,
            "placements",
        )
    finally:
        srv2.stop()
    assert sum(no_gpu_twice(db_url).values()) > 0


def test_failover_the_standby_schedules_within_10_s_and_never_both(tmp_path: Path) -> None:
    gen = pg_schema()
    url = next(gen)
    a = ServerProc(url, tmp_path, tmp_path / "a.log")
    b = ServerProc(url, tmp_path, tmp_path / "b.log")
    try:
        wait_for(lambda: any(s.is_leader() for s in (a, b)), 10, "a leader")
        leaders = [s for s in (a, b) if s.is_leader()]
        assert len(leaders) == 1
        leader, standby = (a, b) if leaders[0] is a else (b, a)
        token = setup_pool(standby.base, hosts=1)
        h = {"Authorization": f"Bearer {token}"}
        # Submitted through the standby, scheduled by the leader.
        first = httpx.post(f"{standby.base}/v1/jobs", json={"command": ["true"], "gpus_per_task": 2}, headers=h).json()
        wait_for(
            lambda: httpx.get(f"{standby.base}/v1/jobs/{first['job']['id']}", headers=h).json()["state"] == "placed",
            10,
            "placement by the leader",
        )
        leader.kill9()
        killed_at = time.monotonic()
        second = httpx.post(f"{standby.base}/v1/jobs", json={"command": ["true"], "gpus_per_task": 2}, headers=h).json()
        took = wait_for(
            lambda: httpx.get(f"{standby.base}/v1/jobs/{second['job']['id']}", headers=h).json()["state"] == "placed",
            10,
            "placement after failover",
        )
        assert time.monotonic() - killed_at < 10 and took < 10
        assert standby.is_leader()
        # The old leader comes back as a standby: two processes, one leader.
        c = ServerProc(url, tmp_path, tmp_path / "c.log")
        try:
            for _ in range(20):
                flags = [s.is_leader() for s in (standby, c)]
                assert flags.count(True) == 1, flags
        finally:
            c.stop()
        used = no_gpu_twice(url)
        assert sum(used.values()) == 4000
    finally:
        a.stop()
        b.stop()
        next(gen, None)
