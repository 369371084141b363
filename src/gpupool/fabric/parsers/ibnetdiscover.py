"""``ibnetdiscover`` output -> ``Fabric``: the default topology file and the ``-p`` (ports) report.

Decisions, each forced by a fixture or by how infiniband-diags prints:

- GUIDs are normalised to 16 lowercase hex digits. In the default format a node is its node GUID (``"S-..."``,
  ``"H-..."``); the ``-p`` report prints only port GUIDs, so there an HCA is its port GUID (a switch's port
  GUIDs all equal its node GUID, so switches are the same in both formats) and a switch's port count is
  the highest port number seen.
- Every link appears from both sides in the default format and usually in ``-p``; the two sides are one
  link, and two ports that contradict each other are a ``ParseError``. Parallel links stay separate links.
- libibnetdisc prints a block for every node it has a port line to, so in the default format a port line
  naming a GUID without a block means a truncated or edited file: a ``ParseError`` at that line.
  A link listed by one side only is kept, with a warning.
- SHARP "Aggregation Node" CAs are switch internals: the CA and its link are dropped and counted. Routers
  (``Rt``/``RT``) are not modelled: they and their links are dropped with a warning.
- An unknown rate (``4x???``) on a link is taken from the other side; failing that, 4xSDR is assumed (the
  slowest rate a live 4x link reports) and a warning says so, so a link is never silently invented fast.
- Switch names: ``MF0;<name>:<model>/U1`` (Mellanox/NVIDIA managed switches) -> name and model;
  any other description is the name as is.
- Hosts come from CA descriptions ``"<host> <device>"`` (see ``split_description``). Generic descriptions,
  OS default host names and host names used by two machines are never taken as hosts; such HCAs are
  attributed only by the rail-sibling rule in ``_infer_hosts``, or stay unattributed and counted.
  No GPUs are known from a fabric dump, so every ``Host`` has ``gpus=()``.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpupool.domain.errors import FabricError, ParseError
from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Hca, Host, Link, Port, Switch
from gpupool.fabric.parsers._text import NaturalKey, guid_from_hex, natural_key, normalise_guid, read_tool_output
from gpupool.fabric.parsers.nodemap import read_node_name_map
from gpupool.fabric.rates import parse_rate

SW, CA, RT = "SW", "CA", "RT"
_KIND_WORD = {SW: "switch", CA: "CA", RT: "router"}

# Host names that operating systems ship with; many machines carry them, so they identify none.
DEFAULT_HOSTNAMES = frozenset(
    {"localhost", "localhost.localdomain", "ubuntu", "debian", "centos", "rhel", "rocky", "fedora", "sles"}
)

_HEADER_RE = re.compile(r"(?:vendid|devid|sysimgguid|switchguid|caguid|rtguid)=0x[0-9a-fA-F]+(?:\([0-9a-fA-F]+\))?")
_NODE_RE = re.compile(r'(Switch|Ca|Rt)\s+(\d+)\s+"([SHR])-([0-9a-fA-F]{1,16})"\s*#\s*"(.*)"(.*)')
_SWITCH_TAIL_RE = re.compile(r"\s*(?:enhanced|base)\s+port\s+0\s+lid\s+(\d+)\s+lmc\s+\d+\s*")
_PORT_RE = re.compile(
    r'\[(\d+)\](?:\[ext \d+\])?(?:\(([0-9a-fA-F]{1,16})\))?\s*"([SHR])-([0-9a-fA-F]{1,16})"\[(\d+)\](?:\[ext \d+\])?'
    r'(?:\(([0-9a-fA-F]{1,16})\))?\s*#\s*(?:lid\s+(\d+)\s+lmc\s+\d+\s+)?"(.*)"\s+lid\s+(\d+)\s+(\S+)(?:\s+\w+=\S*)*\s*'
)
_PORTS_START_RE = re.compile(r"(?:SW|CA|RT)\s+\d+\s+\d+\s+0x")
_PORTS_LINE_RE = re.compile(
    r"(SW|CA|RT)\s+(\d+)\s+(\d+)\s+0x([0-9a-fA-F]{1,16})\s+(\S+)\s+(\S+)"
    r"(?:\s+-\s+(SW|CA|RT)\s+(\d+)\s+(\d+)\s+0x([0-9a-fA-F]{1,16})\s+\((.*)\)|(.*))"
)
_QUOTED_PAIR_RE = re.compile(r"\s*'(.*)'\s+-\s+'(.*)'\s*")
_PREFIX_KIND = {"S": SW, "H": CA, "R": RT}
_NODE_KIND = {"Switch": SW, "Ca": CA, "Rt": RT}
_MF0_RE = re.compile(r"MF0;([^:]+):([^/]+)/U\d+")
_AGGREGATION_RE = re.compile(r"\bAggregation Node$", re.IGNORECASE)
_DEVICE_RE = re.compile(r"[A-Za-z][A-Za-z0-9]*[_-]\d+|[a-z]+\d+")  # mlx5_5, HCA-6, hfi1_0, qib0
_HOST_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_VENDOR_WORD_RE = re.compile(r"MT\d+|Mellanox|NVIDIA|ConnectX.*", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class IbImport:
    """An imported fabric plus what the import could not take at face value."""

    fabric: Fabric
    aggregation_nodes: int  # SHARP "Aggregation Node" CAs dropped (switch internals, not hosts)
    inferred_hcas: int  # HCAs attributed to a host by the sibling-port heuristic
    unattributed_hcas: int  # HCAs left without a host (fabric.unattributed_hcas)
    warnings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Node:
    kind: str
    guid: str
    description: str
    ports: int
    lid: int


@dataclass(frozen=True, slots=True)
class _Half:
    """One node's view of a link; ``a`` is the node the line belongs to."""

    a: Port
    b: Port
    b_kind: str
    width: int
    speed: str | None  # None: the tool printed an unknown speed
    line: int


