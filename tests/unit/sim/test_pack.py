"""The FGD packing protocol on a small self-made node and pod list."""

from __future__ import annotations

import numpy as np
import pytest

from gpupool.sim.pack import pack, request_milli, tuned_pods
from gpupool.sim.traces.records import TraceJob, TraceNode

NODES = tuple(TraceNode(f"n{i}", 8 if i < 4 else 2, "T4" if i % 2 else "G2", 64_000, 256_000) for i in range(8))


def pods(n: int = 40, seed: int = 0) -> tuple[TraceJob, ...]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        r = rng.random()
        if r < 0.15:
            out.append(TraceJob(f"cpu{i}", 0.0, 0.0, 0, gpu_milli=0, cpu_milli=4000, memory_mib=8000))
        elif r < 0.55:
            out.append(TraceJob(f"f{i}", 0.0, 0.0, 1, gpu_milli=int(rng.choice([250, 500])), cpu_milli=2000))
        else:
            out.append(TraceJob(f"w{i}", 0.0, 0.0, int(rng.choice([1, 2, 4])), cpu_milli=4000, memory_mib=4000))
    out.append(TraceJob("t4only", 0.0, 0.0, 1, gpu_model="T4", cpu_milli=1000))
    return tuple(out)


def test_resampling_reaches_the_target_and_is_seeded() -> None:
    base = pods()
    a = tuned_pods(base, 40_000, 1.3, np.random.default_rng(1))
    b = tuned_pods(base, 40_000, 1.3, np.random.default_rng(1))
    assert [p.job_id for p in a] == [p.job_id for p in b]
    assert sum(map(request_milli, a)) >= 1.3 * 40_000
    assert {p.job_id for p in base} <= {p.job_id for p in a}
    assert any("-tuned-" in p.job_id for p in a)


def test_pack_fills_the_cluster_without_overcommitting() -> None:
    r = pack(NODES, pods(), placement="best-fit", tune=1.3, seed=42)
    assert r.total_gpus == 40
    ratios = [r.alloc_ratio_at[k] for k in sorted(r.alloc_ratio_at)]
    assert ratios == sorted(ratios)  # no departures: allocation only grows
    assert 0 < ratios[-1] <= 100.0
    assert r.placed + r.unscheduled + r.cpu_only_pods == r.pods
    assert r.unallocated_gpus == pytest.approx(40 * (1 - ratios[-1] / 100))
    # early on everything that arrives fits (up to one pod, at most 4 GPUs = 10% of 40, behind the arrivals)
    assert all(r.alloc_ratio_at[k] >= k - 10 for k in range(0, 51))
    doc = r.as_json()
    assert {"total_gpus", "alloc_ratio_at", "unallocated_gpus_at_130"} <= set(doc)
    assert set(doc["alloc_ratio_at"]) >= {"100", "130"}  # type: ignore[arg-type]


def test_pack_is_deterministic_for_a_seed_and_frag_runs() -> None:
    a = pack(NODES, pods(), placement="frag", seed=7)
    b = pack(NODES, pods(), placement="frag", seed=7)
    assert a.alloc_ratio_at == b.alloc_ratio_at
