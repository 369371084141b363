"""What every InfiniBand link-list tool output becomes before it is a ``Fabric``, and the assembly into one.

``ibnetdiscover`` (every format), ``iblinkinfo`` and the LST files of opensm and ibdiagnet all describe the
same things: nodes (switches, CAs, routers) and, per port, the port at the other end of its cable. Each
parser turns its text into a ``LinkDump``; ``assemble`` does the rest once:

- Every link may be listed from both sides; the two sides are one link, and two ports that contradict each
  other are a ``ParseError`` at the line. Parallel links stay separate links. A link to a node the dump
  never describes is an error at that line (a truncated or edited file).
- SHARP "Aggregation Node" CAs are switch internals: the CA and its link are dropped and counted. Routers
  are not modelled: they and their links are dropped with a warning.
- An unknown rate (``4x???``) is taken from the other side; failing that, 4xSDR is assumed (the slowest rate
  a live 4x link reports) and a warning says so, so a link is never silently invented fast. Two sides that
  print different rates give the slower one, with a warning.
- Switch names: ``MF0;<name>:<model>/U1`` (Mellanox/NVIDIA managed switches) -> name and model.
- Hosts come from ``attribution.attribute`` (its module says in which order of trust). No GPUs are known
  from a fabric dump, so every ``Host`` has ``gpus=()`` until inventories are merged (``fabric.merge``).
- A node-name map or host map entry whose GUID is not in the dump is an error at its line (a typo would
  otherwise leave a host silently unnamed), unless the caller allows a site-wide map. In a ports report a
  CA is known by its port GUID; a map's node GUID matches the port GUID equal to it or to it plus a port
  number (how ConnectX adapters and ibsim number their ports).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from gpupool.domain.errors import FabricError, ParseError
from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Hca, Host, Link, Port, Switch
from gpupool.fabric.parsers._text import NaturalKey, natural_key
from gpupool.fabric.parsers.attribution import CaFacts, NameSources, attribute
from gpupool.fabric.parsers.nodemap import GuidNames
from gpupool.fabric.rates import parse_rate

SW, CA, RT = "SW", "CA", "RT"
KIND_WORD = {SW: "switch", CA: "CA", RT: "router"}

_MF0_RE = re.compile(r"MF0;([^:]+):([^/]+)/U\d+")
_AGGREGATION_RE = re.compile(r"\bAggregation Node$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class IbImport:
    """An imported fabric plus what the import could not take at face value."""

    fabric: Fabric
    aggregation_nodes: int  # SHARP "Aggregation Node" CAs dropped (switch internals, not hosts)
    inferred_hcas: int  # HCAs attributed to a host by the sibling-port heuristic
    unattributed_hcas: int  # HCAs left without a host (fabric.unattributed_hcas)
    warnings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DumpNode:
    kind: str
    guid: str
    description: str
    ports: int
    lid: int
    system_guid: str = ""


@dataclass(frozen=True, slots=True)
class HalfLink:
    """One node's view of a link; ``a`` is the node the line belongs to."""

    a: Port
    b: Port
    b_kind: str
    width: int
    speed: str | None  # None: the tool printed an unknown speed
    line: int


@dataclass(frozen=True, slots=True)
class LinkDump:
    nodes: tuple[DumpNode, ...]
    halves: tuple[HalfLink, ...]
    ports_report: bool  # True when CAs are known by port GUID and a link may be listed from one side only
    # Names the tool substituted from a node-name map where the node's own line kept its description
    # (``ibnetdiscover --node-name-map`` renames peers in port lines only): GUID -> name.
    tool_names: tuple[tuple[str, str], ...] = ()


def split_switch_description(description: str) -> tuple[str, str]:
    """``"MF0;A09-P1-IBLEAF-04-04:MQM9701/U1"`` -> ``("A09-P1-IBLEAF-04-04", "MQM9701")``; others unchanged."""
    m = _MF0_RE.fullmatch(description)
    return (m.group(1), m.group(2)) if m else (description, "")


def link_rate(token: str, source: str, line: int) -> tuple[int, str | None]:
    """``4xNDR`` -> ``(4, "NDR")``; ``4x???`` -> ``(4, None)``; anything else is a ``ParseError``."""
    rate = parse_rate(token)
    if rate is not None:
        return rate
    m = re.fullmatch(r"(\d+)x(?:\?+|undefined.*)", token)
    if m is not None:
        return int(m.group(1)), None
    raise ParseError(f"unknown link rate {token!r} (expected width x speed such as 4xNDR)", source=source, line=line)


