"""Value types for sharing the pool: tenants' quotas and cohorts, fair-share weights, pool demand.

Quotas follow Kueue's semantics, with one quota per (tenant, pool) standing in for a ClusterQueue: a
tenant may always use its nominal GPUs; beyond them it borrows idle nominal capacity of other members of
its cohort, up to its borrowing limit and each lender's lending limit; owners reclaim what they lent by
preemption. Decayed usage is computed by the caller from history (``decayed``) and passed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpupool.domain.errors import InputError


@dataclass(frozen=True, slots=True)
class Quota:
    """What one tenant may use in one pool, in whole GPUs (fractional jobs count their milli-GPU / 1000).

    ``gpu_model`` empty: the quota counts every GPU of the pool. A model-specific quota applies to jobs
    that ask for exactly that one model (they also count against the any-model quota when there is one).
    ``borrowing_limit_gpus`` None: may borrow whatever the cohort lends; ``lending_limit_gpus`` None: all
    of its idle nominal may be lent. ``cohort`` empty: neither borrows nor lends.
    """

    tenant: str
    pool: str
    nominal_gpus: int
    borrowing_limit_gpus: int | None = None
    lending_limit_gpus: int | None = None
    cohort: str = ""
    gpu_model: str = ""

    def __post_init__(self) -> None:
        where = f"quota {self.tenant}/{self.pool}"
        if self.nominal_gpus < 0:
            raise InputError(f"nominal_gpus must be >= 0, got {self.nominal_gpus}", source=where)
        for name, v in (("borrowing", self.borrowing_limit_gpus), ("lending", self.lending_limit_gpus)):
            if v is not None and v < 0:
                raise InputError(f"{name} limit must be >= 0, got {v}", source=where)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.tenant, self.pool, self.gpu_model)

    @property
    def lendable_gpus(self) -> int:
        """The most of its nominal quota others may borrow at once."""
        if self.lending_limit_gpus is None:
            return self.nominal_gpus
        return min(self.nominal_gpus, self.lending_limit_gpus)


@dataclass(frozen=True, slots=True)
class PoolDemand:
    """Load an inference pool must serve: ``replicas`` of ``gpus_per_replica`` plus ``headroom_gpus``, so
    the pool takes GPUs back before its SLO is at risk. ``since_s``: when the target was set; the grace
    for borrowers on the GPUs it takes back counts from there."""

    pool: str
    replicas: int
    gpus_per_replica: int
    since_s: float
    headroom_gpus: int = 0

    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica + self.headroom_gpus


def decayed(previous_gpu_s: float, elapsed_s: float, added_gpu_s: float, half_life_s: float) -> float:
    """Usage with exponential decay: what was counted ``elapsed_s`` ago loses half every ``half_life_s``.

    The caller (server or simulator) keeps one number per tenant and folds each period's GPU-seconds in.
    """
    if half_life_s <= 0:
        raise InputError(f"half_life_s must be > 0, got {half_life_s}", source="fair share")
    return previous_gpu_s * math.pow(0.5, max(0.0, elapsed_s) / half_life_s) + added_gpu_s
