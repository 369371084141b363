"""A fabric as Slurm sees topology: ``topology.conf`` (tree or block plugin) and ``topology.yaml`` (block).

Slurm's tree plugin wants every node under exactly one leaf switch. In a rail-optimised fabric a host sits
under one leaf per rail, so each scalable unit is written as one switch (``su01``) standing for its rail
leaves, with the spines above it; Slurm then keeps a job inside an SU where it can, which is what rail
alignment needs. Single-homed fabrics are written one line per physical leaf. Unattributed HCAs are not
nodes and are left out; a host reaching several SUs is listed under its first, and a comment says so.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Literal

from gpupool.fabric.fabric import Fabric
from gpupool.fabric.hostlist import compress, hostlist_key
from gpupool.fabric.model import Tier

__all__ = ["block_sizes", "slurm_name", "topology_block", "topology_conf"]

_MAX_NAME = 64  # Slurm rejects a SwitchName longer than HOST_NAME_MAX
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")  # also keeps names valid inside a hostlist (no [ ] ,) and in YAML
_MAX_BLOCK_LEVEL = 15
_YAML_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_YAML_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}


def slurm_name(name: str) -> str:
    """``name`` made safe for a Slurm switch or block name: only ``A-Z a-z 0-9 . _ -``, at most 64 characters."""
    return _UNSAFE.sub("_", name)[:_MAX_NAME] or "switch"


class _Names:
    """Sanitised, unique names; a clash gets ``_2``, ``_3``... so two switches never merge in Slurm."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def take(self, name: str) -> str:
        base = slurm_name(name)
        out, n = base, 1
        while out in self.used:
            n += 1
            suffix = f"_{n}"
            out = base[: _MAX_NAME - len(suffix)] + suffix
        self.used.add(out)
        return out


def _names_text(names: Iterable[str]) -> str:
    """A compact list of names for a comment: a hostlist when the names allow one."""
    listed = sorted(set(names), key=hostlist_key)
    try:
        return compress(listed)
    except ValueError:
        return ", ".join(repr(n) for n in listed)


def _su_label(i: int, count: int) -> str:
    return f"su{i + 1:0{max(2, len(str(count)))}d}"


def _host_groups(fabric: Fabric, groups: list[tuple[int, ...]]) -> tuple[list[list[str]], list[str], list[str]]:
    """Host names per group of leaves (each host in its first group), hosts in several groups, hosts in none."""
    leaf_group = {leaf: g for g, leaves in enumerate(groups) for leaf in leaves}
    members: list[list[str]] = [[] for _ in groups]
    multi: list[str] = []
    orphans: list[str] = []
    for h, host in enumerate(fabric.hosts):
        found = sorted({leaf_group[s] for s in fabric.host_leaves[h] if s in leaf_group})
        if not found:
            orphans.append(host.name)
            continue
        if len(found) > 1:
            multi.append(host.name)
        members[found[0]].append(host.name)
    return members, multi, orphans


def _children(fabric: Fabric) -> dict[int, set[int]]:
    """Switch index -> the switches one tier below it that it links to."""
    tiers = [int(s.tier) for s in fabric.switches]
    out: dict[int, set[int]] = defaultdict(set)
    for link in fabric.links:
        try:
            a = fabric.switch_index(link.a.node)
            b = fabric.switch_index(link.b.node)
        except KeyError:
            continue  # a host link
        if tiers[a] > tiers[b]:
            out[a].add(b)
        elif tiers[b] > tiers[a]:
            out[b].add(a)
    return out


def topology_conf(fabric: Fabric) -> str:
    """``topology.conf`` for Slurm's tree plugin: leaves (or SUs) with their nodes, spines and cores above.

    Lines go top-down (cores, spines, leaves), each tier in natural name order. Host names that cannot be
    written in a hostlist (holding ``[``, ``]``, ``,`` or whitespace) raise ``ValueError``.
    """
    rail_optimised = any(len(leaves) > 1 for leaves in fabric.su_leaves)
    groups = list(fabric.su_leaves)
    names = _Names()
    if rail_optimised:
        group_names = [names.take(_su_label(i, len(groups))) for i in range(len(groups))]
    else:
        group_names = [names.take(fabric.switches[leaves[0]].name) for leaves in groups]
    members, multi, orphans = _host_groups(fabric, groups)

    # Each switch's Slurm name: a leaf becomes its group, an upper switch keeps its own (sanitised) name.
    # A group whose hosts all went to an earlier group gets no line, so nothing may list it as a child.
    emitted: dict[int, str] = {leaf: group_names[g] for g, leaves in enumerate(groups) if members[g] for leaf in leaves}
    children = _children(fabric)
    upper: dict[Tier, list[tuple[str, str, list[str]]]] = defaultdict(list)
    for tier in (Tier.SPINE, Tier.CORE):
        for s in fabric.switches_at(tier):
            kids = sorted({emitted[c] for c in children.get(s, ()) if c in emitted}, key=hostlist_key)
            if not kids:
                continue  # a switch with nothing below it is no use to Slurm (and an empty leaf would mislead)
            original = fabric.switches[s].name
            emitted[s] = names.take(original)
            upper[tier].append((emitted[s], original, kids))

    lines = [
        f"# Slurm topology.conf (topology/tree) for fabric {fabric.name!r}, written by gpupool.",
    ]
    if rail_optimised:
        lines.append(
            "# Rail-optimised: Slurm wants each node under exactly one leaf, so each scalable unit stands as one"
            " switch for its rail leaves."
        )
    if multi:
        lines.append(f"# Hosts reaching more than one group, listed under their first: {_names_text(multi)}")
    if orphans:
        lines.append(f"# Hosts under no leaf switch, left out: {_names_text(orphans)}")
    for tier in (Tier.CORE, Tier.SPINE):
        for name, original, kids in sorted(upper[tier], key=lambda e: hostlist_key(e[0])):
            if name != original:
                lines.append(f"# {name}={original!r}")
            lines.append(f"SwitchName={name} Switches={compress(kids)}")
    order = sorted(range(len(groups)), key=lambda g: hostlist_key(group_names[g]))
    for g in order:
        if rail_optimised:
            leaf_names = [fabric.switches[s].name for s in groups[g]]
            lines.append(f"# {group_names[g]} stands for {_names_text(leaf_names)}")
        elif group_names[g] != fabric.switches[groups[g][0]].name:
            lines.append(f"# {group_names[g]}={fabric.switches[groups[g][0]].name!r}")
        if members[g]:
            lines.append(f"SwitchName={group_names[g]} Nodes={compress(members[g])}")
    return "\n".join(lines) + "\n"


