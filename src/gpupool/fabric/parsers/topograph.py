"""NVIDIA Topograph's outputs -> ``Fabric``: Slurm ``topology.conf`` (tree or block) and Kubernetes node labels.

Topograph (github.com/NVIDIA/topograph) publishes a cluster's topology in two ways:

- **Slurm** ``topology.conf``: the tree plugin's ``SwitchName=switch.<tier>.<n>`` lines with
  ``# switch.1.1=leaf-1-1`` comments naming the real switch, or the block plugin's ``BlockName=block001``
  lines (one per accelerator domain, an NVLink rack) with ``# block001=nvl1`` comments and ``BlockSizes=``.
  ``read_slurm_fabric`` reads either form (and gpupool's own exports).
- **Kubernetes node labels**, in three generations of keys: ``network.topology.nvidia.com/{accelerator,
  leaf,spine,core}`` (before v1.0), ``network.topology.nvidia.com/tier-N`` with
  ``xclr.topology.nvidia.com/domain`` (mid 2026), and ``fabric.topograph.run/tier-N`` with
  ``accelerator.topograph.run/domain`` (v1.0 on). Tier 0 is the switch closest to the node.
  ``parse_node_labels`` reads ``kubectl get nodes -o json`` (a ``List``/``NodeList`` of nodes, or one node)
  and ``kubectl get nodes --show-labels``.

Labels and blocks know no HCAs, GPUs or link rates: like the Slurm tree, each node gets one synthetic HCA on
its tier-0 switch (``slurm.tree_to_fabric``), switch GUIDs are stable hashes of (tier, value), and the
accelerator domain becomes the host's multi-node NVLink domain. A block becomes a leaf switch holding its
nodes; ``BlockSizes`` aggregate consecutive blocks (Slurm's rule) into switches one tier up per size.
"""

from __future__ import annotations

import bisect
import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpupool.domain.errors import FabricError, ParseError
from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Hca, Host, Link, Port, Switch
from gpupool.fabric.parsers._text import line_starts, read_tool_output
from gpupool.fabric.parsers.slurm import (
    SYNTHETIC_HCA_NAME,
    SlurmBlocks,
    parse_slurm_topology,
    synthetic_guid,
    tree_to_fabric,
)

__all__ = [
    "LABEL_STYLES",
    "blocks_to_fabric",
    "parse_node_labels",
    "parse_slurm_fabric",
    "read_node_labels",
    "read_slurm_fabric",
]


@dataclass(frozen=True, slots=True)
class LabelStyle:
    tiers: tuple[str, ...]  # keys for tier 0, 1, 2 (fixed keys); () when the style numbers its tiers
    tier_prefix: str  # "network.topology.nvidia.com/tier-" for numbered styles; "" for fixed keys
    accelerator: str
    sub_domain: str = ""


LABEL_STYLES: dict[str, LabelStyle] = {
    "nvidia": LabelStyle(
        tiers=tuple(f"network.topology.nvidia.com/{t}" for t in ("leaf", "spine", "core")),
        tier_prefix="",
        accelerator="network.topology.nvidia.com/accelerator",
    ),
    "nvidia-tiers": LabelStyle(
        (),
        "network.topology.nvidia.com/tier-",
        "xclr.topology.nvidia.com/domain",
        "xclr.topology.nvidia.com/sub-domain",
    ),
    "topograph": LabelStyle(
        (), "fabric.topograph.run/tier-", "accelerator.topograph.run/domain", "accelerator.topograph.run/sub-domain"
    ),
}
_SHOW_LABELS_HEAD = re.compile(r"NAME\s+STATUS\s+ROLES\s+AGE\s+VERSION\s+LABELS")


# ---------------------------------------------------------------- Slurm