@dataclass(frozen=True, slots=True)
class _Dump:
    nodes: tuple[_Node, ...]
    halves: tuple[_Half, ...]
    ports_report: bool  # True for ``-p``: CAs are ports, and a link may be listed from one side only


def split_switch_description(description: str) -> tuple[str, str]:
    """``"MF0;A09-P1-IBLEAF-04-04:MQM9701/U1"`` -> ``("A09-P1-IBLEAF-04-04", "MQM9701")``; others unchanged."""
    m = _MF0_RE.fullmatch(description)
    return (m.group(1), m.group(2)) if m else (description, "")


def split_description(description: str) -> tuple[str | None, str, str]:
    """A CA description -> ``(host or None, device, kind)``; kind is ``named``, ``default-host`` or ``generic``.

    Only ``"<host> <device>"`` names a host (``a08-p1-dgx-04-c17 mlx5_5``); vendor strings such as
    ``MT4129 ConnectX7   Mellanox Technologies`` are generic, and an OS default host name keeps its
    device but names no host.
    """
    words = description.split()
    if len(words) == 2 and _DEVICE_RE.fullmatch(words[1]) and _HOST_RE.fullmatch(words[0]):
        if _VENDOR_WORD_RE.fullmatch(words[0]):
            return None, "", "generic"
        if words[0].lower() in DEFAULT_HOSTNAMES:
            return None, words[1], "default-host"
        return words[0], words[1], "named"
    return None, "", "generic"


def _rate(token: str, source: str, line: int) -> tuple[int, str | None]:
    """``4xNDR`` -> ``(4, "NDR")``; ``4x???`` -> ``(4, None)``; anything else is a ``ParseError``."""
    rate = parse_rate(token)
    if rate is not None:
        return rate
    m = re.fullmatch(r"(\d+)x(?:\?+|undefined.*)", token)
    if m is not None:
        return int(m.group(1)), None
    raise ParseError(f"unknown link rate {token!r} (expected width x speed such as 4xNDR)", source=source, line=line)


