"""Which host each HCA of an imported fabric belongs to, from every form real sites name them in.

A fabric dump knows HCAs (node GUIDs, descriptions, system image GUIDs, the switch ports they sit on), not
machines. Sources are tried in this order of trust; the first that names a host wins, and the HCA records
which one in ``Hca.found_by``:

1. ``host-map``: an operator's GUID -> host file (``/etc/hosts``-style or CSV, ``nodemap.parse_host_map``).
2. ``node-name-map``: the opensm node-name map the site keeps. A bare name is the host
   (``0x0002c90300080e84 "r510gluster1"``); ``host/device`` (``dgx042/U1``) and ``host device`` split.
3. ``description``: the node description the host itself sets (rdma-ndd writes ``<hostname> <device>``),
   with any device word (``mlx5_N``, ``mlx4_N``, ``HCA-N``, ``hfi1_N``, ``qibN``, ``ibpNsM``, ``UN``), or a bare
   host name, which is what a dump taken with ``ibnetdiscover --node-name-map`` shows.
4. ``system-image-guid``: an HCA that shares its system image GUID with HCAs of exactly one named host.
5. ``port-position``: the rail-sibling rule of ``infer_by_port_position``.

Never a host: vendor strings (``MT4129 ConnectX7   Mellanox Technologies``), a device name alone, operating
system default host names (``localhost``), and a ``(host, device)`` pair claimed by two HCAs (two machines
calling themselves the same; a bare name carries no device, so several HCAs of one host may share it).
Host names are kept as written, any script (``nœud01``), fully qualified names whole unless
``NameSources.strip_domain`` says to cut a domain. Every HCA left without a host gets a reason in words.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpupool.fabric.parsers._text import natural_key

HOST_MAP = "host-map"
NODE_NAME_MAP = "node-name-map"
DESCRIPTION = "description"
SYSTEM_GUID = "system-image-guid"
PORT_POSITION = "port-position"
METHODS = (HOST_MAP, NODE_NAME_MAP, DESCRIPTION, SYSTEM_GUID, PORT_POSITION)

# Host names that operating systems ship with; many machines carry them, so they identify none.
DEFAULT_HOSTNAMES = frozenset(
    {"localhost", "localhost.localdomain", "ubuntu", "debian", "centos", "rhel", "rocky", "fedora", "sles"}
)

# The device word after a host name: mlx5_5, mlx4_0, HCA-6, hfi1_0, qib0, ibp65s0f1, U1 (the MF0 scheme's unit).
_DEVICE_RE = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_bond)?[_-]\d+|[a-z]+\d+(?:[a-z]+\d+)*|U\d+")
# A description that is only a device name names no host (a bare word is otherwise taken as a host name).
_DEVICE_ONLY_RE = re.compile(
    r"(?:mlx\d+_(?:bond_)?|hfi\d+_|qib|bnxt_re|irdma|rxe|siw|efa_?|HCA-)\d+|ibp\d+s\d+(?:f\d+)?", re.IGNORECASE
)
_HOST_RE = re.compile(r"[^\W_][\w.-]*")  # letters of any script, digits, '.', '_', '-'; not starting with _ . -
_VENDOR_WORD_RE = re.compile(r"MT\d+|Mellanox|NVIDIA|ConnectX.*|Infiniscale.*", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class NameSources:
    """Everything besides the dump that names hosts. Maps are node GUID (16 lowercase hex digits) -> text."""

    node_names: Mapping[str, str] = field(default_factory=dict)
    host_map: Mapping[str, str] = field(default_factory=dict)
    strip_domain: str = ""  # "" keeps names whole; "*" cuts at the first '.'; else this domain is cut off


@dataclass(frozen=True, slots=True)
class CaFacts:
    """What the dump says about one CA."""

    guid: str
    description: str  # as the tool printed it
    system_guid: str = ""
    ports: int = 1
    attachments: tuple[tuple[str, int], ...] = ()  # (switch GUID, switch port) of each link to a switch


@dataclass(frozen=True, slots=True)
class Attribution:
    host: str | None
    device: str
    description: str  # the node-name map's name where it has one, else the dump's description
    found_by: str  # one of METHODS; "" when host is None
    reason: str  # why host is None; "" when attributed


def strip_domain(host: str, domain: str) -> str:
    """``gpu-a01.cluster.local`` -> ``gpu-a01`` for domain ``cluster.local`` (or ``*``: any domain)."""
    if not domain:
        return host
    if domain == "*":
        return host.split(".", 1)[0] or host
    suffix = "." + domain.strip(".")
    return host[: -len(suffix)] if host.endswith(suffix) and len(host) > len(suffix) else host


def split_description(description: str) -> tuple[str | None, str, str]:
    """A CA description -> ``(host or None, device, kind)``; kind is ``named``, ``default-host`` or ``generic``.

    ``"<host> <device>"`` and ``"<host>/<device>"`` name a host and its device; one word that is neither a
    vendor string nor a device name is a bare host name. An OS default host name keeps its device but
    names no host.
    """
    words = description.split()
    host, device = "", ""
    if len(words) == 2 and _DEVICE_RE.fullmatch(words[1]):
        host, device = words
    elif len(words) == 1 and "/" in words[0]:
        host, _, device = words[0].partition("/")
        if not _DEVICE_RE.fullmatch(device):
            return None, "", "generic"
    elif len(words) == 1 and not _DEVICE_ONLY_RE.fullmatch(words[0]):
        host = words[0]
    if not host or not _HOST_RE.fullmatch(host) or _VENDOR_WORD_RE.fullmatch(host):
        return None, "", "generic"
    if host.lower() in DEFAULT_HOSTNAMES:
        return None, device, "default-host"
    return host, device, "named"


def _candidates(
    cas: Sequence[CaFacts], sources: NameSources, desc: Mapping[str, str], reason: dict[str, str]
) -> dict[str, tuple[str, str, str]]:
    """GUID -> (host, device, method) from the first source that names a host; ``reason`` for the rest."""
    out: dict[str, tuple[str, str, str]] = {}
    for c in cas:
        own_host, own_device, own_kind = split_description(c.description)
        mapped = sources.node_names.get(c.guid)
        m_host, m_device, _ = split_description(mapped) if mapped is not None else (None, "", "")
        if c.guid in sources.host_map:
            out[c.guid] = (sources.host_map[c.guid], m_device or own_device, HOST_MAP)
        elif m_host is not None:
            out[c.guid] = (m_host, m_device or own_device, NODE_NAME_MAP)
        elif own_host is not None:
            out[c.guid] = (own_host, own_device, DESCRIPTION)
        elif mapped is not None:
            reason[c.guid] = f"node-name-map entry {mapped!r} names no host"
        elif own_kind == "default-host":
            reason[c.guid] = f"default host name {c.description.split()[0]!r} identifies no machine"
        elif not c.description.strip():
            reason[c.guid] = "empty node description"
        else:
            reason[c.guid] = f"generic description {desc[c.guid]!r}"
    return {g: (strip_domain(h, sources.strip_domain), d, m) for g, (h, d, m) in out.items()}


def _drop_clashes(
    cand: dict[str, tuple[str, str, str]],
    by_guid: Mapping[str, CaFacts],
    ports_report: bool,
    reason: dict[str, str],
    warnings: list[str],
) -> None:
    """Two HCAs claiming one (host, device): two machines with one name, unless an operator's map says so."""
    uses = Counter(
        (h, d, by_guid[g].ports if ports_report else 0) for g, (h, d, m) in cand.items() if d and m != HOST_MAP
    )
    clashes = {h for (h, d, _), n in uses.items() if n > 1}
    for g, (h, _, m) in list(cand.items()):
        if h in clashes and m != HOST_MAP:
            reason[g] = f"host name {h!r} is used by more than one machine (a device of it is claimed twice)"
            del cand[g]
    if clashes:
        listed = ", ".join(sorted(clashes, key=natural_key))
        warnings.append(f"host names used by more than one machine, left unattributed: {listed}")


