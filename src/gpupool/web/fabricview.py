"""The fabric page's payloads, pure: a static part per fabric version and a live part sent as changes.

The static part (names, GPU counts, tiers, scalable units) changes only with the fabric, so the page fetches it
once. The live part (host states, who holds each GPU, health, telemetry, leaf flags, the counts in the header)
is keyed by a digest of its content: a page that sends the digest it holds gets nothing when nothing changed
and only the changed entries otherwise (``diff_live``), which keeps an open tab of 1,000 hosts at a few
hundred bytes per poll. Every builder takes the caller's tenant (None for an admin) and hides what another
tenant owns.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Tier

# Node states on the wire; "unregistered" is a fabric host no agent has reported.
NODE_STATES = ("up", "drained", "lost", "unregistered")
UP, DRAINED, LOST, UNREGISTERED = range(4)
# Per-GPU allocation codes besides a job key: free, or held by a job the caller may not see.
FREE, HIDDEN = -1, -2
BAD = 2  # the health grade of a GPU the scheduler never places on
# Leaf flags, worst wins: a leaf with a down link is drawn red, erroring orange, congested yellow.
LEAF_OK, LEAF_CONGESTED, LEAF_ERRORING, LEAF_DOWN = 0, 1, 2, 3
CONGESTED_WAIT_PER_S = 1_000.0  # PortXmitWait ticks per second above which a link counts as congested
LIVE_ARRAYS = ("state", "alloc", "health", "util", "temp", "leaf_flag")


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    state: str  # up, drained, lost
    health: tuple[int, ...]  # one grade per GPU (0 ok, 1 degraded, 2 bad); empty until the agent reports


@dataclass(frozen=True, slots=True)
class RankView:
    """One rank of a placed or running job on one host."""

    job_id: str
    tenant: str
    rank: int
    host: str
    gpus: tuple[int, ...]
    pool: str = ""
    name: str = ""


@dataclass(frozen=True, slots=True)
class GpuTelemetry:
    utilization_pct: float | None
    temperature_c: float | None


@dataclass(frozen=True, slots=True)
class PortTelemetry:
    hca: str  # device name on the host (mlx5_0)
    state: str  # up, degraded, down
    errors_per_s: float | None
    xmit_wait_per_s: float | None


@dataclass(frozen=True, slots=True)
class HostTelemetry:
    gpus: Mapping[int, GpuTelemetry]
    ports: tuple[PortTelemetry, ...]


def visible(tenant: str | None, owner: str) -> bool:
    """An admin (tenant None) sees everything; a tenant only what it owns."""
    return tenant is None or tenant == owner


def num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 1)


def _whole(x: float | None) -> int | None:
    # Whole percent and degrees: the colour ramps cannot show less, and noise below that would make every
    # poll a change of every GPU.
    return None if x is None or not math.isfinite(x) else round(float(x))


def _leaf_flag(port: PortTelemetry) -> int:
    if port.state == "down":
        return LEAF_DOWN
    if port.state == "degraded" or (port.errors_per_s or 0.0) > 0.0:
        return LEAF_ERRORING
    if (port.xmit_wait_per_s or 0.0) > CONGESTED_WAIT_PER_S:
        return LEAF_CONGESTED
    return LEAF_OK


def offsets(fabric: Fabric) -> tuple[list[int], list[int], int]:
    """(GPUs per host, where each host's GPUs start in the per-GPU arrays, GPUs in all)."""
    counts = [h.gpu_count for h in fabric.hosts]
    offs = [0] * len(counts)
    total = 0
    for i, c in enumerate(counts):
        offs[i] = total
        total += c
    return counts, offs, total


def fabric_static(fabric: Fabric, version: int) -> dict[str, Any]:
    """What only a new fabric changes: names of hosts and switches, GPUs per host, rails, scalable units.

    ``gpu_offset[h]`` is where host ``h``'s GPUs start in the live part's per-GPU arrays.
    """
    counts, offs, _ = offsets(fabric)
    return {
        "name": fabric.name,
        "version": version,
        "rails": fabric.rail_count,
        "hosts": [h.name for h in fabric.hosts],
        "gpus": counts,
        "gpu_offset": offs,
        "tiers": _tiers(fabric),
        "groups": _groups(fabric),
    }


def fabric_live(
    fabric: Fabric,
    nodes: Sequence[NodeView],
    ranks: Sequence[RankView],
    telemetry: Mapping[str, HostTelemetry],
    tenant: str | None,
    job_key: Callable[[str], int],
    *,
    gpu_telemetry: bool = False,
) -> dict[str, Any]:
    """Host states, GPU holders (``job_key`` of the job, ``FREE`` or ``HIDDEN``), health, leaf flags, the
    visible jobs by key and the header counts; utilisation and temperature only with ``gpu_telemetry`` (the
    page asks for them in the modes that draw them: they change with every beat)."""
    counts, offs, total = offsets(fabric)
    by_name = {nv.name: nv for nv in nodes}
    state = [UNREGISTERED] * len(counts)
    health = [-1] * total
    for i, fh in enumerate(fabric.hosts):
        nv = by_name.get(fh.name)
        if nv is not None:
            state[i] = NODE_STATES.index(nv.state) if nv.state in NODE_STATES else UNREGISTERED
            for g, grade in enumerate(nv.health[: counts[i]]):
                health[offs[i] + g] = int(grade)
    jobs: dict[str, list[str]] = {}
    alloc = [FREE] * total
    for r in ranks:
        if not fabric.has_host(r.host):
            continue
        h = fabric.host_index(r.host)
        code = HIDDEN
        if visible(tenant, r.tenant):
            code = job_key(r.job_id)
            jobs[str(code)] = [r.job_id, r.tenant, r.pool, r.name]
        for g in r.gpus:
            if 0 <= g < counts[h]:
                alloc[offs[h] + g] = code
    out: dict[str, Any] = {"state": state, "alloc": alloc, "health": health, "jobs": jobs}
    leaf_flag = [LEAF_OK] * len(fabric.switches)
    util: list[int | None] = [None] * total
    temp: list[int | None] = [None] * total
    hca_by_name = {(fabric.hcas[i].host, fabric.hcas[i].name): i for i in range(len(fabric.hcas))}
    for host, t in telemetry.items():
        if not fabric.has_host(host):
            continue
        h = fabric.host_index(host)
        if gpu_telemetry:
            for g, s in t.gpus.items():
                if 0 <= g < counts[h]:
                    util[offs[h] + g] = _whole(s.utilization_pct)
                    temp[offs[h] + g] = _whole(s.temperature_c)
        for p in t.ports:
            hca = hca_by_name.get((host, p.hca))
            leaf = -1 if hca is None else int(fabric.hca_leaf[hca])
            if leaf >= 0:
                leaf_flag[leaf] = max(leaf_flag[leaf], _leaf_flag(p))
    if gpu_telemetry:
        out["util"], out["temp"] = util, temp
    out["leaf_flag"] = [leaf_flag[s] for s, sw in enumerate(fabric.switches) if sw.tier not in (Tier.CORE, Tier.SPINE)]
    out["summary"] = summary(counts, offs, state, alloc, health)
    return out


def summary(
    counts: Sequence[int], offs: Sequence[int], state: Sequence[int], alloc: Sequence[int], health: Sequence[int]
) -> dict[str, Any]:
    """The header's counts. A GPU is schedulable on an up host unless it is graded bad: a host no agent ever
    reported, a drained or a lost one offers none, however many GPUs the fabric gives it."""
    hosts = [0] * len(NODE_STATES)
    schedulable = bad = 0
    for h, st in enumerate(state):
        hosts[st] += 1
        for i in range(offs[h], offs[h] + counts[h]):
            if health[i] == BAD:
                bad += 1
            elif st == UP:
                schedulable += 1
    return {
        "hosts": len(state),
        "hosts_by_state": dict(zip(NODE_STATES, hosts, strict=True)),
        "gpus": len(alloc),
        "schedulable_gpus": schedulable,
        "allocated_gpus": sum(1 for a in alloc if a != FREE),
        "bad_gpus": bad,
    }


def digest(live: Mapping[str, Any]) -> str:
    """A short name for one live state: equal content, equal digest, whichever replica computed it."""
    raw = json.dumps(live, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.blake2b(raw, digest_size=8).hexdigest()


def diff_live(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """What turns ``old`` into ``new``: per array the changed ``[index, value, ...]`` pairs (or the whole array
    when that is shorter), the jobs added or changed and the keys of those gone, and the new counts."""
    out: dict[str, Any] = {"summary": new["summary"]}
    for name in LIVE_ARRAYS:
        a, b = old.get(name), new.get(name)
        if b is None:
            continue
        if a is None or len(a) != len(b):
            out[name] = {"all": b}
            continue
        pairs: list[Any] = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                pairs += (i, y)
        if pairs:
            out[name] = {"all": b} if len(pairs) >= len(b) else {"set": pairs}
    oj, nj = old["jobs"], new["jobs"]
    changed = {k: v for k, v in nj.items() if oj.get(k) != v}
    gone = [k for k in oj if k not in nj]
    if changed or gone:
        out["jobs"] = {"set": changed, "del": gone}
    return out


class LiveCache:
    """The last few live states sent, by digest, so a page's next poll can be answered with changes only.

    Bounded (least recently sent first out); a digest it no longer holds gets the whole live part again.
    Lives as long as the router, never in a module global.
    """

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._held: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._keys: dict[str, int] = {}
        self.meta: dict[str, tuple[str, str, str]] = {}  # job id -> (tenant, pool, name): a job never changes them
        self._built: dict[Hashable, tuple[object, dict[str, Any], str]] = {}

    def job_key(self, job_id: str) -> int:
        """A small stable number per job, so a GPU's holder changes only when the job does."""
        key = self._keys.get(job_id)
        if key is None:
            if len(self._keys) > 200_000:  # a long-lived server: start over (pages then get one full send)
                self._keys.clear()
                self._held.clear()
                self.meta.clear()
                self._built.clear()
            key = self._keys[job_id] = len(self._keys)
        return key

    def built(self, slot: Hashable, made_of: object, build: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], str]:
        """``slot``'s live part and its digest: the last one built if it was made of equal ``made_of`` (None:
        always build), else ``build()``'s. One entry per slot (a tenant and whether with telemetry)."""
        last = self._built.get(slot)
        if made_of is not None and last is not None and last[0] == made_of:
            return last[1], last[2]
        live = build()
        d = digest(live)
        self._built[slot] = (made_of, live, d)
        return live, d

    def answer(self, live: dict[str, Any], since: str | None, known: str | None = None) -> dict[str, Any]:
        """What a page holding ``since`` needs to hold ``live`` (``known``: its digest, if computed)."""
        d = known or digest(live)
        self._held[d] = live
        self._held.move_to_end(d)
        while len(self._held) > self._size:
            self._held.popitem(last=False)
        if since == d:
            return {"digest": d, "same": True}
        base = None if since is None else self._held.get(since)
        if base is None or ("util" in base) != ("util" in live):
            return {"digest": d, "live": live}
        return {"digest": d, "base": since, "diff": diff_live(base, live)}


def _tiers(fabric: Fabric) -> dict[str, Any]:
    """Switch names by tier; a leaf carries its rail and scalable unit so the page can colour and name them."""
    out: dict[str, Any] = {"core": [], "spine": [], "leaf": []}
    for s, sw in enumerate(fabric.switches):
        if sw.tier == Tier.CORE:
            out["core"].append(sw.name)
        elif sw.tier == Tier.SPINE:
            out["spine"].append(sw.name)
        else:
            out["leaf"].append([sw.name, int(fabric.leaf_rail[s]), int(fabric.leaf_su[s])])
    return out


def _groups(fabric: Fabric) -> list[dict[str, Any]]:
    """Hosts grouped by scalable unit (the leaves they share), each group listing its leaves in rail order.

    A host on no leaf (an unattached server) lands in a last group of its own, so every host is drawn.
    """
    leaf_pos = {}
    leaves = 0
    for s, sw in enumerate(fabric.switches):
        if sw.tier not in (Tier.CORE, Tier.SPINE):
            leaf_pos[s] = leaves
            leaves += 1
    members: dict[int, list[int]] = defaultdict(list)
    for h in range(len(fabric.hosts)):
        first = fabric.host_leaves[h][0] if fabric.host_leaves[h] else -1
        su = int(fabric.leaf_su[first]) if first >= 0 else -1
        members[su].append(h)
    groups = []
    for su, hosts in sorted(members.items(), key=lambda kv: (kv[0] < 0, kv[0])):
        leaf_ix = [leaf_pos[s] for s in fabric.su_leaves[su]] if 0 <= su < len(fabric.su_leaves) else []
        groups.append({"su": su, "leaves": leaf_ix, "hosts": hosts})
    return groups
