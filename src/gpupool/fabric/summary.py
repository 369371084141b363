"""A fabric's headline numbers, as ``gpupool fabric show --json`` prints them."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Tier

DECLARED = "declared"  # an HCA whose host was given, not found (generated fabrics, Slurm, inventories)
# How hosts are found, most trusted first (the order of gpupool.fabric.parsers.attribution.METHODS).
_TRUST = ("host-map", "node-name-map", "description", "system-image-guid", "port-position")


def found_by(fabric: Fabric) -> dict[str, dict[str, int]]:
    """How hosts were found: HCAs per method, and hosts by the most trusted method that named one of their HCAs."""
    hcas: Counter[str] = Counter()
    best: dict[str, str] = {}
    rank = {m: i for i, m in enumerate((DECLARED, *_TRUST))}
    for h in fabric.hcas:
        if h.host is None:
            continue
        method = h.found_by or DECLARED
        hcas[method] += 1
        if h.host not in best or rank.get(method, len(rank)) < rank.get(best[h.host], len(rank)):
            best[h.host] = method
    return {"hosts": dict(sorted(Counter(best.values()).items())), "hcas": dict(sorted(hcas.items()))}


def summarize(fabric: Fabric) -> dict[str, Any]:
    over = fabric.oversubscription_array()
    worst: dict[str, float] = {}
    for tier in Tier:
        vals = [float(over[s]) for s in fabric.switches_at(tier) if over[s] > 0]
        if vals:
            worst[tier.name.lower()] = round(max(vals), 3)
    return {
        "name": fabric.name,
        "hosts": len(fabric.hosts),
        "gpus": fabric.gpu_count,
        "hcas": len(fabric.hcas),
        "unattributed_hcas": len(fabric.unattributed_hcas),
        "switches": {tier.name.lower(): len(fabric.switches_at(tier)) for tier in Tier},
        "links": len(fabric.links),
        "rails": fabric.rail_count,
        "scalable_units": len(fabric.su_leaves),
        "oversubscription": worst,
        "gpu_models": dict(sorted(Counter(g.model for h in fabric.hosts for g in h.gpus).items())),
        "found_by": found_by(fabric),
        "unattributed_reasons": dict(
            Counter(h.unattributed_reason or "unknown" for h in fabric.unattributed_hcas).most_common()
        ),
    }
