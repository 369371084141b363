"""The ``scheduler`` settings section: everything that decides, with one set of defaults for both worlds.

``gpupool server`` reads it from its settings file and ``GPUPOOL_SCHEDULER__<NAME>`` variables
(``server.settings``); ``gpupool sim run --config FILE`` reads the same section of the same file, and its
flags override it. ``scheduler_config`` and ``sharing_policy`` are the one way from these settings to the
scheduler's ``SchedulerConfig`` and ``SharingPolicy``; ``problems`` lists what is wrong with a section, by
setting name, so each reader can say where the value came from.

Where the two worlds used to differ, the default is chosen once:

- ``preemption`` is on (as the server had it): it only ever takes GPUs from jobs submitted ``preemptible``
  or from quota and pool borrowers, so a simulated trace whose jobs are not preemptible runs as before.
- ``deadline_admission`` is on (issue 20; it was off, as the simulator had it): a deadline job that cannot
  finish by its deadline even if placed now (its launch counted) waits, DEADLINE_INFEASIBLE, until someone
  cancels it, instead of taking GPUs that jobs which can still make theirs need; a deadline job about to miss
  may preempt ``preemptible`` jobs without a deadline and, when that cannot save it, ``preemptible`` deadline
  jobs that still meet theirs after a restart (``scheduler.taking``). Jobs without a deadline are not
  affected. On Chronus' MIX1 (first 2 h, 960 GPUs, jobs preemptible as Chronus' are) the defaults meet 100%
  of strict deadlines, Chronus' own artifact 99.59% (docs/benchmarks.md); off, a deadline only orders the
  queue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gpupool.domain.calendar import Calendar
from gpupool.domain.sharing import Quota
from gpupool.scheduler.gittins import GittinsConfig
from gpupool.scheduler.placers import PLACERS
from gpupool.scheduler.policies import POLICIES
from gpupool.scheduler.types import (
    BackfillMode,
    PreemptionConfig,
    SchedulerConfig,
    SharingPolicy,
    TelemetryWeights,
)

# A preemptive policy (``QueuePolicy.preempts_by_service``) with preemption on preempts by its rank, but only
# victims that checkpointed within this many seconds, unless ``max_lost_s`` says otherwise: a job probed for
# a quantum should yield at a checkpoint, not lose hours of work (Tiresias' practice).
PREEMPTIVE_MAX_LOST_S = 60.0


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    # Who goes next and where it goes (one registry each).
    policy: str = "srt"  # fifo, priority, srt, sjf, hrrn, las, gittins, sf-srpt, sf-gittins, edf, slack, fair
    placer: str = "topology"  # first-fit, best-fit, spread, topology, frag
    max_placements_per_cycle: int = 1000  # the rest of the queue waits for the next cycle (CYCLE_LIMIT)
    strict: bool = False  # nothing overtakes a job that does not fit (the rest wait BLOCKED)
    seed: int = 0  # the only randomness a policy or placer may use (``gpupool sim run --seed`` sets it too)
    max_domains_tried: int = 8  # per topology level, before a gang search moves up a level
    # A gang over several hosts goes under one leaf (else one SU) when one can hold it; without room there now,
    # a ``preferred`` one (the default mode) waits when a domain is expected to have room within this many
    # seconds, and crosses domains otherwise (``scheduler.topowait``; 0: never waits).
    topology_wait_s: float = 3600.0
    # A job with a time limit gets its checkpoint signal (SIGUSR1) this long before the limit, unless its own
    # ``signal_lead_s`` (sbatch --signal=USR1@N) says otherwise; at the limit it is stopped (state timeout).
    time_limit_lead_s: float = 60.0
    las_thresholds_gpu_s: tuple[float, ...] = (3600.0, 36000.0, 360000.0)  # ``las`` queues (Tiresias)
    gittins: GittinsConfig = field(default_factory=GittinsConfig)  # ``gittins``' prior, quantum and cohorts
    telemetry: TelemetryWeights = field(default_factory=TelemetryWeights)  # how telemetry steers placement
    # Preemption: quota and pool reclaims (after a checkpoint signal and ``preemption_grace_s``), priority,
    # and attained service (Tiresias; implied by a preemptive policy such as ``gittins``).
    preemption: bool = True
    preemption_by_priority: bool = True  # a job may preempt ``preemptible`` jobs of a lower priority class
    preemption_by_service: bool = False  # ... and ``preemptible`` jobs it ranks before (LAS queue, Gittins index)
    max_lost_s: float | None = None  # by service: spare victims with more work than this since a checkpoint
    preemption_min_runtime_s: float = 300.0  # a job runs this long before a preemptor may take its GPUs
    preemption_grace_s: float = 300.0  # a reclaim's checkpoint signal comes this long before the stop
    max_preemptors_per_cycle: int = 16
    max_victims_per_job: int = 64
    # Backfill: none, easy (one reservation) or conservative (up to ``max_reservations``).
    backfill: BackfillMode = BackfillMode.EASY
    max_reservations: int = 16
    default_runtime_s: float = 3600.0  # what backfill, deadlines and slack assume for a job without an estimate
    # Deadlines: refuse a job that cannot finish in time even if started now (and start an elastic one smaller).
    deadline_admission: bool = True
    # What the scheduler expects between a placement and the job running (benchmarks/launch_latency.py; the
    # simulator's world default): deadline admission counts it.
    launch_latency_s: float = 0.4
    # A deadline job is "at risk" (/why; it may preempt) when its slack is under this share of its runtime or
    # under 30 s (``deadlines.AT_RISK_MIN_S``).
    deadline_at_risk: float = 0.1
    slack_boost_at: tuple[float, ...] = (2.0, 0.5)  # ``slack``: slack / runtime ratios that raise priority by one
    # Tenants and pools.
    lend_pools: bool = True  # jobs may borrow other pools' idle hosts (reclaimed when the owner needs them)
    require_quota: bool = False  # a tenant without a quota in a pool may not run there
    usage_half_life_s: float = 7 * 86400.0  # fair share forgets half of a tenant's usage this often


def problems(s: SchedulerSettings) -> list[tuple[str, str]]:
    """(setting, what is wrong) for every value the types allow but the scheduler does not."""
    out: list[tuple[str, str]] = []
    if s.policy not in POLICIES:
        out.append(("policy", f"{s.policy!r} is not one of {', '.join(sorted(POLICIES))}"))
    if s.placer not in PLACERS:
        out.append(("placer", f"{s.placer!r} is not one of {', '.join(sorted(PLACERS))}"))
    th = s.las_thresholds_gpu_s
    if any(not 0 < t < float("inf") for t in th) or list(th) != sorted(set(th)):
        out.append(("las_thresholds_gpu_s", f"{list(th)} must be positive and increasing"))
    if s.max_lost_s is not None and s.max_lost_s < 0:
        out.append(("max_lost_s", f"{s.max_lost_s} is negative"))
    elif s.max_lost_s is not None and not by_service(s):
        out.append(("max_lost_s", "needs preemption by service (preemption_by_service, or a preemptive policy)"))
    for name in ("max_placements_per_cycle", "max_domains_tried", "max_preemptors_per_cycle", "max_victims_per_job"):
        if getattr(s, name) < 1:
            out.append((name, f"{getattr(s, name)} must be at least 1"))
    for name in (
        "preemption_min_runtime_s",
        "preemption_grace_s",
        "max_reservations",
        "usage_half_life_s",
        "time_limit_lead_s",
        "topology_wait_s",
        "launch_latency_s",
    ):
        if getattr(s, name) < 0:
            out.append((name, f"{getattr(s, name)} is negative"))
    if not s.default_runtime_s > 0:
        out.append(("default_runtime_s", f"{s.default_runtime_s} must be positive"))
    return out


def by_service(s: SchedulerSettings) -> bool:
    """Whether preemption by attained service is on: asked for, or implied by a preemptive policy."""
    policy = POLICIES.get(s.policy)
    implied = s.preemption and policy is not None and policy.preempts_by_service
    return s.preemption_by_service or implied


def scheduler_config(s: SchedulerSettings) -> SchedulerConfig:
    return SchedulerConfig(
        policy=s.policy,
        placer=s.placer,
        max_placements_per_cycle=s.max_placements_per_cycle,
        strict=s.strict,
        seed=s.seed,
        telemetry=s.telemetry,
        las_thresholds_gpu_s=s.las_thresholds_gpu_s,
        gittins=s.gittins,
        max_domains_tried=s.max_domains_tried,
        time_limit_lead_s=s.time_limit_lead_s,
        topology_wait_s=s.topology_wait_s,
    )


def sharing_policy(
    s: SchedulerSettings,
    *,
    quotas: tuple[Quota, ...] = (),
    weights: Mapping[str, float] | None = None,
    calendar: Calendar | None = None,
) -> SharingPolicy:
    """The sharing rules from the settings and the cluster's own data: tenants' quotas and weights, the pools'
    calendar (the server's store; the simulator's ``--calendar``)."""
    service = by_service(s)
    lost = s.max_lost_s
    if lost is None and service and not s.preemption_by_service:
        lost = PREEMPTIVE_MAX_LOST_S
    return SharingPolicy(
        quotas=quotas,
        require_quota=s.require_quota,
        weights=MappingProxyType(dict(weights or {})),
        usage_half_life_s=s.usage_half_life_s,
        calendar=calendar,
        lend_pools=s.lend_pools,
        preemption=PreemptionConfig(
            enabled=s.preemption,
            by_priority=s.preemption_by_priority,
            by_service=service,
            max_lost_s=lost,
            min_runtime_s=s.preemption_min_runtime_s,
            grace_s=s.preemption_grace_s,
            max_preemptors_per_cycle=s.max_preemptors_per_cycle,
            max_victims_per_job=s.max_victims_per_job,
        ),
        backfill=s.backfill,
        max_reservations=s.max_reservations,
        default_runtime_s=s.default_runtime_s,
        deadline_at_risk=s.deadline_at_risk,
        deadline_admission=s.deadline_admission,
        launch_latency_s=s.launch_latency_s,
        slack_boost_at=s.slack_boost_at,
    )
