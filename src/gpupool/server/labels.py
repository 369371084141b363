"""Node labels on the server: the ones derived at registration, and the submit-time check of a selector.

Derived labels (``gpupool.domain.labels``) come from the registering agent's inventory (GPU model) and the
imported fabric (leaf, scalable unit, rails, and NVIDIA Topograph's keys as ``fabric export labels`` writes
them); they are stored with the agent's own labels at every registration, so a fabric imported later shows
in them when the node next registers. The synthetic fabric (no import) says nothing about a host's place, so
it gives none. At submit (``server.feasible``), a ``node_selector`` nobody can match is refused with the labels
that do exist (``refusal``), rather than waiting forever.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from gpupool.domain import labels as keys
from gpupool.domain.errors import GpupoolError
from gpupool.fabric.export.topograph import node_labels
from gpupool.fabric.fabric import Fabric
from gpupool.schemas.agent import RegisterRequest

_SHOWN = 12  # values listed per key in a refusal


class NoMatchingNodesError(GpupoolError):
    code = "NO_MATCHING_NODES"


@lru_cache(maxsize=4)
def _topograph(fabric: Fabric) -> dict[str, dict[str, str]]:
    """Every host's Topograph labels, as ``gpupool fabric export labels`` writes them (once per fabric)."""
    return node_labels(fabric, "nvidia")


def derived_labels(fabric: Fabric | None, inventory: RegisterRequest) -> dict[str, str]:
    """The labels gpupool derives for a registering node: its GPU model, its container runtime, and from the imported ``fabric`` its
    leaf (single-homed hosts only), scalable unit and rail count, plus NVIDIA Topograph's keys exactly as the
    exporter writes them (one function, so an agent's node and an exported label file agree): tier 0 is
    the leaf of a single-homed host and the scalable unit of a rail-optimised one."""
    out: dict[str, str] = {}
    if inventory.gpus:
        out[keys.GPU_MODEL] = inventory.gpus[0].model
    if inventory.container_runtime:
        out[keys.CONTAINER_RUNTIME] = inventory.container_runtime
        out[keys.CONTAINERS] = "yes"
    if fabric is None or not fabric.has_host(inventory.host):
        return out
    leaves = fabric.host_leaves[fabric.host_index(inventory.host)]
    if leaves:
        su = int(fabric.leaf_su[leaves[0]])
        if su >= 0:
            out[keys.SU] = f"su{su + 1:02d}"
        out[keys.RAILS] = str(len({int(fabric.leaf_rail[s]) for s in leaves}))
        if len(leaves) == 1:  # one leaf per rail: no single leaf names a rail-optimised host's place
            out[keys.LEAF] = fabric.switches[leaves[0]].name
    out.update(_topograph(fabric).get(inventory.host, {}))
    return out


def refusal(wanted: Iterable[tuple[str, str]], labels: Sequence[Iterable[tuple[str, str]]]) -> str:
    """'no node has zone=b: zone is a (2 nodes), c (1 node); ...' listing, per key asked for, what exists."""
    asked = dict(sorted(wanted))
    values: Mapping[str, Counter[str]] = defaultdict(Counter)
    for lab in labels:
        for k, v in lab:
            values[k][v] += 1
    parts = []
    for k in asked:
        seen = values.get(k)
        if not seen:
            parts.append(f"no node has a label {k}")
            continue
        shown = ", ".join(f"{v} ({n} node{'s' if n > 1 else ''})" for v, n in sorted(seen.items())[:_SHOWN])
        more = f" and {len(seen) - _SHOWN} more" if len(seen) > _SHOWN else ""
        parts.append(f"{k} is {shown}{more}")
    known = sorted(values)
    tail = f"; label keys on nodes: {', '.join(known)}" if known else "; no node has any label"
    ask = ", ".join(f"{k}={v}" for k, v in asked.items())
    return f"no node has every label of node_selector {ask}: {'; '.join(parts)}{tail}"