def block_sizes(block_nodes: list[int]) -> list[int]:
    """Slurm ``BlockSizes``: the smallest block's node count, doubled while that many blocks exist.

    Slurm's base block is the first size and refuses a block with fewer nodes, so the base is the smallest
    block; each further size must be the base times a power of two (as NVIDIA's topograph infers them).
    """
    if not block_nodes:
        return []
    base = min(block_nodes)
    levels = min(len(block_nodes).bit_length() - 1, _MAX_BLOCK_LEVEL)
    return [base << i for i in range(levels + 1)]


def _yaml_str(s: str) -> str:
    if _YAML_PLAIN.fullmatch(s) and s.lower() not in _YAML_RESERVED:
        return s
    return json.dumps(s)  # a JSON string is a valid YAML double-quoted scalar


def _nvlink_blocks(fabric: Fabric) -> tuple[list[tuple[str, str, list[str]]], list[str]]:
    """(block name, its comment, nodes) per multi-node NVLink domain, and the hosts in none.

    The comment is Topograph's ``# block001=nvl1`` form, so a reader can recover the domain's own name.
    """
    domains: dict[str, list[str]] = defaultdict(list)
    outside: list[str] = []
    for host in fabric.hosts:
        (domains[host.nvlink_domain] if host.nvlink_domain else outside).append(host.name)
    names = _Names()
    blocks = [
        (name, f"{name}={d}", nodes)
        for d, nodes in sorted(domains.items(), key=lambda kv: hostlist_key(kv[0]))
        if (name := names.take(d))
    ]
    return blocks, outside


def topology_block(fabric: Fabric, form: Literal["conf", "yaml"] = "conf", by: Literal["su", "nvlink"] = "su") -> str:
    """Slurm's block plugin: ``topology.conf`` lines or ``topology.yaml``, one block per scalable unit, or
    (``by="nvlink"``) per multi-node NVLink domain, as NVIDIA Topograph writes blocks for GB200 racks.

    The YAML is the Slurm 25.05 ``topology.yaml`` layout: a list of topologies, here one named ``default``
    and marked ``cluster_default``. Raises ``ValueError`` when no host is in any block.
    """
    groups = list(fabric.su_leaves)
    if by == "nvlink":
        blocks, orphans = _nvlink_blocks(fabric)
        multi: list[str] = []
        unit = "multi-node NVLink domain"
    else:
        members, multi, orphans = _host_groups(fabric, groups)
        blocks = [
            (label, f"{label} stands for {_names_text(fabric.switches[s].name for s in groups[i])}", nodes)
            for i, nodes in enumerate(members)
            if nodes and (label := _su_label(i, len(groups)))
        ]
        unit = "scalable unit"
    if not blocks:
        raise ValueError(f"fabric {fabric.name!r} has no hosts in any {unit}, so no blocks")
    sizes = block_sizes([len(nodes) for _, _, nodes in blocks])
    notes = [
        f"Slurm topology ({'topology.yaml' if form == 'yaml' else 'topology/block'}) for fabric {fabric.name!r},"
        f" written by gpupool: one block per {unit}."
    ]
    if multi:
        notes.append(f"Hosts reaching more than one scalable unit, listed under their first: {_names_text(multi)}")
    if orphans:
        where = "in no multi-node NVLink domain" if by == "nvlink" else "under no leaf switch"
        notes.append(f"Hosts {where}, left out: {_names_text(orphans)}")
    if form == "conf":
        lines = [f"# {n}" for n in notes]
        for name, comment, nodes in blocks:
            lines.append(f"# {comment}")
            lines.append(f"BlockName={name} Nodes={compress(nodes)}")
        lines.append("BlockSizes=" + ",".join(str(s) for s in sizes))
        return "\n".join(lines) + "\n"
    if form != "yaml":
        raise ValueError(f"form must be 'conf' or 'yaml', not {form!r}")
    lines = [f"# {n}" for n in notes]
    lines += [
        "- topology: default",
        "  cluster_default: true",
        "  block:",
        "    block_sizes: [" + ", ".join(str(s) for s in sizes) + "]",
        "    blocks:",
    ]
    for name, _, nodes in blocks:
        lines.append(f"      - block: {_yaml_str(name)}")
        lines.append(f"        nodes: {_yaml_str(compress(nodes))}")
    return "\n".join(lines) + "\n"
