"""Slurm ``topology.conf``: the tree plugin's switches into a ``Fabric``, the block plugin's blocks into values.

Syntax as Slurm's own config parser reads it: ``Key=Value`` pairs separated by whitespace, keys case
insensitive, values optionally in double quotes, ``#`` starts a comment unless escaped as ``\\#``, and a line
ending in an odd number of backslashes continues on the next line (joined as is, the way Slurm joins it).
Each line starts with its kind: ``SwitchName=`` (with ``Switches=``, ``Nodes=``, ``LinkSpeed=``) in the tree
form, ``BlockName=`` (with ``Nodes=``) or ``BlockSizes=`` in the block form; one file holds one form.

Slurm knows no HCAs, GPUs or link rates. The fabric built from the tree form therefore gives each node one
synthetic HCA named ``slurm0`` (its GUID a stable hash of the node name) on its leaf switch, and hosts have
no GPUs (``gpus=()``); inventory comes from the agents. Links are declared at the model's default rate
(4x NDR), so every link weighs the same and oversubscription reflects link counts only. ``LinkSpeed`` is in
arbitrary units (Slurm itself ignores it), so it is validated and kept on ``SlurmSwitch`` but not mapped.

Stricter than Slurm where Slurm only warns: a node under two leaf switches and a node in two blocks are
errors here, because a placement built on either would be wrong.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from gpupool.domain.errors import FabricError, ParseError
from gpupool.fabric.fabric import Fabric
from gpupool.fabric.hostlist import expand
from gpupool.fabric.model import Hca, Host, Link, Port, Switch
from gpupool.fabric.parsers._text import is_decimal, read_tool_output

__all__ = [
    "SYNTHETIC_HCA_NAME",
    "SlurmBlock",
    "SlurmBlocks",
    "SlurmSwitch",
    "SlurmTree",
    "parse_block_conf",
    "parse_slurm_topology",
    "parse_topology_conf",
    "read_block_conf",
    "read_topology_conf",
    "synthetic_guid",
    "tree_to_fabric",
]

SYNTHETIC_HCA_NAME = "slurm0"
MAX_SWITCH_NAME = 64  # Slurm rejects a SwitchName longer than HOST_NAME_MAX
_MAX_BLOCK_LEVEL = 15  # Slurm accepts block sizes up to base x 2^15
_UINT32_MAX = (1 << 32) - 1

_KEYS = {k.lower(): k for k in ("SwitchName", "Switches", "Nodes", "LinkSpeed", "BlockName", "BlockSizes")}
_LINE_KEYS: dict[str, frozenset[str]] = {
    "SwitchName": frozenset({"Switches", "Nodes", "LinkSpeed"}),
    "BlockName": frozenset({"Nodes"}),
    "BlockSizes": frozenset(),
}
_PAIR = re.compile(r'\s*([^=\s"]+)=("[^"]*"|[^\s"]*)')
_NAME_BAD = re.compile(r"[\[\],=\"\s]")
_ALIAS = re.compile(r"#\s*([A-Za-z0-9._-]+)=(\S.*)")


@dataclass(frozen=True, slots=True)
class SlurmSwitch:
    """One ``SwitchName=`` line: a leaf lists ``nodes``, an upper switch its child ``switches``."""

    name: str
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()
    link_speed: int | None = None  # arbitrary units; None when the line does not set it
    line: int = 0


@dataclass(frozen=True, slots=True)
class SlurmTree:
    """The tree form of ``topology.conf``, validated: names unique, children defined, no loops."""

    switches: tuple[SlurmSwitch, ...]
    source: str = ""
    aliases: tuple[tuple[str, str], ...] = ()  # ``# switch.1.1=leaf-1-1`` comments: Slurm name -> real name

    def leaf_nodes(self) -> dict[str, tuple[str, ...]]:
        """Leaf switch name -> its nodes, for the switches that list nodes."""
        return {s.name: s.nodes for s in self.switches if s.nodes}


@dataclass(frozen=True, slots=True)
class SlurmBlock:
    name: str
    nodes: tuple[str, ...]
    line: int = 0


_Holder = TypeVar("_Holder", SlurmSwitch, SlurmBlock)  # a line that holds nodes under a name


@dataclass(frozen=True, slots=True)
class SlurmBlocks:
    """The block form: blocks in file order (Slurm aggregates neighbours in this order) and ``BlockSizes``.

    ``block_sizes`` is ``()`` when the file sets none; Slurm then plans with the first block's node count
    times 1, 2, 4, 8 and 16.
    """

    blocks: tuple[SlurmBlock, ...]
    block_sizes: tuple[int, ...] = ()
    source: str = ""
    aliases: tuple[tuple[str, str], ...] = ()  # ``# block001=nvl1`` comments: block name -> domain name

    @property
    def base_block_size(self) -> int:
        """Nodes in Slurm's base block: the first ``BlockSizes`` value, else the first block's node count."""
        if self.block_sizes:
            return self.block_sizes[0]
        return len(self.blocks[0].nodes) if self.blocks else 0

    def node_block(self) -> dict[str, str]:
        """Node name -> the name of its block."""
        return {n: b.name for b in self.blocks for n in b.nodes}


def _strip_comment(line: str) -> str:
    """Cut at the first '#' preceded by an even number of backslashes (Slurm's rule), then unescape ``\\#``."""
    backslashes = 0
    for i, ch in enumerate(line):
        if ch == "#" and backslashes % 2 == 0:
            line = line[:i]
            break
        backslashes = backslashes + 1 if ch == "\\" else 0
    return line.replace("\\#", "#")


def _continues(line: str) -> tuple[str, bool]:
    """Slurm's continuation: trailing whitespace, then an odd run of backslashes, joins the next line."""
    body = line.rstrip()
    run = len(body) - len(body.rstrip("\\"))
    if run % 2 == 1:
        return body[:-1], True
    return line, False


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first physical line number, joined text) for each non-blank logical line."""
    parts: list[str] = []
    first = 0
    for number, raw in enumerate(text.split("\n"), start=1):
        piece, more = _continues(_strip_comment(raw.rstrip("\r")))
        if not parts:
            first = number
        parts.append(piece)
        if more:
            continue
        joined = "".join(parts).strip()
        parts = []
        if joined:
            yield first, joined
    if parts and "".join(parts).strip():
        yield first, "".join(parts).strip()


def _pairs(text: str, line: int, source: str) -> list[tuple[str, str]]:
    """``Key=Value`` pairs with canonical keys; anything else on the line is an error naming it."""
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _PAIR.match(text, pos)
        if m is None:
            found = text[pos:].split()[0] if text[pos:].split() else text[pos:]
            if not out:
                raise ParseError(
                    f"not a topology.conf line: expected SwitchName=, BlockName= or BlockSizes=, found {found!r}",
                    source=source,
                    line=line,
                )
            raise ParseError(f"expected Key=Value, found {found!r}", source=source, line=line)
        key_text, value = m.group(1), m.group(2)
        if value.startswith('"'):
            value = value[1:-1]
        key = _KEYS.get(key_text.lower())
        if not out and key is None:
            raise ParseError(
                f"not a topology.conf line: it starts with {key_text}=, not SwitchName=, BlockName= or BlockSizes="
                " (a slurm.conf line, or another file?)",
                source=source,
                line=line,
            )
        if not out and key not in _LINE_KEYS:
            raise ParseError(
                f"a line must start with SwitchName=, BlockName= or BlockSizes=; {key}= comes after one of them",
                source=source,
                line=line,
            )
        if key is None:
            allowed = ", ".join(sorted(_LINE_KEYS[out[0][0]])) or "nothing else"
            raise ParseError(
                f"unknown key {key_text!r} on a {out[0][0]} line (allowed: {allowed})", source=source, line=line
            )
        out.append((key, value))
        pos = m.end()
        if pos < len(text) and not text[pos].isspace():
            raise ParseError(f"expected whitespace after {key_text}={m.group(2)}", source=source, line=line)
    seen: set[str] = set()
    for key, _ in out:
        if key in seen:
            raise ParseError(f"{key}= given twice on one line", source=source, line=line)
        seen.add(key)
        if key != out[0][0] and key not in _LINE_KEYS[out[0][0]]:
            allowed = ", ".join(sorted(_LINE_KEYS[out[0][0]])) or "nothing else"
            raise ParseError(
                f"{key}= does not belong on a {out[0][0]} line (allowed: {allowed})", source=source, line=line
            )
    return out


def _hostlist(value: str, key: str, line: int, source: str) -> tuple[str, ...]:
    try:
        names = expand(value)
    except ValueError as e:
        raise ParseError(f"bad hostlist in {key}=: {e}", source=source, line=line) from e
    if not names:
        raise ParseError(f"{key}= is empty", source=source, line=line)
    return tuple(dict.fromkeys(names))  # Slurm keeps node sets as bitmaps, so a repeated name counts once


def _object_name(value: str, key: str, line: int, source: str) -> str:
    if not value:
        raise ParseError(f"{key}= is empty", source=source, line=line)
    if _NAME_BAD.search(value):
        raise ParseError(
            f"{key}={value!r}: a name cannot hold '[', ']', ',', '=', quotes or spaces", source=source, line=line
        )
    if len(value) > MAX_SWITCH_NAME:
        raise ParseError(f"{key}= is longer than {MAX_SWITCH_NAME} characters", source=source, line=line)
    return value


def _uint(value: str, key: str, line: int, source: str) -> int:
    if not is_decimal(value) or int(value) > _UINT32_MAX:
        raise ParseError(f"{key}={value!r} is not a non-negative 32-bit integer", source=source, line=line)
    return int(value)


# ---------------------------------------------------------------- parsing


def _aliases(text: str) -> tuple[tuple[str, str], ...]:
    """``# <name>=<real name>`` comment lines, as NVIDIA Topograph (``# switch.2.1=spine-1``) and gpupool
    (``# leaf_1='leaf 1'``) write them beside a name Slurm could not take as is."""
    out: dict[str, str] = {}
    for raw in text.split("\n"):
        m = _ALIAS.fullmatch(raw.strip())
        if m is not None:
            real = m.group(2).strip()
            if len(real) >= 2 and real[0] == real[-1] and real[0] in "'\"":
                real = real[1:-1]
            out.setdefault(m.group(1), real)
    return tuple(out.items())


def parse_slurm_topology(text: str, *, source: str = "<topology.conf>") -> SlurmTree | SlurmBlocks:
    """Parse either form of ``topology.conf``; which one is decided by the first line's kind."""
    switch_lines: list[SlurmSwitch] = []
    blocks: list[SlurmBlock] = []
    block_sizes: tuple[int, ...] | None = None
    sizes_line = 0
    form = ""
    for line, body in _logical_lines(text):
        pairs = _pairs(body, line, source)
        kind, value = pairs[0]
        fields = dict(pairs[1:])
        this_form = "tree" if kind == "SwitchName" else "block"
        if form and this_form != form:
            raise ParseError(
                f"{kind}= line in a {form} topology: one file holds either SwitchName= or BlockName= lines",
                source=source,
                line=line,
            )
        form = this_form
        if kind == "SwitchName":
            name = _object_name(value, kind, line, source)
            if "Nodes" in fields and "Switches" in fields:
                raise ParseError(
                    f"switch {name} has both Nodes= and Switches=; Slurm rejects that", source=source, line=line
                )
            switch_lines.append(
                SlurmSwitch(
                    name=name,
                    nodes=_hostlist(fields["Nodes"], "Nodes", line, source) if "Nodes" in fields else (),
                    switches=_hostlist(fields["Switches"], "Switches", line, source) if "Switches" in fields else (),
                    link_speed=_uint(fields["LinkSpeed"], "LinkSpeed", line, source) if "LinkSpeed" in fields else None,
                    line=line,
                )
            )
        elif kind == "BlockName":
            name = _object_name(value, kind, line, source)
            if "Nodes" not in fields:
                raise ParseError(f"block {name} has no Nodes=", source=source, line=line)
            blocks.append(SlurmBlock(name, _hostlist(fields["Nodes"], "Nodes", line, source), line))
        else:
            if block_sizes is not None:
                raise ParseError(f"BlockSizes= set twice (first on line {sizes_line})", source=source, line=line)
            block_sizes = _block_sizes(value, line, source)
            sizes_line = line
    if form == "tree":
        return replace(_validate_tree(switch_lines, source), aliases=_aliases(text))
    if form == "block":
        return replace(_validate_blocks(blocks, block_sizes or (), sizes_line, source), aliases=_aliases(text))
    raise ParseError("no SwitchName= or BlockName= lines: an empty topology", source=source)


def _block_sizes(value: str, line: int, source: str) -> tuple[int, ...]:
    texts = value.split(",")
    if not value or any(not is_decimal(t) or int(t) == 0 for t in texts):
        raise ParseError(f"BlockSizes={value!r}: expected positive integers separated by ','", source=source, line=line)
    sizes = tuple(int(t) for t in texts)
    base = sizes[0]
    for s in sizes:
        ratio, rest = divmod(s, base)
        if rest or ratio & (ratio - 1) or ratio.bit_length() - 1 > _MAX_BLOCK_LEVEL:
            raise ParseError(
                f"BlockSizes: {s} is not the base size {base} times a power of two (at most 2^{_MAX_BLOCK_LEVEL})",
                source=source,
                line=line,
            )
    return sizes


def _claim(
    item: _Holder, by_name: dict[str, _Holder], owner: dict[str, _Holder], words: tuple[str, str], source: str
) -> None:
    """Record a switch or block by name and as the holder of its nodes; ``words`` name the kind and the clash.

    A name defined twice, or a node held by two leaves or two blocks, is an error at the later line.
    """
    kind, clash = words
    prior = by_name.get(item.name)
    if prior is not None:
        raise ParseError(
            f"{kind} {item.name} is defined twice (first on line {prior.line})", source=source, line=item.line
        )
    by_name[item.name] = item
    for node in item.nodes:
        other = owner.get(node)
        if other is not None:
            raise ParseError(
                f"node {node} is {clash}, {other.name} (line {other.line}) and {item.name}",
                source=source,
                line=item.line,
            )
        owner[node] = item


def _validate_tree(switches: list[SlurmSwitch], source: str) -> SlurmTree:
    by_name: dict[str, SlurmSwitch] = {}
    node_leaf: dict[str, SlurmSwitch] = {}
    for sw in switches:
        _claim(sw, by_name, node_leaf, ("switch", "under two leaf switches"), source)
    for sw in switches:
        for child in sw.switches:
            if child == sw.name:
                raise ParseError(f"switch {sw.name} lists itself in Switches=", source=source, line=sw.line)
            if child not in by_name:
                raise ParseError(
                    f"switch {sw.name} lists undefined switch {child} in Switches=", source=source, line=sw.line
                )
    _check_no_loop(switches, by_name, source)
    return SlurmTree(tuple(switches), source)


def _check_no_loop(switches: list[SlurmSwitch], by_name: dict[str, SlurmSwitch], source: str) -> None:
    """Slurm's levels need a tree (or a DAG); a loop in Switches= is fatal there, so it is an error here."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in switches:
        if state.get(root.name):
            continue
        stack: list[tuple[str, int]] = [(root.name, 0)]
        path: list[str] = [root.name]
        state[root.name] = 1
        while stack:
            name, i = stack[-1]
            children = by_name[name].switches
            if i == len(children):
                stack.pop()
                path.pop()
                state[name] = 2
                continue
            stack[-1] = (name, i + 1)
            child = children[i]
            if state.get(child) == 1:
                loop = [*path[path.index(child) :], child]
                raise ParseError(
                    f"Switches= lines form a loop ({' -> '.join(loop)}); a topology must be a tree",
                    source=source,
                    line=by_name[name].line,
                )
            if not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append((child, 0))


def _validate_blocks(blocks: list[SlurmBlock], sizes: tuple[int, ...], sizes_line: int, source: str) -> SlurmBlocks:
    if not blocks:
        raise ParseError("BlockSizes= without any BlockName= line", source=source, line=sizes_line)
    seen: dict[str, SlurmBlock] = {}
    node_block: dict[str, SlurmBlock] = {}
    base = sizes[0] if sizes else len(blocks[0].nodes)
    for b in blocks:
        _claim(b, seen, node_block, ("block", "in two blocks"), source)
        if len(b.nodes) < base:
            # Slurm refuses to start on this: every block must fill at least one base block.
            raise ParseError(
                f"block {b.name} has {len(b.nodes)} nodes, fewer than the base block size {base}",
                source=source,
                line=b.line,
            )
    return SlurmBlocks(tuple(blocks), sizes, source)


# ---------------------------------------------------------------- to a Fabric


def synthetic_guid(kind: str, name: str) -> str:
    """A stable 16-hex-digit GUID for a Slurm object that has none: the same name always gives the same GUID."""
    return hashlib.blake2b(f"gpupool-slurm:{kind}:{name}".encode(), digest_size=8).hexdigest()


def tree_to_fabric(tree: SlurmTree, *, name: str = "slurm-topology") -> Fabric:
    """Switches, synthetic HCAs and links for a validated tree (see the module notes for what is synthetic).

    A switch keeps the real name a ``# <name>=<real name>`` comment gives it (Topograph's ``switch.1.1``).
    """
    switches: list[Switch] = []
    hcas: list[Hca] = []
    hosts: list[Host] = []
    links: list[Link] = []
    next_port: dict[str, int] = {}
    guid_of: dict[str, str] = {}

    def port(guid: str) -> Port:
        p = next_port.get(guid, 0) + 1
        next_port[guid] = p
        return Port(guid, p)

    for sw in tree.switches:
        guid_of[sw.name] = synthetic_guid("switch", sw.name)
    for sw in tree.switches:
        leaf = guid_of[sw.name]
        for node in sw.nodes:
            hca = synthetic_guid("hca", node)
            hcas.append(Hca(guid=hca, name=SYNTHETIC_HCA_NAME, description=f"{node} {SYNTHETIC_HCA_NAME}", host=node))
            hosts.append(Host(name=node, hcas=(hca,)))
            links.append(Link(port(hca), port(leaf)))
        for child in sw.switches:
            links.append(Link(port(guid_of[child]), port(leaf)))
    real = dict(tree.aliases)
    for sw in tree.switches:
        guid = guid_of[sw.name]
        switches.append(Switch(guid=guid, name=real.get(sw.name, sw.name), ports=max(next_port.get(guid, 0), 1)))
    try:
        return Fabric(switches=switches, hcas=hcas, hosts=hosts, links=links, name=name)
    except FabricError as e:  # only a GUID hash collision can get here; say so rather than crash
        raise ParseError(f"cannot build the fabric: {e.message}", source=tree.source) from e


def _fabric_name(source: str) -> str:
    stem = Path(source).name.split(".")[0] if source and not source.startswith("<") else ""
    return stem or "slurm-topology"


def parse_topology_conf(text: str, *, source: str = "<topology.conf>", name: str | None = None) -> Fabric:
    """The tree form of ``topology.conf`` as a ``Fabric``; a block-form file is an error pointing elsewhere."""
    parsed = parse_slurm_topology(text, source=source)
    if isinstance(parsed, SlurmBlocks):
        raise ParseError(
            "this is a topology/block file (BlockName= lines), not a switch tree; import it with "
            "`gpupool fabric import slurm`, which reads both forms",
            source=source,
            line=parsed.blocks[0].line,
        )
    return tree_to_fabric(parsed, name=name or _fabric_name(source))


def read_topology_conf(path: str | Path, *, name: str | None = None) -> Fabric:
    return parse_topology_conf(read_tool_output(path), source=str(path), name=name)


def parse_block_conf(text: str, *, source: str = "<topology.conf>") -> SlurmBlocks:
    """The block form of ``topology.conf``; a tree-form file is an error pointing elsewhere."""
    parsed = parse_slurm_topology(text, source=source)
    if isinstance(parsed, SlurmTree):
        raise ParseError(
            "this is a topology/tree file (SwitchName= lines), not blocks",
            source=source,
            line=parsed.switches[0].line,
        )
    return parsed


def read_block_conf(path: str | Path) -> SlurmBlocks:
    return parse_block_conf(read_tool_output(path), source=str(path))