def _note_disagreements(
    cand: Mapping[str, tuple[str, str, str]], by_guid: Mapping[str, CaFacts], domain: str, warnings: list[str]
) -> None:
    """A map naming an HCA's host differently from the HCA's own description: the map wins, once said."""
    disagree = [
        g
        for g, (h, _, m) in cand.items()
        if m != DESCRIPTION and (own := split_description(by_guid[g].description)[0]) and strip_domain(own, domain) != h
    ]
    if disagree:
        g = disagree[0]
        warnings.append(
            f"{len(disagree)} HCAs named by a map whose own description names another host "
            f"(e.g. {g}: {by_guid[g].description!r} -> {cand[g][0]}); the map was followed"
        )


def attribute(
    cas: Sequence[CaFacts],
    sources: NameSources,
    *,
    switch_names: Mapping[str, str],
    ports_report: bool = False,
) -> tuple[dict[str, Attribution], list[str]]:
    """An ``Attribution`` per CA GUID, and warnings that summarise what could not be taken at face value.

    ``ports_report``: the dump lists ports, not nodes (``ibnetdiscover -p``, ``iblinkinfo``), so the two
    ports of one dual-port card share a description without being two machines.
    """
    warnings: list[str] = []
    desc = {c.guid: sources.node_names.get(c.guid, c.description) for c in cas}
    reason: dict[str, str] = {}
    cand = _candidates(cas, sources, desc, reason)
    by_guid = {c.guid: c for c in cas}

    _drop_clashes(cand, by_guid, ports_report, reason, warnings)
    _note_disagreements(cand, by_guid, sources.strip_domain, warnings)

    found = {g: (h, m) for g, (h, _, m) in cand.items()}
    found.update(_by_system_guid(cas, found, warnings))
    named = {g: h for g, (h, _) in found.items()}
    ca_ports = {c.guid: list(c.attachments) for c in cas}
    inferred = infer_by_port_position(named, [c.guid for c in cas if c.guid not in named], ca_ports)
    for g, (host, sw, p) in inferred.items():
        found[g] = (host, PORT_POSITION)
        warnings.append(
            f"HCA {g} ({desc[g]!r}) on {switch_names.get(sw, sw)} port {p} attributed to host {host}: "
            f"the named HCAs at port {p} of its sibling leaves all belong to {host}"
        )
    warnings.extend(_unattributed_summary([c for c in cas if c.guid not in found], desc))

    out: dict[str, Attribution] = {}
    for c in cas:
        device = (
            cand[c.guid][1]
            if c.guid in cand
            else split_description(desc[c.guid])[1] or split_description(c.description)[1]
        )
        if c.guid in found:
            host, method = found[c.guid]
            out[c.guid] = Attribution(host, device, desc[c.guid], method, "")
        else:
            out[c.guid] = Attribution(None, device, desc[c.guid], "", reason.get(c.guid, "no source names its host"))
    return out, warnings