# ---------------------------------------------------------------------------------------------- default format


def _parse_default(lines: list[str], source: str) -> _Dump:
    nodes: list[_Node] = []
    halves: list[_Half] = []
    declared: dict[str, int] = {}
    cur: tuple[str, str, int, int] | None = None  # kind, guid, port count, lid
    cur_desc = ""
    cur_lid: int | None = None
    header_line = 0  # first line of a block whose Switch/Ca line has not come yet

    def close() -> None:
        nonlocal cur
        if cur is not None:
            kind, guid, ports, lid = cur
            nodes.append(_Node(kind, guid, cur_desc, ports, lid if cur_lid is None else cur_lid))
        cur = None

    for n, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            if header_line:
                raise ParseError(
                    f"node block starting on line {header_line} has no Switch or Ca line", source=source, line=n
                )
            close()
        elif line.startswith("#"):
            continue
        elif line.startswith("["):
            if cur is None:
                raise ParseError("port line outside a Switch or Ca block", source=source, line=n)
            m = _PORT_RE.fullmatch(line)
            if m is None:
                raise ParseError(f"cannot parse port line {line!r} (truncated?)", source=source, line=n)
            port = int(m.group(1))
            if not 1 <= port <= cur[2]:
                raise ParseError(f"port {port} outside 1..{cur[2]} of {cur[1]}", source=source, line=n)
            if cur[0] != SW and cur_lid is None and m.group(7) is not None:
                cur_lid = int(m.group(7))
            width, speed = _rate(m.group(10), source, n)
            remote = Port(guid_from_hex(m.group(4)), int(m.group(5)))
            halves.append(_Half(Port(cur[1], port), remote, _PREFIX_KIND[m.group(3)], width, speed, n))
        elif _HEADER_RE.fullmatch(line):
            close()
            header_line = header_line or n
        else:
            m = _NODE_RE.fullmatch(line)
            if m is None:
                raise ParseError(f"not a line of an ibnetdiscover topology file: {line[:80]!r}", source=source, line=n)
            close()
            kind, guid = _NODE_KIND[m.group(1)], guid_from_hex(m.group(4))
            if _PREFIX_KIND[m.group(3)] != kind:
                raise ParseError(f"{m.group(1)} line names node {m.group(3)}-{m.group(4)}", source=source, line=n)
            if guid in declared:
                raise ParseError(f"node {guid} declared twice (first on line {declared[guid]})", source=source, line=n)
            lid = 0
            if kind == SW:
                tail = _SWITCH_TAIL_RE.fullmatch(m.group(6))
                if tail is None:
                    raise ParseError("Switch line lacks 'port 0 lid N lmc N' (truncated?)", source=source, line=n)
                lid = int(tail.group(1))
            elif m.group(6).strip():
                raise ParseError(
                    f"unexpected text after the description: {m.group(6).strip()!r}", source=source, line=n
                )
            declared[guid] = n
            cur, cur_desc, cur_lid, header_line = (kind, guid, int(m.group(2)), lid), m.group(5).strip(), None, 0
    if header_line:
        raise ParseError(
            f"file ends inside the node block starting on line {header_line} (truncated?)",
            source=source,
            line=len(lines),
        )
    close()
    return _Dump(tuple(nodes), tuple(halves), ports_report=False)


# ---------------------------------------------------------------------------------------------- -p format


def _split_pair(text: str) -> tuple[str, str]:
    """``'a' - 'b'`` -> ``(a, b)``. Old releases print names unquoted; those split at the first `` - ``."""
    m = _QUOTED_PAIR_RE.fullmatch(text)
    if m is not None:
        return m.group(1).strip(), m.group(2).strip()
    left, _, right = text.partition(" - ")
    return left.strip(), right.strip()


