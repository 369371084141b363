"""A fabric's headline numbers, as ``gpupool fabric show --json`` prints them."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Tier


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
    }
