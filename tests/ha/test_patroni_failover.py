"""The PostgreSQL high-availability recipe (deploy/patroni) end to end on loopback: etcd and three PostgreSQL 15
members under Patroni, two gpupool server replicas connected through the members list, 300 submissions
round-robin over both while the primary is switched over and then killed with -9. The servers ride through a
failover for only 3 s (``store_retry_s``), less than the kill's ~10 s: past it clients get 503
STORE_UNAVAILABLE with Retry-After and retry with their Idempotency-Key (the benchmark's 15 s hides it all).

Invariants: every submission is acknowledged (clients retry 503s with their Idempotency-Key), no acknowledged
job is lost and none is stored twice (synchronous replication: only a standby holding every commit is
promoted), no GPU is given twice, and submits are accepted again within 15 s of each fault."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import pytest

from gpupool.store import Store
from patroni_cluster import Fault, PatroniCluster, failover_burst, missing
from procs import ServerProc, setup_pool

pytestmark = pytest.mark.slow

OUTAGE_TARGET_S = 15.0


def test_a_switchover_and_a_kill9_of_the_primary_during_300_submits_lose_nothing(tmp_path: Path) -> None:
    why = missing()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Patroni recipe: {why}")
        pytest.skip(why)
    cluster = PatroniCluster()
    servers: list[ServerProc] = []
    try:
        cluster.start()
        env = {"GPUPOOL_STORE_RETRY_S": "3"}
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            servers.append(ServerProc(cluster.url(), tmp_path / name, tmp_path / f"{name}.log", env=env))
        token = setup_pool(servers[0].base, hosts=2)
        faults = [Fault("switchover", after_acks=60), Fault("kill9", after_acks=150)]
        got = failover_burst(
            cluster, [s.base for s in servers], token, jobs=300, rate_per_s=15, workers=8, faults=faults
        )
        detail = f"{[(f.kind, f.moved, round(f.outage_s, 2)) for f in faults]} {dict(got.ledger.seen)}"
        assert len(got.ledger.acked) == 300, f"{got.ledger.refused} {detail}"
        assert got.lost == [] and got.duplicates == 0, detail
        assert set(got.stored) == got.ledger.tried, detail
        assert all(f.outage_s <= OUTAGE_TARGET_S for f in faults), detail
        assert got.ledger.seen["503 STORE_UNAVAILABLE"] > 0, detail  # the kill outlasted the servers' retries
        assert not any("no Retry-After" in seen for seen in got.ledger.seen), detail
        with Store(cluster.url()) as store:
            used: dict[tuple[str, int], int] = defaultdict(int)
            for alloc in store.load_state().allocations:
                for t in alloc.tasks:
                    for g in t.gpus:
                        used[(t.host, g)] += 1
        assert sum(used.values()) == 16 and max(used.values()) == 1, used  # both nodes full, no GPU twice
    except BaseException:
        print(cluster.logs())
        for s in servers:
            print(f"--- {s.log_path.name}\\n{s.log_path.read_text()[-3000:]}")
        raise
    finally:
        for s in servers:
            s.stop()
        cluster.close()
