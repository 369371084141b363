"""The Slurm comparison's trace, time limits and arms (benchmarks/sim_slurm.py)."""

from __future__ import annotations

import functools
import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

from gpupool.fabric import jsonio
from gpupool.fabric.generators import leaf_spine
from gpupool.sim.bounds import lower_bounds
from gpupool.sim.traces import load_trace


@functools.cache
def _bench() -> ModuleType:
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "sim_slurm.py"
    spec = importlib.util.spec_from_file_location("sim_slurm", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sim_slurm"] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_trace_has_the_slurm_trace_shape_and_its_bound() -> None:
    bench = _bench()
    trace = bench.make_trace(3, 200, 35, 2027.0, 128, 110.0)
    sizes = [j.gpus for j in trace.jobs]
    assert len(sizes) == 200
    assert sorted(g for g in sizes if g > 8) == sorted(g for g in sizes if g in (16, 24, 32))
    assert sum(1 for g in sizes if g > 8) == 35
    assert set(sizes) <= {1, 2, 4, 8, 16, 24, 32}
    b = lower_bounds(
        [j.submit_s for j in trace.jobs], [j.duration_s for j in trace.jobs], [float(g) for g in sizes], 128
    )
    assert b.avg_jct_s == pytest.approx(2027.0, rel=1e-3)
    assert bench.make_trace(3, 200, 35, 2027.0, 128, 110.0) == trace  # seeded


def test_time_limits_are_near_exact_whole_minutes_never_below_the_runtime() -> None:
    bench = _bench()
    trace = bench.make_trace(1, 200, 35, 2027.0, 128, 110.0)
    limits = bench.time_limits(trace, 1, 0.1, 60.0)
    assert limits == bench.time_limits(trace, 1, 0.1, 60.0)
    for j in trace.jobs:
        lim = limits[j.job_id]
        assert lim >= j.duration_s
        assert lim % 60.0 == 0.0
        assert lim <= math.ceil(j.duration_s * 1.1 / 60.0) * 60.0
    exact = bench.time_limits(trace, 1, 0.0, 0.0)
    assert all(exact[j.job_id] == j.duration_s for j in trace.jobs)


def test_parse_seeds_takes_ranges_and_lists() -> None:
    bench = _bench()
    assert bench.parse_seeds("1-3,9") == [1, 2, 3, 9]
    assert bench.parse_seeds("4") == [4]


def test_sjf_with_backfill_beats_the_slurm_like_arm_and_keeps_every_gang_in_one_leaf() -> None:
    bench = _bench()
    fabric = leaf_spine(4, 2, 4, 8, name="16x8-4leaves")
    trace = bench.make_trace(1, 200, 35, 2027.0, fabric.gpu_count, 105.0)  # the default run
    limits = bench.time_limits(trace, 1, 0.1, 60.0)
    slurm = bench.run_arm(trace, fabric, bench.ARM_BY_NAME["fifo+easy+leaf"], limits)
    best = bench.run_arm(trace, fabric, bench.ARM_BY_NAME["sjf+easy+leaf"], limits)
    for m in (slurm, best):
        assert m["finished"] == 200
        assert m["multi_host_jobs"] == m["multi_host_jobs_in_one_leaf"] == 35
        assert m["avg_jct_s"] >= m["lb_avg_jct_s"]
    assert best["avg_jct_s"] < slurm["avg_jct_s"]


def test_summary_counts_wins_and_the_traces_of_slurms_kind() -> None:
    bench = _bench()

    def row(seed: int, arm: str, side: str, jct: float) -> dict[str, object]:
        return {
            "seed": seed, "gap_s": 105.0, "arm": arm, "side": side, "avg_jct_s": jct, "lb_avg_jct_s": 2027.0,
            "avg_jct_over_lb": jct / 2027.0, "p99_jct_s": jct, "max_queue_s": 1.0,
            "multi_host_jobs": 35, "multi_host_jobs_in_one_leaf": 35 if "leaf" in arm else 20,
        }  # fmt: skip

    rows = [
        row(1, "fifo+easy", "slurm-like", 2750.0),  # 1.357x: Slurm's kind
        row(1, "fifo+easy+leaf", "slurm-like", 2700.0),
        row(1, "sjf+easy+leaf", "gpupool", 2600.0),
        row(2, "fifo+easy", "slurm-like", 2200.0),  # 1.085x: not Slurm's kind
        row(2, "fifo+easy+leaf", "slurm-like", 2300.0),
        row(2, "sjf+easy+leaf", "gpupool", 2250.0),
        row(3, "fifo+easy", "slurm-like", 2800.0),  # 1.381x: Slurm's kind
        row(3, "fifo+easy+leaf", "slurm-like", 2780.0),
        row(3, "sjf+easy+leaf", "gpupool", 2790.0),  # beats fifo+easy only, and is over 2,745 s
    ]
    lines = {line["arm"]: line for line in bench.summarise(rows)}
    sjf = lines["sjf+easy+leaf"]
    assert sjf["seeds"] == 3
    assert sjf["mean_avg_jct_s"] == pytest.approx((2600 + 2250 + 2790) / 3, abs=0.1)
    assert sjf["beats_fifo+easy+leaf_seeds"] == 2
    assert sjf["beats_fifo+easy_seeds"] == 2
    assert sjf["slurm_kind_seeds"] == [1, 3]
    assert sjf["slurm_kind_beats_slurm_like"] == 1
    assert sjf["slurm_kind_under_2745_s"] == 1
    assert lines["fifo+easy"]["multi_host_in_one_leaf_worst"] == 20
    assert "beats_fifo+easy_seeds" not in lines["fifo+easy"]


def test_the_written_trace_and_fabric_are_what_gpupool_sim_run_reads(tmp_path: Path) -> None:
    """``--write``: the ITP CSV loads back to the same jobs (times to the bit), and the fabric to 4 leaves of 4."""
    bench = _bench()
    fabric = leaf_spine(4, 2, 4, 8, name="16x8-4leaves")
    trace = bench.make_trace(2, 200, 35, 2027.0, 128, 105.0)
    bench.write_trace(trace, fabric, tmp_path, 2)
    back = load_trace(tmp_path / "slurm-2.csv", "itp")
    assert [(j.job_id, j.submit_s, j.duration_s, j.gpus) for j in back.jobs] == [
        (j.job_id, j.submit_s, j.duration_s, j.gpus) for j in trace.jobs
    ]
    loaded = jsonio.load(tmp_path / "16x8-4leaves.json")
    assert loaded.gpu_count == 128 and len(loaded.hosts) == 16
