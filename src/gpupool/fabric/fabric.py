"""The immutable fabric and everything derived from its structure.

``Fabric`` takes declared parts (switches, HCAs, hosts, links) and derives, once, what the scheduler's hot
path needs: switch tiers, scalable units, rails, oversubscription, and per-host domain ids held in NumPy
arrays so that pair queries are O(1) and vectorised over many pairs. Nothing here changes after
construction; arrays are made read-only.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from gpupool.domain.errors import FabricError
from gpupool.fabric._graph import UnionFind, nest
from gpupool.fabric.model import Domain, Hca, Host, Link, Switch, Tier

IntArray = npt.NDArray[np.int32]
FloatArray = npt.NDArray[np.float64]

UNREACHABLE = 4  # "lowest common tier" of two hosts in different connected components
_ORDINAL_RE = re.compile(r"(\d+)\s*$")


_A = TypeVar("_A", bound=npt.NDArray[Any])


def _readonly(a: _A) -> _A:
    a.setflags(write=False)
    return a


def _ordinal(name: str) -> int | None:
    m = _ORDINAL_RE.search(name)
    return int(m.group(1)) if m else None


class Fabric:
    """An immutable fabric. Build it with the constructor; every derived fact is computed there."""

    __slots__ = (
        "_domain_ids",
        "_down",
        "_hca_ix",
        "_hca_tier_ids",
        "_host_ix",
        "_hosts_under_cache",
        "_switch_ix",
        "_tier_ids",
        "hca_core_factor",
        "hca_host",
        "hca_leaf",
        "hca_rate",
        "hca_spine_factor",
        "hcas",
        "host_core_factor",
        "host_intra_gbps",
        "host_leaves",
        "host_nic_gbps",
        "host_rail_hca",
        "host_spine_factor",
        "hosts",
        "leaf_hosts",
        "leaf_rail",
        "leaf_su",
        "links",
        "name",
        "rail_count",
        "su_leaves",
        "switch_down_gbps",
        "switch_up_gbps",
        "switches",
    )

    def __init__(
        self,
        *,
        switches: Iterable[Switch],
        hcas: Iterable[Hca],
        hosts: Iterable[Host],
        links: Iterable[Link],
        name: str = "fabric",
    ) -> None:
        self.name = name
        sw_in = tuple(switches)
        self.hcas: tuple[Hca, ...] = tuple(hcas)
        self.hosts: tuple[Host, ...] = tuple(hosts)
        self.links: tuple[Link, ...] = tuple(links)
        self._switch_ix = self._index([s.guid for s in sw_in], "switch GUID")
        self._hca_ix = self._index([h.guid for h in self.hcas], "HCA GUID")
        self._host_ix = self._index([h.name for h in self.hosts], "host name")
        clash = set(self._switch_ix) & set(self._hca_ix)
        if clash:
            raise FabricError(f"GUID used by both a switch and an HCA: {sorted(clash)[0]}")
        self._check_hosts()
        adjacency, hca_leaf_set = self._wire(sw_in)
        tiers = self._derive_tiers(sw_in, adjacency, hca_leaf_set)
        self.switches: tuple[Switch, ...] = tuple(
            Switch(s.guid, s.name, s.ports, s.model, s.lid, Tier(tiers[i])) for i, s in enumerate(sw_in)
        )
        self._derive_bandwidth(tiers)
        self._derive_leaves(hca_leaf_set)
        self._derive_sus_and_rails()
        self._derive_domains(tiers, adjacency)
        self._hosts_under_cache: dict[int, IntArray] = {}
        self._down: tuple[tuple[int, ...], ...] = tuple(
            tuple(sorted(t for t in adjacency[s] if tiers[t] < tiers[s])) for s in range(len(sw_in))
        )

    # ---------------------------------------------------------------- construction

    @staticmethod
    def _index(keys: Sequence[str], what: str) -> dict[str, int]:
        ix: dict[str, int] = {}
        for i, k in enumerate(keys):
            if k in ix:
                raise FabricError(f"duplicate {what}: {k}")
            ix[k] = i
        return ix

    def _check_hosts(self) -> None:
        hca_host = np.full(len(self.hcas), -1, dtype=np.int32)
        for h, host in enumerate(self.hosts):
            for g in host.hcas:
                i = self._hca_ix.get(g)
                if i is None:
                    raise FabricError(f"host {host.name} lists undeclared HCA {g}")
                if hca_host[i] >= 0:
                    raise FabricError(f"HCA {g} belongs to two hosts")
                hca_host[i] = h
            if host.gpu_hca and len(host.gpu_hca) != len(host.gpus):
                raise FabricError(
                    f"host {host.name}: gpu_hca has {len(host.gpu_hca)} entries for {len(host.gpus)} GPUs"
                )
        self.hca_host: IntArray = _readonly(hca_host)

    def _wire(self, sw_in: tuple[Switch, ...]) -> tuple[list[dict[int, float]], list[set[int]]]:
        """Switch adjacency (neighbour -> summed Gb/s over parallel links) and each HCA's leaf switches."""
        n_sw = len(sw_in)
        adjacency: list[dict[int, float]] = [defaultdict(float) for _ in range(n_sw)]
        hca_leaf_set: list[set[int]] = [set() for _ in self.hcas]
        hca_rate = np.zeros(len(self.hcas), dtype=np.float64)
        seen_ports: set[tuple[str, int]] = set()
        for link in self.links:
            for p in (link.a, link.b):
                if p.node not in self._switch_ix and p.node not in self._hca_ix:
                    raise FabricError(
                        f"link {link.a.node}[{link.a.port}] - {link.b.node}[{link.b.port}] names undeclared node {p.node}"
                    )
                key = (p.node, p.port)
                if key in seen_ports:
                    raise FabricError(f"port {p.node}[{p.port}] is used by two links")
                seen_ports.add(key)
            a_sw, b_sw = self._switch_ix.get(link.a.node), self._switch_ix.get(link.b.node)
            gbps = link.gbps
            if a_sw is not None and b_sw is not None:
                if a_sw != b_sw:
                    adjacency[a_sw][b_sw] += gbps
                    adjacency[b_sw][a_sw] += gbps
            elif a_sw is not None or b_sw is not None:
                sw = a_sw if a_sw is not None else b_sw
                hca = self._hca_ix[link.b.node if a_sw is not None else link.a.node]
                assert sw is not None
                hca_leaf_set[hca].add(sw)
                hca_rate[hca] = max(hca_rate[hca], gbps)
        for i, h in enumerate(self.hcas):
            if hca_rate[i] == 0.0:
                hca_rate[i] = h.rate_gbps
        self.hca_rate: FloatArray = _readonly(hca_rate)
        return [dict(a) for a in adjacency], hca_leaf_set

    def _derive_tiers(
        self, sw_in: tuple[Switch, ...], adjacency: list[dict[int, float]], hca_leaf_set: list[set[int]]
    ) -> list[int]:
        """Leaves carry HCAs; every other switch's tier is one more than its distance from the leaves."""
        dist = [-1] * len(sw_in)
        queue: deque[int] = deque()
        for leaves in hca_leaf_set:
            for s in leaves:
                if dist[s] < 0:
                    dist[s] = 0
                    queue.append(s)
        while queue:
            s = queue.popleft()
            for t in adjacency[s]:
                if dist[t] < 0:
                    dist[t] = dist[s] + 1
                    queue.append(t)
        # A switch that no HCA reaches (an isolated or empty switch) is drawn at the top tier.
        return [min(d + 1, int(Tier.CORE)) if d >= 0 else int(Tier.CORE) for d in dist]

    def _derive_bandwidth(self, tiers: list[int]) -> None:
        n_sw = len(self.switches)
        up = np.zeros(n_sw, dtype=np.float64)
        down = np.zeros(n_sw, dtype=np.float64)
        for link in self.links:
            a_sw, b_sw = self._switch_ix.get(link.a.node), self._switch_ix.get(link.b.node)
            g = link.gbps
            if a_sw is not None and b_sw is not None:
                if tiers[a_sw] == tiers[b_sw]:
                    continue  # a cross link at one tier carries no up/down capacity
                lo, hi = (a_sw, b_sw) if tiers[a_sw] < tiers[b_sw] else (b_sw, a_sw)
                up[lo] += g
                down[hi] += g
            elif a_sw is not None:
                down[a_sw] += g
            elif b_sw is not None:
                down[b_sw] += g
        self.switch_up_gbps: FloatArray = _readonly(up)
        self.switch_down_gbps = _readonly(down)

    def _derive_leaves(self, hca_leaf_set: list[set[int]]) -> None:
        hca_leaf = np.full(len(self.hcas), -1, dtype=np.int32)
        for i, attached in enumerate(hca_leaf_set):
            if attached:
                hca_leaf[i] = min(attached)  # a dual-ported HCA on two leaves is placed by its first
        self.hca_leaf: IntArray = _readonly(hca_leaf)
        leaf_hosts: dict[int, set[int]] = defaultdict(set)
        host_leaves: list[tuple[int, ...]] = []
        for h, host in enumerate(self.hosts):
            leaves: set[int] = set()
            for g in host.hcas:
                leaves |= hca_leaf_set[self._hca_ix[g]]
            for s in leaves:
                leaf_hosts[s].add(h)
            host_leaves.append(tuple(sorted(leaves)))
        self.host_leaves: tuple[tuple[int, ...], ...] = tuple(host_leaves)
        self.leaf_hosts: dict[int, tuple[int, ...]] = {s: tuple(sorted(v)) for s, v in sorted(leaf_hosts.items())}

    def _derive_sus_and_rails(self) -> None:
        """Scalable units: leaves whose host sets (nearly) coincide; rails: the leaf order inside an SU.

        Two leaves belong to one SU when they share at least half of the smaller one's hosts; a missing or
        unattributed HCA therefore does not split an SU. A leaf's rail is its rank inside its SU by the most
        common device ordinal of the HCAs on it (``mlx5_5`` -> 5, ``HCA-6`` -> 6), then by switch name.
        """
        leaf_list = [s for s, sw in enumerate(self.switches) if sw.tier == Tier.LEAF and s in self.leaf_hosts]
        pos = {s: i for i, s in enumerate(leaf_list)}
        uf = UnionFind(len(leaf_list))
        by_host: dict[int, list[int]] = defaultdict(list)
        for s in leaf_list:
            for h in self.leaf_hosts[s]:
                by_host[h].append(s)
        pair_shared: Counter[tuple[int, int]] = Counter()
        for ls in by_host.values():
            if len(ls) > 64:
                ls = ls[:64]
            for i in range(len(ls)):
                for j in range(i + 1, len(ls)):
                    pair_shared[(ls[i], ls[j])] += 1
        for (a, b), shared in pair_shared.items():
            if 2 * shared >= min(len(self.leaf_hosts[a]), len(self.leaf_hosts[b])):
                uf.union(pos[a], pos[b])
        labels = uf.labels()
        su_leaves_l: dict[int, list[int]] = defaultdict(list)
        for s in leaf_list:
            su_leaves_l[labels[pos[s]]].append(s)

        def rail_key(s: int) -> tuple[int, str]:
            ords = Counter(
                o for o in (_ordinal(self.hcas[i].name) for i in np.flatnonzero(self.hca_leaf == s)) if o is not None
            )
            return (ords.most_common(1)[0][0] if ords else 1 << 30, self.switches[s].name)

        leaf_su = np.full(len(self.switches), -1, dtype=np.int32)
        leaf_rail = np.full(len(self.switches), -1, dtype=np.int32)
        su_list: list[tuple[int, ...]] = []
        for su, members in sorted(su_leaves_l.items()):
            ordered = sorted(members, key=rail_key)
            su_list.append(tuple(ordered))
            for r, s in enumerate(ordered):
                leaf_su[s] = su
                leaf_rail[s] = r
        self.su_leaves: tuple[tuple[int, ...], ...] = tuple(su_list)
        self.leaf_su: IntArray = _readonly(leaf_su)
        self.leaf_rail: IntArray = _readonly(leaf_rail)
        self.rail_count = max((len(m) for m in su_list), default=0)
        rail_hca = np.full((len(self.hosts), max(self.rail_count, 1)), -1, dtype=np.int32)
        for h, host in enumerate(self.hosts):
            for g in host.hcas:
                i = self._hca_ix[g]
                leaf = int(self.hca_leaf[i])
                if leaf >= 0 and leaf_rail[leaf] >= 0 and rail_hca[h, leaf_rail[leaf]] < 0:
                    rail_hca[h, leaf_rail[leaf]] = i
        self.host_rail_hca: IntArray = _readonly(rail_hca)

    def _derive_domains(self, tiers: list[int], adjacency: list[dict[int, float]]) -> None:
        n = len(self.hosts)
        n_sw = len(self.switches)
        n_hca = len(self.hcas)

        # Switch components at and below each tier: leaves joined by spines give spine groups; all give core.
        def switch_components(max_tier: int) -> list[int]:
            uf = UnionFind(n_sw)
            for s in range(n_sw):
                if tiers[s] <= max_tier:
                    for t in adjacency[s]:
                        if tiers[t] <= max_tier:
                            uf.union(s, t)
            return uf.labels()

        spine_comp = switch_components(int(Tier.SPINE))
        core_comp = switch_components(int(Tier.CORE))

        def host_labels(switch_label: Sequence[int], per_leaf: bool) -> IntArray:
            """Union hosts that share a label over their leaves; hosts without leaves stay alone."""
            uf = UnionFind(n + 1)
            first: dict[int, int] = {}
            for h, leaves in enumerate(self.host_leaves):
                for s in leaves:
                    key = s if per_leaf else switch_label[s]
                    if key in first:
                        uf.union(first[key], h)
                    else:
                        first[key] = h
            return np.asarray(uf.labels()[:n], dtype=np.int32)

        host_ids = np.arange(n, dtype=np.int32)
        leaf_ids = host_labels([], per_leaf=True)
        su_ids = host_labels([int(x) for x in self.leaf_su], per_leaf=False)
        # Leaves not in an SU (no hosts) never appear in host_leaves, so leaf_su >= 0 there.
        spine_ids = host_labels(spine_comp, per_leaf=False)
        core_ids = host_labels(core_comp, per_leaf=False)
        nvlink_ids = np.full(n, -1, dtype=np.int32)
        nvl_domains: dict[str, int] = {}
        for h, host in enumerate(self.hosts):
            if host.nvlink_domain:
                nvlink_ids[h] = nvl_domains.setdefault(host.nvlink_domain, len(nvl_domains))
            elif host.nvlink_gbps > 0 and len({g.nvlink_island for g in host.gpus}) <= 1:
                nvlink_ids[h] = len(self.hosts) + h  # its own island, never equal to a shared domain's id
        # An SU never crosses a spine group, nor a leaf an SU; enforce nesting so a set's smallest domain is
        # well defined even on irregular fabrics.
        su_ids = nest(leaf_ids, su_ids)
        spine_ids = nest(su_ids, spine_ids)
        core_ids = nest(spine_ids, core_ids)
        self._domain_ids: IntArray = _readonly(np.stack([nvlink_ids, host_ids, leaf_ids, su_ids, spine_ids, core_ids]))
        self._tier_ids: IntArray = _readonly(np.stack([host_ids, leaf_ids, spine_ids, core_ids]))

        # HCA-level tiers: an HCA pair shares a leaf, a spine group or the core.
        hca_sw = self.hca_leaf
        hca_ids = np.arange(n_hca, dtype=np.int32)
        leaf_of = np.where(hca_sw >= 0, hca_sw, -1 - hca_ids)
        spine_of = np.array([spine_comp[s] if s >= 0 else -1 - i for i, s in enumerate(hca_sw)], dtype=np.int32)
        core_of = np.array([core_comp[s] if s >= 0 else -1 - i for i, s in enumerate(hca_sw)], dtype=np.int32)
        self._hca_tier_ids: IntArray = _readonly(np.stack([hca_ids, leaf_of, spine_of, core_of]).astype(np.int32))

        # Bottleneck bandwidth model: one rail's NIC rate, divided by the oversubscription of the tiers crossed.
        over = np.maximum(self.oversubscription_array(), 1.0)
        leaf_spine_f = over.copy()  # crossing a leaf's uplinks
        leaf_core_f = np.ones(n_sw, dtype=np.float64)  # ... and then the worst spine's uplinks above it
        for s in range(n_sw):
            if tiers[s] == int(Tier.LEAF):
                leaf_core_f[s] = over[s] * max(
                    (over[t] for t in adjacency[s] if tiers[t] == int(Tier.SPINE)), default=1.0
                )
        nic = np.zeros(n, dtype=np.float64)
        spine_f = np.ones(n, dtype=np.float64)
        core_f = np.ones(n, dtype=np.float64)
        for h, host in enumerate(self.hosts):
            nic[h] = max((self.hca_rate[self._hca_ix[g]] for g in host.hcas), default=0.0)
            leaves = list(self.host_leaves[h])
            if leaves:
                spine_f[h] = leaf_spine_f[leaves].max()
                core_f[h] = leaf_core_f[leaves].max()
        # Pad by one so an HCA on no switch (index -1) reads a neutral factor, even with no switches at all.
        hca_spine = np.append(leaf_spine_f, 1.0)[hca_sw]
        hca_core = np.append(leaf_core_f, 1.0)[hca_sw]
        self.host_nic_gbps: FloatArray = _readonly(nic)
        self.host_intra_gbps: FloatArray = _readonly(
            np.array([h.nvlink_gbps if h.nvlink_gbps > 0 else 0.0 for h in self.hosts], dtype=np.float64)
        )
        self.host_spine_factor: FloatArray = _readonly(spine_f)
        self.host_core_factor: FloatArray = _readonly(core_f)
        self.hca_spine_factor: FloatArray = _readonly(hca_spine)
        self.hca_core_factor: FloatArray = _readonly(hca_core)

    # ---------------------------------------------------------------- lookups

    def switch_index(self, guid: str) -> int:
        return self._switch_ix[guid]

    def hca_index(self, guid: str) -> int:
        return self._hca_ix[guid]

    def host_index(self, name: str) -> int:
        return self._host_ix[name]

    def has_hca(self, guid: str) -> bool:
        return guid in self._hca_ix

    def has_host(self, name: str) -> bool:
        return name in self._host_ix

    def host(self, name: str) -> Host:
        return self.hosts[self._host_ix[name]]

    @property
    def gpu_count(self) -> int:
        return sum(len(h.gpus) for h in self.hosts)

    @property
    def unattributed_hcas(self) -> tuple[Hca, ...]:
        return tuple(h for i, h in enumerate(self.hcas) if self.hca_host[i] < 0)

    def switches_at(self, tier: Tier) -> tuple[int, ...]:
        return tuple(i for i, s in enumerate(self.switches) if s.tier == tier)

    def oversubscription_array(self) -> FloatArray:
        """Down over up bandwidth per switch; 0 where a switch has no uplinks (the top tier)."""
        up = self.switch_up_gbps
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.where(up > 0, self.switch_down_gbps / np.where(up > 0, up, 1.0), 0.0)
        return np.asarray(out, dtype=np.float64)

    def oversubscription(self, switch: int) -> float:
        return float(self.oversubscription_array()[switch])

    def domain_ids(self, level: Domain) -> IntArray:
        """Per-host id of the domain at ``level`` (read-only). Hosts with equal ids share that domain.

        For ``Domain.NVLINK`` an id of -1 means the host's GPUs are not one NVLink island.
        """
        row: IntArray = self._domain_ids[int(level)]
        return row

    # ---------------------------------------------------------------- pair queries (hot path)

    def lowest_common_tier(self, a: int, b: int) -> int:
        """0 same host, 1 a shared leaf, 2 a spine group, 3 the core, 4 unreachable."""
        ids = self._tier_ids
        for t in range(4):
            if ids[t, a] == ids[t, b]:
                return t
        return UNREACHABLE

    @staticmethod
    def _first_shared_tier(ids: IntArray, a: npt.ArrayLike, b: npt.ArrayLike) -> IntArray:
        """Per pair, the first row of ``ids`` (tier 0 up) where both indices have the same id."""
        ia = np.asarray(a, dtype=np.intp)
        ib = np.asarray(b, dtype=np.intp)
        out = np.full(ia.shape, UNREACHABLE, dtype=np.int32)
        for t in range(ids.shape[0] - 1, -1, -1):  # smallest tier written last wins
            out[ids[t][ia] == ids[t][ib]] = t
        return out

    def lowest_common_tier_many(self, a: npt.ArrayLike, b: npt.ArrayLike) -> IntArray:
        """Vectorised ``lowest_common_tier`` for arrays of host indices."""
        return self._first_shared_tier(self._tier_ids, a, b)

    @staticmethod
    def hops_for_tier(tier: npt.ArrayLike) -> IntArray:
        """Switch hops on a shortest up-down path: 0 in a host, 1 via a leaf, 3 via a spine, 5 via a core."""
        t = np.asarray(tier, dtype=np.int32)
        return np.where(t == 0, 0, np.where(t >= UNREACHABLE, -1, 2 * t - 1)).astype(np.int32)

    def switch_hops(self, a: int, b: int) -> int:
        return int(self.hops_for_tier(self.lowest_common_tier(a, b)))

    def switch_hops_many(self, a: npt.ArrayLike, b: npt.ArrayLike) -> IntArray:
        return self.hops_for_tier(self.lowest_common_tier_many(a, b))

    def bottleneck_gbps_many(self, a: npt.ArrayLike, b: npt.ArrayLike) -> FloatArray:
        """Per-rail bandwidth a flow between two hosts can count on under full load, in Gb/s.

        Inside a host: the NVLink rate (0 for PCIe-only hosts, where the PCIe switch decides). Through a
        leaf: the slower NIC. Through spines and cores: that, divided by the oversubscription of the
        switches crossed (the worse of the two sides).
        """
        ia = np.asarray(a, dtype=np.intp)
        ib = np.asarray(b, dtype=np.intp)
        tier = self.lowest_common_tier_many(ia, ib)
        nic = np.minimum(self.host_nic_gbps[ia], self.host_nic_gbps[ib])
        spine = nic / np.maximum(self.host_spine_factor[ia], self.host_spine_factor[ib])
        core = nic / np.maximum(self.host_core_factor[ia], self.host_core_factor[ib])
        out = np.select(
            [tier == 0, tier == 1, tier == 2, tier == 3],
            [self.host_intra_gbps[ia], nic, spine, core],
            default=0.0,
        )
        return np.asarray(out, dtype=np.float64)

    def bottleneck_gbps(self, a: int, b: int) -> float:
        return float(self.bottleneck_gbps_many([a], [b])[0])

    def hca_lowest_common_tier_many(self, a: npt.ArrayLike, b: npt.ArrayLike) -> IntArray:
        """Like ``lowest_common_tier_many`` for HCA indices: 0 same HCA, 1 same leaf, 2 spine, 3 core."""
        return self._first_shared_tier(self._hca_tier_ids, a, b)

    def hca_lowest_common_tier(self, a: int, b: int) -> int:
        return int(self.hca_lowest_common_tier_many([a], [b])[0])

    def hca_bottleneck_gbps_many(self, a: npt.ArrayLike, b: npt.ArrayLike) -> FloatArray:
        ia = np.asarray(a, dtype=np.intp)
        ib = np.asarray(b, dtype=np.intp)
        tier = self.hca_lowest_common_tier_many(ia, ib)
        nic = np.minimum(self.hca_rate[ia], self.hca_rate[ib])
        spine = nic / np.maximum(self.hca_spine_factor[ia], self.hca_spine_factor[ib])
        core = nic / np.maximum(self.hca_core_factor[ia], self.hca_core_factor[ib])
        out = np.select([tier <= 1, tier == 2, tier == 3], [nic, spine, core], default=0.0)
        return np.asarray(out, dtype=np.float64)

    # ---------------------------------------------------------------- set queries

    def smallest_domain(self, hosts: Iterable[int]) -> Domain | None:
        """The smallest domain that holds every host of the set; None if they are not connected."""
        ix = np.fromiter(hosts, dtype=np.intp)
        if ix.size == 0:
            raise ValueError("smallest_domain of an empty host set")
        ids = self._domain_ids[:, ix]
        for level in Domain:
            row = ids[int(level)]
            if row[0] >= 0 and bool(np.all(row == row[0])):
                return level
        return None

    def nvlink_island(self, host: int, gpu: int) -> int:
        return self.hosts[host].gpus[gpu].nvlink_island

    def rail_hca(self, host: int, gpu: int) -> Hca | None:
        """The HCA GPU ``gpu`` of ``host`` should use: its declared closest HCA, else the HCA on rail ``gpu``."""
        h = self.hosts[host]
        if h.gpu_hca:
            pos = h.gpu_hca[gpu]
            return self.hcas[self._hca_ix[h.hcas[pos]]] if 0 <= pos < len(h.hcas) else None
        rails = self.host_rail_hca[host]
        if self.rail_count > 0 and h.gpus:
            # 8 GPUs on 8 rails: GPU i uses rail i; 8 GPUs on 4 rails: GPUs 2i and 2i+1 share rail i.
            i = int(rails[min(gpu * self.rail_count // len(h.gpus), rails.size - 1)])
            if i >= 0:
                return self.hcas[i]
        if h.hcas:
            return self.hcas[self._hca_ix[h.hcas[gpu % len(h.hcas)]]]
        return None

    def rail_of_hca(self, hca: int) -> int:
        leaf = int(self.hca_leaf[hca])
        return int(self.leaf_rail[leaf]) if leaf >= 0 else -1

    def hosts_under(self, switch: int) -> IntArray:
        """Sorted host indices reachable downward from ``switch``."""
        cached = self._hosts_under_cache.get(switch)
        if cached is not None:
            return cached
        tier = self.switches[switch].tier
        if tier == Tier.LEAF:
            out = np.asarray(self.leaf_hosts.get(switch, ()), dtype=np.int32)
        else:
            below: set[int] = set()
            frontier = {switch}
            for _ in range(int(tier) - 1):
                frontier = {t for s in frontier for t in self._down[s]}
            for s in frontier:
                below.update(self.leaf_hosts.get(s, ()))
            out = np.asarray(sorted(below), dtype=np.int32)
        out.setflags(write=False)
        self._hosts_under_cache[switch] = out
        return out

    def __repr__(self) -> str:
        return (
            f"Fabric({self.name!r}: {len(self.hosts)} hosts, {self.gpu_count} GPUs, {len(self.hcas)} HCAs, "
            f"{len(self.switches)} switches, {len(self.links)} links)"
        )
