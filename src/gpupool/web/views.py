"""Pure builders of the dashboard's JSON payloads from plain views of the server's state (no I/O here).

The routes read the store through the server object and hand these functions small frozen views, so the
payloads can be tested without a server and the web layer never imports the store. Every builder takes
the caller's tenant (None for an admin) and drops or blanks what another tenant owns: the UI must not
leak another tenant's jobs through its own endpoints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.domain.calendar import Calendar
from gpupool.fabric.fabric import Fabric
from gpupool.web.fabricview import HostTelemetry, NodeView, RankView, num, visible

HIDDEN_HOLDER = "-"  # a GPU held by another tenant's job: the page writes that in its language


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
    expected_start_s: float | None = None  # when the scheduler expects to start it (None: unknown)


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
            holders[g] = r.job_id if shown else HIDDEN_HOLDER
        if shown:
            jobs.append({"id": r.job_id, "name": r.name, "tenant": r.tenant, "rank": r.rank, "gpus": list(r.gpus)})
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
                    "util": None if t is None else num(t.utilization_pct),
                    "temp": None if t is None else num(t.temperature_c),
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


def queue_payload(
    jobs: Sequence[JobView], now_s: float, tenant: str | None, positions: Mapping[str, int] | None = None
) -> list[dict[str, Any]]:
    """Pending jobs in the order the configured policy takes them: ``positions`` from the leader's last cycle;
    jobs it did not see (or no cycle known here) after them by priority (highest first), submit time, job id.

    Deadline jobs carry the admission answer (``infeasible`` when the scheduler refused them) and their
    slack: time to the deadline less the estimated runtime (None without an estimate).
    """
    pos_of = positions or {}
    unseen = len(pos_of) + 1
    shown = sorted(
        (j for j in jobs if visible(tenant, j.tenant)),
        key=lambda j: (pos_of.get(j.job_id, unseen), -j.priority, j.submit_time_s, j.job_id),
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
                "expected_start_s": num(j.expected_start_s),
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