def _unquote(text: str) -> str:
    t = text.strip()
    return t[1:-1].strip() if len(t) >= 2 and t[0] == t[-1] == "'" else t


def _parse_ports(lines: list[str], source: str) -> _Dump:
    kinds: dict[str, str] = {}
    first: dict[str, int] = {}
    desc: dict[str, str] = {}
    lid: dict[str, int] = {}
    top_port: dict[str, int] = {}
    halves: list[_Half] = []

    def see(kind: str, guid: str, node_lid: int, port: int, name: str, n: int) -> None:
        if guid in kinds and kinds[guid] != kind:
            raise ParseError(
                f"GUID {guid} is a {_KIND_WORD[kinds[guid]]} on line {first[guid]} and a {_KIND_WORD[kind]} here",
                source=source,
                line=n,
            )
        if guid not in kinds:
            kinds[guid], first[guid], lid[guid], top_port[guid] = kind, n, node_lid, port
        top_port[guid] = max(top_port[guid], port)
        if name and not desc.get(guid):
            desc[guid] = name

    for n, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _PORTS_LINE_RE.fullmatch(line)
        if m is None or (m.group(12) is not None and re.match(r"-\s+(?:SW|CA|RT)\b", m.group(12).strip())):
            raise ParseError(f"not a line of an ibnetdiscover -p report: {line[:80]!r}", source=source, line=n)
        kind, guid, port = m.group(1), guid_from_hex(m.group(4)), int(m.group(3))
        if m.group(7) is None:
            see(kind, guid, int(m.group(2)), port, _unquote(m.group(12)), n)
            continue
        name, remote_name = _split_pair(m.group(11))
        rkind, rguid, rport = m.group(7), guid_from_hex(m.group(10)), int(m.group(9))
        see(kind, guid, int(m.group(2)), port, name, n)
        see(rkind, rguid, int(m.group(8)), rport, remote_name, n)
        width, speed = _rate(f"{m.group(5)}{m.group(6)}", source, n)
        halves.append(_Half(Port(guid, port), Port(rguid, rport), rkind, width, speed, n))
    nodes = tuple(_Node(k, g, desc.get(g, ""), top_port[g], lid[g]) for g, k in kinds.items())
    return _Dump(nodes, tuple(halves), ports_report=True)


# ---------------------------------------------------------------------------------------------- assembly


