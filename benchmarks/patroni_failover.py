"""PostgreSQL high availability under a submission burst: the Patroni recipe (deploy/patroni) on loopback (etcd
and three PostgreSQL 15 members, synchronous replication), two gpupool server replicas connected through the
members list, ``--jobs`` submissions at ``--rate`` per second round-robin over both replicas from ``--workers``
client threads, while the primary is switched over (after 30% of the jobs are acknowledged) and then killed
with -9, Patroni and PostgreSQL together (after 65%). Clients retry 503s and dropped connections with their
Idempotency-Key, as the API asks.

One JSON line: acknowledged, lost (acknowledged but not in the database, or with another id) and duplicate
jobs; each fault's primary change and outage (the longest time after it without an acknowledged submit, the
target is <= 15 s); submit latency percentiles (retries included); what the clients saw; the time the cluster
took to come up; CPU seconds of the two servers and of this process (clients), wall time, load average.

    .venv/bin/python benchmarks/patroni_failover.py                       # 2,000 jobs at 40/s: about 2 minutes
    .venv/bin/python benchmarks/patroni_failover.py --jobs 300 --rate 15  # what the CI test runs
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from ledger import percentile
from patroni_cluster import Fault, PatroniCluster, failover_burst, missing
from procs import ServerProc, cpu_s, setup_pool


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--rate", type=float, default=40.0, help="offered submits per second")
    ap.add_argument("--workers", type=int, default=16, help="client threads")
    ap.add_argument("--store-retry-s", type=float, default=15.0, help="the servers' store_retry_s")
    args = ap.parse_args()
    why = missing()
    if why is not None:
        sys.exit(f"patroni_failover: {why}")
    load0 = os.getloadavg()[0]
    cluster = PatroniCluster()
    servers: list[ServerProc] = []
    with tempfile.TemporaryDirectory(prefix="gpupool-bench-") as tmp:
        try:
            cluster.start()
            env = {"GPUPOOL_STORE_RETRY_S": str(args.store_retry_s), "GPUPOOL_LOG_LEVEL": "warning"}
            for name in ("a", "b"):
                (Path(tmp) / name).mkdir()
                servers.append(ServerProc(cluster.url(), Path(tmp) / name, Path(tmp) / f"{name}.log", env=env))
            token = setup_pool(servers[0].base, hosts=2)
            cpu0 = [cpu_s(s.proc.pid) for s in servers]
            faults = [
                Fault("switchover", after_acks=int(0.3 * args.jobs)),
                Fault("kill9", after_acks=int(0.65 * args.jobs)),
            ]
            got = failover_burst(
                cluster,
                [s.base for s in servers],
                token,
                jobs=args.jobs,
                rate_per_s=args.rate,
                workers=args.workers,
                faults=faults,
            )
            server_cpu = sum(cpu_s(s.proc.pid) - c for s, c in zip(servers, cpu0, strict=True))
        except BaseException:
            print(cluster.logs(), file=sys.stderr)
            raise
        finally:
            for s in servers:
                s.stop()
            cluster.close()
    lat = got.ledger.latencies()
    out: dict[str, object] = {
        "benchmark": "patroni_failover",
        "jobs": args.jobs,
        "replicas": len(servers),
        "workers": args.workers,
        "rate": args.rate,
        "store_retry_s": args.store_retry_s,
        "acked": len(got.ledger.acked),
        "lost": len(got.lost),
        "duplicates": got.duplicates,
        "refused": len(got.ledger.refused),
    }
    for f in faults:
        out[f.kind] = f.moved
        out[f"{f.kind}_outage_s"] = round(f.outage_s, 2)
    out |= {
        "submit_p50_s": round(percentile(lat, 0.5), 3),
        "submit_p99_s": round(percentile(lat, 0.99), 3),
        "submit_max_s": round(max(lat, default=float("nan")), 3),
        "clients_saw": dict(got.ledger.seen),
        "cluster_up_s": round(cluster.started_s, 1),
        "burst_wall_s": round(got.wall_s, 1),
        "servers_cpu_s": round(server_cpu, 2),
        "clients_cpu_s": round(time.process_time(), 2),
        "load_avg_1m": round(max(load0, os.getloadavg()[0]), 2),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
