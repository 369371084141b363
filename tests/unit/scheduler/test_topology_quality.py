"""Topology quality on the generated 4-SU SuperPOD (the one slow scheduler test, a few seconds)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def _bench() -> ModuleType:
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "topology_quality.py"
    spec = importlib.util.spec_from_file_location("topology_quality", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_topology_placer_puts_gangs_in_the_smallest_feasible_domain_and_aligns_rails() -> None:
    bench = _bench()
    topo = bench.run("topology", sus=4, jobs=400, seed=3)
    first = bench.run("first-fit", sus=4, jobs=400, seed=3)
    best = bench.run("best-fit", sus=4, jobs=400, seed=3)
    assert topo["gangs"] == first["gangs"] == best["gangs"] > 100
    assert topo["smallest_domain_share"] >= 0.95
    assert topo["smallest_domain_share"] > max(first["smallest_domain_share"], best["smallest_domain_share"]) + 0.1
    assert topo["rail_aligned_share"] >= 0.9
    assert topo["rail_aligned_share"] > max(first["rail_aligned_share"], best["rail_aligned_share"])
