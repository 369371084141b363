"""Build a ~10,000-host generated fabric and time lowest-common-tier queries on random host pairs.

Prints one JSON line: hosts, gpus, build_s, pair_queries_per_s (vectorised), scalar_queries_per_s,
smallest_domain_per_s. Usage: python benchmarks/fabric_queries.py [--hosts 10000] [--pairs 2000000]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from gpupool.fabric.generators import SUPERPOD_NODES_PER_SU, superpod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--pairs", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()

    sus = -(-(args.hosts + 1) // SUPERPOD_NODES_PER_SU)
    t0 = time.perf_counter()
    fabric = superpod(sus)
    build_s = time.perf_counter() - t0

    rng = np.random.default_rng(args.seed)
    n = len(fabric.hosts)
    a = rng.integers(0, n, args.pairs)
    b = rng.integers(0, n, args.pairs)
    fabric.lowest_common_tier_many(a[:1000], b[:1000])  # warm-up
    t0 = time.perf_counter()
    tiers = fabric.lowest_common_tier_many(a, b)
    vec_s = time.perf_counter() - t0

    m = 100_000
    t0 = time.perf_counter()
    for i in range(m):
        fabric.lowest_common_tier(int(a[i]), int(b[i]))
    scalar_s = time.perf_counter() - t0

    sets = [rng.integers(0, n, 16) for _ in range(10_000)]
    t0 = time.perf_counter()
    for s in sets:
        fabric.smallest_domain(s)
    dom_s = time.perf_counter() - t0

    print(
        json.dumps(
            {
                "benchmark": "fabric_queries",
                "fabric": fabric.name,
                "hosts": n,
                "gpus": fabric.gpu_count,
                "switches": len(fabric.switches),
                "build_s": round(build_s, 3),
                "pairs": args.pairs,
                "pair_queries_per_s": round(args.pairs / vec_s),
                "scalar_queries_per_s": round(m / scalar_s),
                "smallest_domain_per_s": round(len(sets) / dom_s),
                "tier_histogram": {int(t): int(c) for t, c in zip(*np.unique(tiers, return_counts=True), strict=True)},
            }
        )
    )


if __name__ == "__main__":
    main()
