"""A fabric as NVIDIA Topograph's Kubernetes node labels, so tools built for Topograph (KAI Scheduler, Kueue
TAS, NVSentinel) can use a fabric gpupool imported; ``parsers.topograph`` reads them back.

Tier 0 is what ``export.slurm.topology_conf`` makes each host's leaf: the leaf switch of a single-homed host,
the scalable unit (``su01``) of a rail-optimised one, whose host sits under one leaf per rail. Tiers 1 and 2
name the host's spine group and core component by their first switch (natural order), so two hosts share
a tier's value exactly when they share that domain; a tier the fabric lacks is not written. A host in a
multi-node NVLink domain gets the accelerator label. Values are made valid label values (at most 63 of
``A-Z a-z 0-9 - _ .``, starting and ending alphanumeric). Three key families (``parsers.topograph``):
``nvidia`` (``network.topology.nvidia.com/{leaf,spine,core,accelerator}``, before Topograph 1.0; the one
gpupool's agents derive), ``nvidia-tiers`` and ``topograph`` (``fabric.topograph.run/tier-N``, 1.0 on).
"""

from __future__ import annotations

import json
import re
import shlex
from collections import defaultdict

from gpupool.fabric.export.slurm import slurm_name
from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Domain, Tier
from gpupool.fabric.parsers._text import natural_key
from gpupool.fabric.parsers.topograph import LABEL_STYLES

__all__ = ["label_value", "node_labels", "node_labels_json", "node_labels_kubectl"]

_BAD = re.compile(r"[^A-Za-z0-9._-]")


def label_value(text: str) -> str:
    """``text`` as a Kubernetes label value."""
    v = _BAD.sub("_", text)[:63].strip("._-")
    return v or "x"


def _domain_names(fabric: Fabric, level: Domain, tier: Tier) -> dict[int, str]:
    """Host index -> the name of the first ``tier`` switch reachable from the hosts sharing its ``level`` id."""
    ids = fabric.domain_ids(level)
    up: dict[int, set[int]] = defaultdict(set)
    above = set(fabric.switches_at(tier))
    adjacency: dict[int, set[int]] = defaultdict(set)
    switch_ix = {s.guid: i for i, s in enumerate(fabric.switches)}
    for link in fabric.links:
        a, b = switch_ix.get(link.a.node), switch_ix.get(link.b.node)
        if a is not None and b is not None:
            adjacency[a].add(b)
            adjacency[b].add(a)
    for h in range(len(fabric.hosts)):
        frontier = set(fabric.host_leaves[h])
        seen = set(frontier)
        while frontier:  # climb until the tier is reached
            found = frontier & above
            if found:
                up[int(ids[h])] |= found
                break
            frontier = {
                t for s in frontier for t in adjacency[s] if fabric.switches[t].tier > fabric.switches[s].tier
            } - seen
            seen |= frontier
    return {
        h: min((fabric.switches[s].name for s in up[int(ids[h])]), key=natural_key)
        for h in range(len(fabric.hosts))
        if up.get(int(ids[h]))
    }


def node_labels(fabric: Fabric, style: str = "nvidia") -> dict[str, dict[str, str]]:
    """Host name -> its Topograph labels in ``style`` (a key of ``LABEL_STYLES``)."""
    st = LABEL_STYLES[style]
    rail_optimised = any(len(leaves) > 1 for leaves in fabric.su_leaves)
    leaf_of: dict[int, str] = {}
    for h, leaves in enumerate(fabric.host_leaves):
        if leaves:
            su = int(fabric.leaf_su[leaves[0]])
            leaf_of[h] = (
                f"su{su + 1:0{max(2, len(str(len(fabric.su_leaves))))}d}"
                if rail_optimised and su >= 0
                else fabric.switches[leaves[0]].name
            )
    tiers = [
        leaf_of,
        _domain_names(fabric, Domain.SPINE_GROUP, Tier.SPINE),
        _domain_names(fabric, Domain.CORE, Tier.CORE),
    ]
    keys = list(st.tiers) or [f"{st.tier_prefix}{t}" for t in range(3)]
    out: dict[str, dict[str, str]] = {}
    for h, host in enumerate(fabric.hosts):
        labels: dict[str, str] = {}
        for key, names in zip(keys, tiers, strict=True):
            if h not in names:
                break
            labels[key] = label_value(slurm_name(names[h]))
        if host.nvlink_domain:
            labels[st.accelerator] = label_value(host.nvlink_domain)
        out[host.name] = labels
    return out


def node_labels_json(fabric: Fabric, style: str = "nvidia") -> str:
    """The labels as ``kubectl get nodes -o json`` prints nodes (only names and labels), one ``List``."""
    items = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
        for name, labels in node_labels(fabric, style).items()
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=1, ensure_ascii=False) + "\n"


def node_labels_kubectl(fabric: Fabric, style: str = "nvidia") -> str:
    """One ``kubectl label node --overwrite NAME k=v ...`` per host with labels."""
    lines = [
        "kubectl label node --overwrite "
        + " ".join([shlex.quote(name), *(shlex.quote(f"{k}={v}") for k, v in labels.items())])
        for name, labels in node_labels(fabric, style).items()
        if labels
    ]
    return "\n".join(lines) + ("\n" if lines else "")