def _links(
    dump: LinkDump, nodes: Mapping[str, DumpNode], skip: frozenset[str], source: str, warnings: list[str]
) -> list[Link]:
    """Both sides of each link merged into one ``Link``; contradictions are errors."""
    peer: dict[Port, tuple[Port, int]] = {}
    merged: dict[tuple[Port, Port], list[HalfLink]] = {}
    for h in dump.halves:
        target = nodes.get(h.b.node)
        if target is None:
            raise ParseError(
                f"link to {KIND_WORD[h.b_kind]} {h.b.node} port {h.b.port}, which has no block of its own in the dump",
                source=source,
                line=h.line,
            )
        if target.kind != h.b_kind:
            raise ParseError(
                f"link names {h.b.node} as a {KIND_WORD[h.b_kind]} but it is a {KIND_WORD[target.kind]}",
                source=source,
                line=h.line,
            )
        if h.a.node in skip or h.b.node in skip:
            continue
        if h.a.node == h.b.node and h.a.port == h.b.port:
            raise ParseError(f"port {h.a.node}[{h.a.port}] is linked to itself", source=source, line=h.line)
        for x, y in ((h.a, h.b), (h.b, h.a)):
            prev = peer.get(x)
            if prev is not None and prev[0] != y:
                raise ParseError(
                    f"port {x.node}[{x.port}] is linked to {y.node}[{y.port}] here "
                    f"but to {prev[0].node}[{prev[0].port}] on line {prev[1]}",
                    source=source,
                    line=h.line,
                )
            peer.setdefault(x, (y, h.line))
        key = (h.a, h.b) if (h.a.node, h.a.port) <= (h.b.node, h.b.port) else (h.b, h.a)
        merged.setdefault(key, []).append(h)
    links: list[Link] = []
    one_sided = 0
    for sides in merged.values():
        first = sides[0]
        if len({s.a for s in sides}) < 2:
            one_sided += 1
        known = [Link(first.a, first.b, s.width, s.speed) for s in sides if s.speed is not None]
        if known:
            slowest = min(known, key=lambda x: x.gbps)  # never take a link faster than one side says
            if any(x.gbps != slowest.gbps for x in known):
                warnings.append(
                    f"line {first.line}: the two sides of link {first.a.node}[{first.a.port}] - "
                    f"{first.b.node}[{first.b.port}] print different rates; took {slowest.width}x{slowest.speed}"
                )
            links.append(slowest)
        else:
            warnings.append(
                f"line {first.line}: link {first.a.node}[{first.a.port}] - {first.b.node}[{first.b.port}] "
                f"has an unknown speed; assumed {first.width}xSDR"
            )
            links.append(Link(first.a, first.b, first.width, "SDR"))
    if one_sided and not dump.ports_report:
        warnings.append(f"{one_sided} links are listed by one side only")
    return links


def _keyed(
    entries: Mapping[str, str],
    nodes: Mapping[str, DumpNode],
    ports_report: bool,
    allow_unknown: bool,
    warnings: list[str],
) -> dict[str, str]:
    """A map's entries re-keyed to the dump's node identities; an entry naming no node is an error at its line."""
    out: dict[str, str] = {}
    unknown: list[str] = []
    for guid, name in entries.items():
        if guid in nodes:
            out[guid] = name
            continue
        as_port = (
            [p for k in range(1, 3) if (p := f"{int(guid, 16) + k:016x}") in nodes and nodes[p].kind == CA]
            if ports_report
            else []
        )
        if as_port:
            out[as_port[0]] = name
        else:
            unknown.append(guid)
    if unknown and not allow_unknown:
        source = entries.source if isinstance(entries, GuidNames) else "<map>"
        line = entries.lines.get(unknown[0]) if isinstance(entries, GuidNames) else None
        raise ParseError(
            f"GUID {unknown[0]} is not in the fabric ({len(unknown)} entries name no node of the dump; "
            "a site-wide map may be allowed to)",
            source=source,
            line=line,
        )
    if unknown:
        warnings.append(f"{len(unknown)} map entries name GUIDs that are not in the dump (e.g. {unknown[0]})")
    return out