def _by_system_guid(
    cas: Sequence[CaFacts], found: Mapping[str, tuple[str, str]], warnings: list[str]
) -> dict[str, tuple[str, str]]:
    """Unnamed HCAs that share a system image GUID with named HCAs of exactly one host join that host."""
    groups: dict[str, list[str]] = defaultdict(list)
    for c in cas:
        if c.system_guid:
            groups[c.system_guid].append(c.guid)
    out: dict[str, tuple[str, str]] = {}
    split: list[str] = []
    for sysguid, members in groups.items():
        hosts = {found[g][0] for g in members if g in found}
        if len(hosts) > 1:
            split.append(sysguid)
        elif len(hosts) == 1 and len(members) > len([g for g in members if g in found]):
            host = hosts.pop()
            out.update({g: (host, SYSTEM_GUID) for g in members if g not in found})
    if split:
        warnings.append(
            f"{len(split)} system image GUIDs are shared by HCAs of different hosts (e.g. {sorted(split)[0]}); "
            "they attribute nothing"
        )
    return out


def _unattributed_summary(left: Iterable[CaFacts], desc: Mapping[str, str]) -> list[str]:
    generic: Counter[str] = Counter()
    defaults: set[str] = set()
    for c in left:
        kind = split_description(desc[c.guid])[2]
        if kind == "default-host":
            defaults.add(desc[c.guid].split()[0])
        elif kind == "generic":
            generic[desc[c.guid]] += 1
    out = [
        f"{count} HCAs with the generic description {text!r} left without a host"
        for text, count in sorted(generic.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    if defaults:
        out.append(f"HCAs with default host names ({', '.join(sorted(defaults))}) left without a host")
    return out


def infer_by_port_position(
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
