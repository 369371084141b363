"""What changed between two imports of one fabric: the check an operator runs after maintenance.

Hosts, HCAs and switches are compared by identity (host name, GUID); links by the two ports they join; a
link on the same ports at a lower width x speed is *slower*. Compare imports of the same kind (two
``ibnetdiscover`` dumps, say): ``ibnetdiscover -p`` and ``iblinkinfo`` know a CA by its port GUID, the
default format by its node GUID, so across kinds every HCA would look replaced.

``FabricDiff.lost`` is what an operator must look at: hosts, HCAs, switches or links gone, links slower,
hosts with fewer GPUs. What is new or faster is reported too, but is not a loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Link
from gpupool.fabric.parsers._text import natural_key

__all__ = ["FabricDiff", "LinkChange", "diff_fabrics"]

_Ends = frozenset[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class LinkChange:
    ends: str  # "leaf-01[3] - node003 mlx5_0[1]"
    before: str  # "4xHDR" ("" for a new link)
    after: str  # "" for a link gone
    gbps_before: float
    gbps_after: float


@dataclass(frozen=True, slots=True)
class FabricDiff:
    hosts_gone: tuple[str, ...]
    hosts_new: tuple[str, ...]
    hcas_gone: tuple[str, ...]  # "b8cef60300000040 (gpu001 mlx5_0)"
    hcas_new: tuple[str, ...]
    hcas_moved: tuple[str, ...]  # "b8cef60300000040: gpu001 -> gpu002"
    switches_gone: tuple[str, ...]
    switches_new: tuple[str, ...]
    links_gone: tuple[LinkChange, ...]
    links_new: tuple[LinkChange, ...]
    links_slower: tuple[LinkChange, ...]
    links_faster: tuple[LinkChange, ...]
    gpus_fewer: tuple[str, ...]  # "gpu001: 8 -> 7"

    @property
    def lost(self) -> bool:
        return bool(
            self.hosts_gone
            or self.hcas_gone
            or self.hcas_moved
            or self.switches_gone
            or self.links_gone
            or self.links_slower
            or self.gpus_fewer
        )

    @property
    def changed(self) -> bool:
        return self.lost or bool(
            self.hosts_new or self.hcas_new or self.switches_new or self.links_new or self.links_faster
        )

    def to_dict(self) -> dict[str, Any]:
        def links(changes: tuple[LinkChange, ...]) -> list[dict[str, Any]]:
            return [{"ends": c.ends, "before": c.before, "after": c.after} for c in changes]

        return {
            "lost": self.lost,
            "hosts": {"gone": list(self.hosts_gone), "new": list(self.hosts_new)},
            "hcas": {"gone": list(self.hcas_gone), "new": list(self.hcas_new), "moved": list(self.hcas_moved)},
            "switches": {"gone": list(self.switches_gone), "new": list(self.switches_new)},
            "links": {
                "gone": links(self.links_gone),
                "new": links(self.links_new),
                "slower": links(self.links_slower),
                "faster": links(self.links_faster),
            },
            "gpus_fewer": list(self.gpus_fewer),
        }


def _names(f: Fabric) -> dict[str, str]:
    """Node GUID -> how an operator knows it: a switch's name, an HCA's ``host device`` (or its description)."""
    out = {s.guid: s.name for s in f.switches}
    for h in f.hcas:
        out[h.guid] = f"{h.host} {h.name}".strip() if h.host else (h.description or h.guid)
    return out


def _links(f: Fabric) -> dict[_Ends, Link]:
    return {frozenset({(x.a.node, x.a.port), (x.b.node, x.b.port)}): x for x in f.links}


def _ends(ends: _Ends, names: dict[str, str]) -> str:
    return " - ".join(sorted(f"{names.get(g, g)}[{p}]" for g, p in ends))


def diff_fabrics(old: Fabric, new: Fabric) -> FabricDiff:
    old_hosts, new_hosts = {h.name for h in old.hosts}, {h.name for h in new.hosts}
    old_hca, new_hca = {h.guid: h for h in old.hcas}, {h.guid: h for h in new.hcas}
    old_sw, new_sw = {s.guid: s for s in old.switches}, {s.guid: s for s in new.switches}
    old_names, new_names = _names(old), _names(new)
    names = {**new_names, **old_names}  # a gone node is named as it was
    old_links, new_links = _links(old), _links(new)

    def change(ends: _Ends, a: Link | None, b: Link | None) -> LinkChange:
        return LinkChange(
            _ends(ends, names),
            f"{a.width}x{a.speed}" if a else "",
            f"{b.width}x{b.speed}" if b else "",
            a.gbps if a else 0.0,
            b.gbps if b else 0.0,
        )

    both = [change(e, old_links[e], new_links[e]) for e in old_links.keys() & new_links.keys()]

    def by_ends(changes: list[LinkChange]) -> tuple[LinkChange, ...]:
        return tuple(sorted(changes, key=lambda c: natural_key(c.ends)))

    fewer = []
    for h in old.hosts:
        if new.has_host(h.name) and len(new.host(h.name).gpus) < len(h.gpus):
            fewer.append(f"{h.name}: {len(h.gpus)} -> {len(new.host(h.name).gpus)} GPUs")
    return FabricDiff(
        hosts_gone=tuple(sorted(old_hosts - new_hosts, key=natural_key)),
        hosts_new=tuple(sorted(new_hosts - old_hosts, key=natural_key)),
        hcas_gone=tuple(f"{g} ({old_names[g]})" for g in sorted(old_hca.keys() - new_hca.keys())),
        hcas_new=tuple(f"{g} ({new_names[g]})" for g in sorted(new_hca.keys() - old_hca.keys())),
        hcas_moved=tuple(
            f"{g}: {old_hca[g].host} -> {new_hca[g].host}"
            for g in sorted(old_hca.keys() & new_hca.keys())
            if old_hca[g].host != new_hca[g].host
        ),
        switches_gone=tuple(sorted((old_sw[g].name for g in old_sw.keys() - new_sw.keys()), key=natural_key)),
        switches_new=tuple(sorted((new_sw[g].name for g in new_sw.keys() - old_sw.keys()), key=natural_key)),
        links_gone=by_ends([change(e, old_links[e], None) for e in old_links.keys() - new_links.keys()]),
        links_new=by_ends([change(e, None, new_links[e]) for e in new_links.keys() - old_links.keys()]),
        links_slower=by_ends([c for c in both if c.gbps_after < c.gbps_before]),
        links_faster=by_ends([c for c in both if c.gbps_after > c.gbps_before]),
        gpus_fewer=tuple(fewer),
    )