def _links(
    dump: _Dump, nodes: Mapping[str, _Node], skip: frozenset[str], source: str, warnings: list[str]
) -> list[Link]:
    """Both sides of each link merged into one ``Link``; contradictions are errors."""
    peer: dict[Port, tuple[Port, int]] = {}
    merged: dict[tuple[Port, Port], list[_Half]] = {}
    for h in dump.halves:
        target = nodes.get(h.b.node)
        if target is None:
            raise ParseError(
                f"link to {_KIND_WORD[h.b_kind]} {h.b.node} port {h.b.port}, which has no block of its own in the dump",
                source=source,
                line=h.line,
            )
        if target.kind != h.b_kind:
            raise ParseError(
                f"link names {h.b.node} as a {_KIND_WORD[h.b_kind]} but it is a {_KIND_WORD[target.kind]}",
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
        known = [s for s in sides if s.speed is not None]
        if known:
            links.append(Link(first.a, first.b, known[0].width, known[0].speed or "SDR"))
        else:
            warnings.append(
                f"line {first.line}: link {first.a.node}[{first.a.port}] - {first.b.node}[{first.b.port}] "
                f"has an unknown speed; assumed {first.width}xSDR"
            )
            links.append(Link(first.a, first.b, first.width, "SDR"))
    if one_sided and not dump.ports_report:
        warnings.append(f"{one_sided} links are listed by one side only")
    return links


def _infer_hosts(
    named: Mapping[str, str], unnamed: Iterable[str], ca_ports: Mapping[str, list[tuple[str, int]]]
) -> dict[str, tuple[str, str, int]]:
    """Rail-sibling attribution: unnamed HCA -> (host, leaf, port), only where the evidence is unambiguous.

    In a rail-optimised SU, port p of every rail leaf serves the same node slot. An unnamed HCA on leaf X
    port p goes to host H when the named HCAs at port p of X's sibling leaves (leaves sharing at least half
    of the smaller one's named hosts, the rule ``Fabric`` uses for SUs) all belong to H, at least one does,
    H has no named HCA on X, and no other unnamed HCA on X points at H.
    """
    leaf_hosts: dict[str, set[str]] = defaultdict(set)
    leaf_port_ca: dict[str, dict[int, str]] = defaultdict(dict)
    for ca, ports in ca_ports.items():
        for sw, p in ports:
            leaf_port_ca[sw][p] = ca
            if ca in named:
                leaf_hosts[sw].add(named[ca])
    host_leaves: dict[str, set[str]] = defaultdict(set)
    for sw, members in leaf_hosts.items():
        for h in members:
            host_leaves[h].add(sw)
    shared: Counter[tuple[str, str]] = Counter()
    for leaves in host_leaves.values():
        for a in leaves:
            for b in leaves:
                if a != b:
                    shared[(a, b)] += 1
    siblings: dict[str, list[str]] = defaultdict(list)
    for (a, b), k in shared.items():
        if 2 * k >= min(len(leaf_hosts[a]), len(leaf_hosts[b])):
            siblings[a].append(b)
    guesses: dict[str, str] = {}
    claims: dict[tuple[str, str], set[str]] = defaultdict(set)
    for ca in unnamed:
        hosts: set[str] = set()
        for sw, p in ca_ports.get(ca, []):
            votes = {named[o] for y in siblings.get(sw, []) if (o := leaf_port_ca[y].get(p)) is not None and o in named}
            if len(votes) != 1 or votes <= leaf_hosts[sw]:
                hosts.clear()
                break
            hosts |= votes
        if len(hosts) == 1:
            guesses[ca] = host = hosts.pop()
            for sw, _ in ca_ports[ca]:
                claims[(sw, host)].add(ca)
    out: dict[str, tuple[str, str, int]] = {}
    for ca, host in guesses.items():
        if all(claims[(sw, host)] == {ca} for sw, _ in ca_ports[ca]):
            sw, p = ca_ports[ca][0]
            out[ca] = (host, sw, p)
    return out


def _node_names(node_names: Mapping[str, str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, name in (node_names or {}).items():
        guid = normalise_guid(key)
        if guid is None:
            raise ParseError(f"node name map key {key!r} is not a node GUID", source="<node_names>")
        out[guid] = name
    return out


def _assemble(dump: _Dump, source: str, node_names: Mapping[str, str] | None) -> IbImport:
    warnings: list[str] = []
    names = _node_names(node_names)
    nodes = {nd.guid: nd for nd in dump.nodes}
    aggregation = frozenset(g for g, nd in nodes.items() if nd.kind == CA and _AGGREGATION_RE.search(nd.description))
    routers = frozenset(g for g, nd in nodes.items() if nd.kind == RT)
    if routers:
        warnings.append(f"{len(routers)} routers and their links are not modelled and were dropped")
    links = _links(dump, nodes, aggregation | routers, source, warnings)
    desc = {g: names.get(g, nd.description) for g, nd in nodes.items()}

    switches: list[Switch] = []
    for nd in dump.nodes:
        if nd.kind == SW:
            name, model = split_switch_description(desc[nd.guid])
            switches.append(Switch(nd.guid, name or f"S-{nd.guid}", nd.ports, model, nd.lid))

    cas = [nd for nd in dump.nodes if nd.kind == CA and nd.guid not in aggregation]
    split = {nd.guid: split_description(desc[nd.guid]) for nd in cas}
    # Two machines with one host name: the name identifies neither. In -p each port is listed on its own,
    # so the two ports of one dual-port card share a description without being two machines.
    uses = Counter((h, dev, nd.ports if dump.ports_report else 0) for nd in cas for h, dev, _ in [split[nd.guid]] if h)
    ambiguous = {k[0] for k, c in uses.items() if c > 1}
    if ambiguous:
        listed = ", ".join(sorted(ambiguous, key=natural_key))
        warnings.append(f"host names used by more than one machine, left unattributed: {listed}")
    named = {g: h for g, (h, _, _) in split.items() if h is not None and h not in ambiguous}

    ca_ports: dict[str, list[tuple[str, int]]] = defaultdict(list)
    ca_gbps: dict[str, float] = defaultdict(float)
    for link in links:
        for x, y in ((link.a, link.b), (link.b, link.a)):
            if nodes[x.node].kind == CA:
                ca_gbps[x.node] = max(ca_gbps[x.node], link.gbps)
                if nodes[y.node].kind == SW:
                    ca_ports[x.node].append((y.node, y.port))
    unnamed = [nd.guid for nd in cas if nd.guid not in named]
    inferred = _infer_hosts(named, unnamed, ca_ports)
    switch_name = {s.guid: s.name for s in switches}
    for g, (host, sw, p) in inferred.items():
        warnings.append(
            f"HCA {g} ({desc[g]!r}) on {switch_name[sw]} port {p} attributed to host {host}: "
            f"the named HCAs at port {p} of its sibling leaves all belong to {host}"
        )

    generic = Counter(desc[g] for g in unnamed if g not in inferred and split[g][2] == "generic")
    for text, count in sorted(generic.items(), key=lambda kv: (-kv[1], kv[0])):
        warnings.append(f"{count} HCAs with the generic description {text!r} left without a host")
    defaults = sorted({desc[g].split()[0] for g in unnamed if g not in inferred and split[g][2] == "default-host"})
    if defaults:
        warnings.append(f"HCAs with default host names ({', '.join(defaults)}) left without a host")

    hca_host = {**named, **{g: v[0] for g, v in inferred.items()}}
    hcas = tuple(
        Hca(
            guid=nd.guid,
            name=split[nd.guid][1],
            description=desc[nd.guid],
            lid=nd.lid,
            rate_gbps=ca_gbps.get(nd.guid, 0.0),
            host=hca_host.get(nd.guid),
        )
        for nd in cas
    )
    hosts = _hosts(hcas, ca_ports)
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
        inferred_hcas=len(inferred),
        unattributed_hcas=len(fabric.unattributed_hcas),
        warnings=tuple(warnings),
    )


def _hosts(hcas: tuple[Hca, ...], ca_ports: Mapping[str, list[tuple[str, int]]]) -> list[Host]:
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


# ---------------------------------------------------------------------------------------------- public API


def parse_ibnetdiscover(
    text: str, *, source: str = "<ibnetdiscover>", node_names: Mapping[str, str] | None = None
) -> IbImport:
    """Import either ``ibnetdiscover`` format (detected from the first non-comment line).

    ``node_names`` (node GUID -> name, as ``read_node_name_map`` gives) replaces switch and CA descriptions.
    """
    lines = [line.rstrip("\r") for line in text.split("\n")]
    if lines and not lines[-1]:
        lines.pop()  # the newline that ends the last line starts no line of its own
    first = next((s for s in (line.strip() for line in lines) if s and not s.startswith("#")), "")
    dump = _parse_ports(lines, source) if _PORTS_START_RE.match(first) else _parse_default(lines, source)
    if not dump.nodes:
        raise ParseError(
            "no nodes: neither a Switch/Ca block nor a -p port line", source=source, line=max(1, len(lines))
        )
    return _assemble(dump, source, node_names)


def read_ibnetdiscover(path: str | Path, *, node_name_map: str | Path | None = None) -> IbImport:
    names = read_node_name_map(node_name_map) if node_name_map is not None else None
    return parse_ibnetdiscover(read_tool_output(path), source=str(path), node_names=names)
