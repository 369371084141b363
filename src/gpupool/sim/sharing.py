"""The simulator's sharing options mapped onto the scheduler's ``SharingPolicy``.

A run without any of them sends ``NO_SHARING`` (the cycle only orders, places and diagnoses). ``--preemption`` turns on the
scheduler's preemption: a job may preempt ``preemptible`` jobs of a lower priority class, and reclaims
(pools, quotas) signal a checkpoint first. A victim must have run at least ``min_runtime_s``: never less
than the world's restart overhead, else a preemption could cost more than the run it interrupts. The world
(``WorldConfig``) charges what a preemption costs (restart overhead, work since the last checkpoint).

Priority classes are fixed at submission and a trace's training jobs usually share one class, so ``las``
with ``--preemption`` alone preempts nothing there. ``--preemption-by-service`` adds Tiresias' rule (it
implies ``--preemption``): a job in a lower LAS queue than a running preemptible job may take its GPUs,
and ``--max-lost-s`` spares victims with more work than that since their last checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.calendar import Calendar
from gpupool.scheduler import BackfillMode, PreemptionConfig, SharingPolicy
from gpupool.sim.world import WorldConfig


@dataclass(frozen=True, slots=True)
class SharingOptions:
    preemption: bool = False
    backfill: BackfillMode = BackfillMode.NONE
    calendar: Calendar | None = None
    lend_pools: bool = True  # with a calendar: jobs may borrow other pools' idle hosts
    deadline_admission: bool = False  # refuse deadline jobs that cannot finish in time even if started now
    default_runtime_s: float = 3600.0  # what backfill, deadlines and slack assume for a job without an estimate
    demand_headroom_gpus: int | None = None  # services' GPUs plus this are their pool's demand target (None: off)
    grace_s: float = PreemptionConfig().grace_s  # a reclaim's victim checkpoints and is preempted this much later
    by_service: bool = False  # Tiresias: preempt jobs in a higher LAS queue (only with ``preemption``)
    max_lost_s: float | None = None  # by_service: spare victims with more work than this since a checkpoint

    @property
    def any(self) -> bool:
        return (
            self.preemption
            or self.backfill is not BackfillMode.NONE
            or self.calendar is not None
            or self.deadline_admission
        )


def sharing_policy(options: SharingOptions, world: WorldConfig) -> SharingPolicy | None:
    """The request's sharing policy for a run with ``options`` in ``world``, or None (``NO_SHARING``)."""
    if not options.any:
        return None
    base = PreemptionConfig()
    pre = PreemptionConfig(
        enabled=options.preemption,
        min_runtime_s=max(base.min_runtime_s, world.restart_overhead_s),
        grace_s=options.grace_s,
        by_service=options.by_service,
        max_lost_s=options.max_lost_s,
    )
    return SharingPolicy(
        calendar=options.calendar,
        lend_pools=options.lend_pools,
        preemption=pre,
        backfill=options.backfill,
        default_runtime_s=options.default_runtime_s,
        deadline_admission=options.deadline_admission,
    )