def blocks_to_fabric(blocks: SlurmBlocks, *, name: str = "slurm-blocks", nvlink: bool = False) -> Fabric:
    """A leaf switch per block, upper switches per ``BlockSizes`` level; ``nvlink``: blocks are NVLink domains.

    ``BlockSizes=8,16,32`` over 8-node blocks: a switch above each 2 consecutive blocks, one above each 4.
    Without larger sizes one switch joins every block, so the fabric stays connected (how the blocks are
    cabled to each other is not in the file).
    """
    real = dict(blocks.aliases)
    base = blocks.base_block_size or 1
    ratios = [s // base for s in blocks.block_sizes[1:]] or [len(blocks.blocks)]
    switches: list[Switch] = []
    hcas: list[Hca] = []
    hosts: list[Host] = []
    links: list[Link] = []
    ports: dict[str, int] = {}

    def connect(a: str, b: str) -> None:
        for g in (a, b):
            ports[g] = ports.get(g, 0) + 1
        links.append(Link(Port(a, ports[a]), Port(b, ports[b])))

    below: list[str] = []
    for b in blocks.blocks:
        leaf = synthetic_guid("block", b.name)
        below.append(leaf)
        switches.append(Switch(leaf, real.get(b.name, b.name), 0))
        for node in b.nodes:
            hca = synthetic_guid("hca", node)
            hcas.append(Hca(hca, SYNTHETIC_HCA_NAME, f"{node} {SYNTHETIC_HCA_NAME}", host=node))
            hosts.append(Host(node, hcas=(hca,), nvlink_domain=real.get(b.name, b.name) if nvlink else ""))
            connect(hca, leaf)
    done = 1
    for level, ratio in enumerate(ratios, start=1):
        step = max(ratio // done, 1)
        if len(below) <= 1 or level > 2:  # the model has three tiers; more levels add nothing it can use
            break
        above = []
        for i in range(0, len(below), step):
            up = synthetic_guid("block-level", f"{level}:{i // step}")
            above.append(up)
            switches.append(Switch(up, f"blocks-l{level}-{i // step + 1}", 0))
            for child in below[i : i + step]:
                connect(child, up)
        below, done = above, done * step
    switches = [Switch(s.guid, s.name, max(ports.get(s.guid, 0), 1)) for s in switches]
    try:
        return Fabric(switches=switches, hcas=hcas, hosts=hosts, links=links, name=name)
    except FabricError as e:
        raise ParseError(f"cannot build the fabric: {e.message}", source=blocks.source) from e


def parse_slurm_fabric(text: str, *, source: str, name: str | None = None, nvlink_blocks: bool = False) -> Fabric:
    """Either form of ``topology.conf`` (gpupool's, Topograph's or hand-written) as a ``Fabric``."""
    parsed = parse_slurm_topology(text, source=source)
    stem = Path(source).name.split(".")[0] if not source.startswith("<") else ""
    if isinstance(parsed, SlurmBlocks):
        return blocks_to_fabric(parsed, name=name or stem or "slurm-blocks", nvlink=nvlink_blocks)
    return tree_to_fabric(parsed, name=name or stem or "slurm-topology")


def read_slurm_fabric(path: str | Path, *, name: str | None = None, nvlink_blocks: bool = False) -> Fabric:
    return parse_slurm_fabric(read_tool_output(path), source=str(path), name=name, nvlink_blocks=nvlink_blocks)


# ---------------------------------------------------------------- Kubernetes node labels


@dataclass(frozen=True, slots=True)
class _Node:
    name: str
    labels: Mapping[str, str]
    line: int


def _line_of(text: str, starts: list[int], needle: str, after: int = 0) -> int:
    """The 1-based line of the first ``needle`` at or after offset ``after`` (1 when it is not there)."""
    at = text.find(needle, after)
    return 1 if at < 0 else bisect.bisect_right(starts, at)


def _nodes_from_json(text: str, source: str) -> list[_Node]:
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(f"invalid JSON: {e.msg}", source=source, line=e.lineno) from e
    items = data.get("items") if isinstance(data, dict) and "items" in data else [data]
    if not isinstance(items, list):
        raise ParseError("'items' is not a list of nodes", source=source, line=1)
    starts = line_starts(text)
    out: list[_Node] = []
    pos = 0
    for i, item in enumerate(items):
        meta = item.get("metadata") if isinstance(item, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(meta, dict) or not isinstance(name, str) or not name:
            line = _line_of(text, starts, '"metadata"', pos) if i else 1
            raise ParseError(
                f"node {i + 1} has no metadata.name (kubectl get nodes -o json?)", source=source, line=line
            )
        at = max(text.find(json.dumps(name, ensure_ascii=False), pos), text.find(json.dumps(name), pos))
        line = bisect.bisect_right(starts, at) if at >= 0 else 1
        pos = max(pos, at + 1)
        labels = meta.get("labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise ParseError(f"node {name}: metadata.labels is not a map of strings", source=source, line=line)
        out.append(_Node(name, labels, line))
    return out


def _nodes_from_table(lines: list[str], source: str) -> list[_Node]:
    """``kubectl get nodes --show-labels``: NAME STATUS ROLES AGE VERSION LABELS, labels ``k=v`` by commas."""
    out: list[_Node] = []
    for n, raw in enumerate(lines[1:], start=2):
        if not raw.strip():
            continue
        words = raw.split()
        if len(words) != 6:
            raise ParseError(
                f"expected 6 columns (NAME .. LABELS), found {len(words)} (truncated?)", source=source, line=n
            )
        labels: dict[str, str] = {}
        if words[5] != "<none>":
            for pair in words[5].split(","):
                key, eq, value = pair.partition("=")
                if not eq or not key:
                    raise ParseError(f"label {pair!r} is not key=value", source=source, line=n)
                labels[key] = value
        out.append(_Node(words[0], labels, n))
    return out


def _tiers(node: _Node, source: str) -> tuple[list[str], str]:
    """The node's tier values (closest first) and accelerator domain, from the newest key family it has."""
    for style in ("topograph", "nvidia-tiers", "nvidia"):
        st = LABEL_STYLES[style]
        keys = list(st.tiers) or [k for k in node.labels if k.startswith(st.tier_prefix)]
        if not any(k in node.labels for k in keys) and st.accelerator not in node.labels:
            continue
        if st.tiers:
            values = [node.labels.get(k, "") for k in st.tiers]
        else:
            numbers = sorted(int(k[len(st.tier_prefix) :]) for k in keys if k[len(st.tier_prefix) :].isdecimal())
            values = [node.labels.get(f"{st.tier_prefix}{i}", "") for i in range(max(numbers, default=-1) + 1)]
        while values and not values[-1]:
            values.pop()
        if "" in values:
            missing = values.index("")
            raise ParseError(
                f"node {node.name} has a tier-{len(values) - 1} label but no tier-{missing} label",
                source=source,
                line=node.line,
            )
        return values, node.labels.get(st.accelerator, "")
    return [], ""


def parse_node_labels(text: str, *, source: str = "<node labels>", name: str | None = None) -> Fabric:
    """Topograph's node labels (``kubectl get nodes -o json`` or ``--show-labels``) as a ``Fabric``."""
    lines = text.split("\n")
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    nodes = _nodes_from_table(lines, source) if _SHOW_LABELS_HEAD.fullmatch(first) else _nodes_from_json(text, source)
    switches: dict[tuple[int, str], Switch] = {}
    hcas: list[Hca] = []
    hosts: list[Host] = []
    links: dict[tuple[str, str], None] = {}
    seen: dict[str, int] = {}
    for node in nodes:
        if node.name in seen:
            raise ParseError(
                f"node {node.name} is listed twice (first on line {seen[node.name]})", source=source, line=node.line
            )
        seen[node.name] = node.line
        tiers, accelerator = _tiers(node, source)
        guids = []
        for t, value in enumerate(tiers):
            sw = switches.setdefault((t, value), Switch(synthetic_guid(f"label-tier{t}", value), value, 0))
            guids.append(sw.guid)
        for lo, hi in itertools.pairwise(guids):
            links[(lo, hi)] = None
        hca = synthetic_guid("hca", node.name)
        if guids:
            hcas.append(Hca(hca, SYNTHETIC_HCA_NAME, f"{node.name} {SYNTHETIC_HCA_NAME}", host=node.name))
            links[(hca, guids[0])] = None
        hosts.append(Host(node.name, hcas=(hca,) if guids else (), nvlink_domain=accelerator))
    if not switches:
        raise ParseError(
            "no node carries Topograph topology labels (fabric.topograph.run/tier-N, network.topology.nvidia.com/*)",
            source=source,
            line=max(1, len(lines)),
        )
    ports: dict[str, int] = {}
    out_links = []
    for a, b in links:
        for g in (a, b):
            ports[g] = ports.get(g, 0) + 1
        out_links.append(Link(Port(a, ports[a]), Port(b, ports[b])))
    sws = [Switch(s.guid, s.name, max(ports.get(s.guid, 0), 1)) for s in switches.values()]
    stem = Path(source).name.split(".")[0] if not source.startswith("<") else ""
    try:
        return Fabric(switches=sws, hcas=hcas, hosts=hosts, links=out_links, name=name or stem or "node-labels")
    except FabricError as e:
        raise ParseError(f"cannot build the fabric: {e.message}", source=source) from e


def read_node_labels(path: str | Path, *, name: str | None = None) -> Fabric:
    return parse_node_labels(read_tool_output(path), source=str(path), name=name)
