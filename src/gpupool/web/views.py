"""Pure builders of the dashboard's JSON payloads from plain views of the server's state (no I/O here).

The routes read the store through the server object and hand these functions small frozen views, so the
payloads can be tested without a server and the web layer never imports the store. Every builder takes
the caller's tenant (None for an admin) and drops or blanks what another tenant owns: the UI must not
leak another tenant's jobs through its own endpoints.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.domain.calendar import Calendar
from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Tier

# Node states on the wire of the fabric payload; "unregistered" is a fabric host no agent has reported.
NODE_STATES = ("up", "drained", "lost", "unregistered")
# Per-GPU allocation codes besides a job index: free, or held by a job the caller may not see.
FREE, HIDDEN = -1, -2
# Leaf flags, worst wins: a leaf with a down link is drawn red, erroring orange, congested yellow.
LEAF_OK, LEAF_CONGESTED, LEAF_ERRORING, LEAF_DOWN = 0, 1, 2, 3
CONGESTED_WAIT_PER_S = 1_000.0  # PortXmitWait ticks per second above which a link counts as congested


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


@dataclass(frozen=True, slots=True)
class JobView:
    job_id: str
    tenant: str
    pool: str
    name: str
    priority: int  # PriorityClass value: higher goes first
    priority_name: str
    tasks: int
    gpus_per_task: int
    submit_time_s: float
    deadline_s: float | None
    estimated_runtime_s: float | None
    reason_code: str
    reason: str


def visible(tenant: str | None, owner: str) -> bool:
    """An admin (tenant None) sees everything; a tenant only what it owns."""
    return tenant is None or tenant == owner


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 1)


def _leaf_flag(port: PortTelemetry) -> int:
    if port.state == "down":
        return LEAF_DOWN
    if port.state == "degraded" or (port.errors_per_s or 0.0) > 0.0:
        return LEAF_ERRORING
    if (port.xmit_wait_per_s or 0.0) > CONGESTED_WAIT_PER_S:
        return LEAF_CONGESTED
    return LEAF_OK


def fabric_payload(
    fabric: Fabric,
    version: int,
    nodes: Sequence[NodeView],
    ranks: Sequence[RankView],
    telemetry: Mapping[str, HostTelemetry],
    tenant: str | None,
) -> dict[str, Any]:
    """One compact document for the fabric page: flat per-GPU arrays, so 1,000 hosts cost one small JSON.

    ``gpu_offset[h]`` is where host ``h``'s GPUs start in ``alloc``, ``health``, ``util`` and ``temp``.
    ``alloc`` holds an index into ``jobs``, ``FREE`` or ``HIDDEN`` (another tenant's job).
    """
    n = len(fabric.hosts)
    counts = [h.gpu_count for h in fabric.hosts]
    offsets = [0] * n
    total = 0
    for i, c in enumerate(counts):
        offsets[i] = total
        total += c
    by_name = {nv.name: nv for nv in nodes}
    state = []
    health = [-1] * total
    for i, fh in enumerate(fabric.hosts):
        nv = by_name.get(fh.name)
        state.append(NODE_STATES.index(nv.state) if nv is not None and nv.state in NODE_STATES else 3)
        if nv is not None:
            for g, grade in enumerate(nv.health[: counts[i]]):
                health[offsets[i] + g] = int(grade)
    jobs: list[str] = []
    job_ix: dict[str, int] = {}
    alloc = [FREE] * total
    for r in ranks:
        if not fabric.has_host(r.host):
            continue
        h = fabric.host_index(r.host)
        if visible(tenant, r.tenant):
            if r.job_id not in job_ix:
                job_ix[r.job_id] = len(jobs)
                jobs.append(r.job_id)
            code = job_ix[r.job_id]
        else:
            code = HIDDEN
        for g in r.gpus:
            if 0 <= g < counts[h]:
                alloc[offsets[h] + g] = code
    util: list[float | None] = [None] * total
    temp: list[float | None] = [None] * total
    leaf_flag = [LEAF_OK] * len(fabric.switches)
    hca_by_name = {(fabric.hcas[i].host, fabric.hcas[i].name): i for i in range(len(fabric.hcas))}
    for host, t in telemetry.items():
        if not fabric.has_host(host):
            continue
        h = fabric.host_index(host)
        for g, s in t.gpus.items():
            if 0 <= g < counts[h]:
                util[offsets[h] + g] = _num(s.utilization_pct)
                temp[offsets[h] + g] = _num(s.temperature_c)
        for p in t.ports:
            hca = hca_by_name.get((host, p.hca))
            leaf = -1 if hca is None else int(fabric.hca_leaf[hca])
            if leaf >= 0:
                leaf_flag[leaf] = max(leaf_flag[leaf], _leaf_flag(p))
    return {
        "name": fabric.name,
        "version": version,
        "rails": fabric.rail_count,
        "hosts": [h.name for h in fabric.hosts],
        "gpus": counts,
        "gpu_offset": offsets,
        "state": state,
        "alloc": alloc,
        "health": health,
        "util": util,
        "temp": temp,
        "jobs": jobs,
        "tiers": _tiers(fabric, leaf_flag),
        "groups": _groups(fabric),
    }


def _tiers(fabric: Fabric, leaf_flag: Sequence[int]) -> dict[str, Any]:
    """Switches by tier; a leaf carries its rail and flag so the page can colour rails and trouble."""
    out: dict[str, Any] = {"core": [], "spine": [], "leaf": []}
    for s, sw in enumerate(fabric.switches):
        if sw.tier == Tier.CORE:
            out["core"].append(sw.name)
        elif sw.tier == Tier.SPINE:
            out["spine"].append(sw.name)
        else:
            out["leaf"].append([sw.name, int(fabric.leaf_rail[s]), int(fabric.leaf_su[s]), int(leaf_flag[s])])
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


def host_payload(
    fabric: Fabric | None,
    name: str,
    node: NodeView | None,
    ranks: Sequence[RankView],
    telemetry: HostTelemetry | None,
    tenant: str | None,
) -> dict[str, Any]:
    """One host's GPUs (model, memory, rail HCA, health, who holds it), HCAs (rail, leaf) and visible jobs."""
    host = fabric.host(name) if fabric is not None and fabric.has_host(name) else None
    holders: dict[int, str] = {}
    jobs = []
    for r in ranks:
        if r.host != name:
            continue
        shown = visible(tenant, r.tenant)
        for g in r.gpus:
            holders[g] = r.job_id if shown else "(another tenant)"
        if shown:
            jobs.append({"id": r.job_id, "tenant": r.tenant, "rank": r.rank, "gpus": list(r.gpus)})
    gpus = []
    hcas = []
    if host is not None and fabric is not None:
        h = fabric.host_index(name)
        for gpu in host.gpus:
            rail = fabric.rail_hca(h, gpu.index)
            t = None if telemetry is None else telemetry.gpus.get(gpu.index)
            grade = node.health[gpu.index] if node is not None and gpu.index < len(node.health) else -1
            gpus.append(
                {
                    "index": gpu.index,
                    "model": gpu.model,
                    "memory_mib": gpu.memory_mib,
                    "nvlink_island": gpu.nvlink_island,
                    "hca": "" if rail is None else rail.name,
                    "health": grade,
                    "job": holders.get(gpu.index, ""),
                    "util": None if t is None else _num(t.utilization_pct),
                    "temp": None if t is None else _num(t.temperature_c),
                }
            )
        for guid in host.hcas:
            i = fabric.hca_index(guid)
            leaf = int(fabric.hca_leaf[i])
            hcas.append(
                {
                    "name": fabric.hcas[i].name,
                    "guid": guid,
                    "rate_gbps": fabric.hcas[i].rate_gbps,
                    "rail": fabric.rail_of_hca(i),
                    "leaf": fabric.switches[leaf].name if leaf >= 0 else "",
                }
            )
    return {
        "name": name,
        "state": "unregistered" if node is None else node.state,
        "gpus": gpus,
        "hcas": hcas,
        "jobs": sorted(jobs, key=lambda j: (j["id"], j["rank"])),
    }


def queue_payload(jobs: Sequence[JobView], now_s: float, tenant: str | None) -> list[dict[str, Any]]:
    """Pending jobs in the order the policy takes them: priority (highest first), submit time, job id.

    Deadline jobs carry the admission answer (``infeasible`` when the scheduler refused them) and their
    slack: time to the deadline less the estimated runtime (None without an estimate).
    """
    shown = sorted(
        (j for j in jobs if visible(tenant, j.tenant)), key=lambda j: (-j.priority, j.submit_time_s, j.job_id)
    )
    out = []
    for pos, j in enumerate(shown, start=1):
        admission = slack = None
        if j.deadline_s is not None:
            admission = "infeasible" if j.reason_code == "deadline_infeasible" else "admitted"
            if j.estimated_runtime_s is not None:
                slack = round(j.deadline_s - now_s - j.estimated_runtime_s, 1)
        out.append(
            {
                "order": pos,
                "id": j.job_id,
                "tenant": j.tenant,
                "pool": j.pool,
                "name": j.name,
                "priority": j.priority_name,
                "gpus": j.tasks * j.gpus_per_task,
                "tasks": j.tasks,
                "waiting_s": round(max(0.0, now_s - j.submit_time_s), 1),
                "reason_code": j.reason_code,
                "reason": j.reason,
                "deadline_s": j.deadline_s,
                "admission": admission,
                "slack_s": slack,
            }
        )
    return out


def pool_calendar(
    calendar: Calendar, now_s: float, horizon_s: float = 86_400.0, step_s: float = 900.0
) -> list[dict[str, Any]]:
    """Each calendar rule's share over the next ``horizon_s``, as segments where the share is constant.

    Sampled every ``step_s`` (a quarter hour: calendar windows are set in minutes, and a day has 96 steps);
    a change between samples shows at the next one.
    """
    rules: list[dict[str, Any]] = []
    steps = int(horizon_s // step_s)
    samples = [calendar.shares_at(now_s + k * step_s) for k in range(steps + 1)]
    for r_ix in range(len(samples[0])):
        segments: list[list[float]] = []
        for k, shares in enumerate(samples):
            f = round(shares[r_ix].fraction, 4)
            t = now_s + k * step_s
            if segments and segments[-1][2] == f:
                segments[-1][1] = t
            else:
                segments.append([t, t, f])
        first = samples[0][r_ix]
        rules.append(
            {
                "pool": first.pool,
                "sus": list(first.sus),
                "hosts": list(first.hosts),
                "fraction_now": first.fraction,
                "segments": segments,
            }
        )
    return rules


def lending(
    quotas: Sequence[tuple[str, str, str, int, str]], used: Mapping[tuple[str, str], float], tenant: str | None
) -> list[dict[str, Any]]:
    """Per quota (tenant, pool, GPU model, nominal GPUs, cohort): GPUs in use, borrowed above the nominal, and
    the unused nominal that others in the cohort may borrow (lent out when they do)."""
    out = []
    for t, pool, model, nominal, cohort in quotas:
        if not visible(tenant, t):
            continue
        u = used.get((t, pool), 0.0)
        out.append(
            {
                "tenant": t,
                "pool": pool,
                "gpu_model": model,
                "cohort": cohort,
                "nominal_gpus": nominal,
                "used_gpus": round(u, 3),
                "borrowed_gpus": round(max(0.0, u - nominal), 3),
                "lendable_gpus": round(max(0.0, nominal - u), 3),
            }
        )
    return out