def assemble(dump: LinkDump, source: str, sources: NameSources, *, allow_unknown_guids: bool = False) -> IbImport:
    """The fabric a dump describes, hosts attributed by ``sources`` (see the module notes)."""
    warnings: list[str] = []
    nodes = {nd.guid: nd for nd in dump.nodes}
    node_names = _keyed(sources.node_names, nodes, dump.ports_report, allow_unknown_guids, warnings)
    host_map = _keyed(sources.host_map, nodes, dump.ports_report, allow_unknown_guids, warnings)
    sources = replace(sources, node_names={**dict(dump.tool_names), **node_names}, host_map=host_map)
    node_names = dict(sources.node_names)
    aggregation = frozenset(
        g for g, nd in nodes.items() if nd.kind == CA and _AGGREGATION_RE.search(node_names.get(g, nd.description))
    )
    routers = frozenset(g for g, nd in nodes.items() if nd.kind == RT)
    if routers:
        warnings.append(f"{len(routers)} routers and their links are not modelled and were dropped")
    links = _links(dump, nodes, aggregation | routers, source, warnings)

    switches: list[Switch] = []
    for nd in dump.nodes:
        if nd.kind == SW:
            name, model = split_switch_description(node_names.get(nd.guid, nd.description))
            switches.append(Switch(nd.guid, name or f"S-{nd.guid}", nd.ports, model, nd.lid))

    ca_ports: dict[str, list[tuple[str, int]]] = defaultdict(list)
    ca_gbps: dict[str, float] = defaultdict(float)
    for link in links:
        for x, y in ((link.a, link.b), (link.b, link.a)):
            if nodes[x.node].kind == CA:
                ca_gbps[x.node] = max(ca_gbps[x.node], link.gbps)
                if nodes[y.node].kind == SW:
                    ca_ports[x.node].append((y.node, y.port))
    cas = [nd for nd in dump.nodes if nd.kind == CA and nd.guid not in aggregation]
    facts = [CaFacts(nd.guid, nd.description, nd.system_guid, nd.ports, tuple(ca_ports.get(nd.guid, ()))) for nd in cas]
    found, notes = attribute(
        facts, sources, switch_names={s.guid: s.name for s in switches}, ports_report=dump.ports_report
    )
    warnings.extend(notes)
    hcas = tuple(
        Hca(
            guid=nd.guid,
            name=found[nd.guid].device,
            description=found[nd.guid].description,
            lid=nd.lid,
            rate_gbps=ca_gbps.get(nd.guid, 0.0),
            host=found[nd.guid].host,
            system_guid=nd.system_guid,
            found_by=found[nd.guid].found_by,
            unattributed_reason=found[nd.guid].reason,
        )
        for nd in cas
    )
    hosts = hosts_of(hcas, ca_ports)
    if aggregation:
        warnings.append(f"dropped {len(aggregation)} SHARP aggregation nodes (switch internals, not hosts)")
    name = Path(source).stem if not source.startswith("<") else source.strip("<>")
    try:
        fabric = Fabric(switches=switches, hcas=hcas, hosts=hosts, links=links, name=name)
    except FabricError as exc:
        raise ParseError(f"inconsistent fabric: {exc.message}", source=source) from exc
    return IbImport(
        fabric=fabric,
        aggregation_nodes=len(aggregation),
        inferred_hcas=sum(1 for h in hcas if h.found_by == "port-position"),
        unattributed_hcas=len(fabric.unattributed_hcas),
        warnings=tuple(warnings),
    )


def hosts_of(hcas: tuple[Hca, ...], ca_ports: Mapping[str, list[tuple[str, int]]]) -> list[Host]:
    """Hosts in natural name order, each with its HCAs in device order.

    An HCA without a device name (attributed by rail) sorts as the device most named HCAs on its leaf have.
    """
    leaf_devices: dict[str, Counter[str]] = defaultdict(Counter)
    for h in hcas:
        if h.name:
            for sw, _ in ca_ports.get(h.guid, []):
                leaf_devices[sw][h.name] += 1

    def device_key(h: Hca) -> tuple[NaturalKey, str]:
        device = h.name
        ports = ca_ports.get(h.guid, [])
        if not device and ports and leaf_devices[ports[0][0]]:
            device = leaf_devices[ports[0][0]].most_common(1)[0][0]
        return natural_key(device), h.guid

    by_host: dict[str, list[Hca]] = defaultdict(list)
    for h in hcas:
        if h.host is not None:
            by_host[h.host].append(h)
    return [
        Host(name=host, gpus=(), hcas=tuple(h.guid for h in sorted(members, key=device_key)))
        for host, members in sorted(by_host.items(), key=lambda kv: natural_key(kv[0]))
    ]
