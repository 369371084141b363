"""Elastic jobs: the GPU counts a job can run at and how fast it runs at each (its throughput curve).

An elastic job declares a range of sizes (``min_gpus``..``max_gpus`` in steps of ``step``) and a throughput
curve: measured points (GPUs -> samples/s, iterations/s, any unit the user likes: only ratios are used). It runs
only at the sizes of the range that are points of its curve, because a throughput between two measured points
is a guess. Its work is its estimate (``JobSpec.estimated_runtime_s``) at its asked size (``tasks`` x
``gpus_per_task``), so a size of the curve ``k`` finishes the same work in ``estimate x rate(asked) / rate(k)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpupool.domain.errors import JobSpecError


@dataclass(frozen=True, slots=True)
class ThroughputCurve:
    """Measured throughput per GPU count, ascending by GPUs; ``name`` is the named curve it came from ("")."""

    points: tuple[tuple[int, float], ...]
    name: str = ""

    def __post_init__(self) -> None:
        where = f"curve {self.name}" if self.name else "throughput curve"
        if not self.points:
            raise JobSpecError("a throughput curve needs at least one point", source=where)
        last = 0
        for gpus, rate in self.points:
            if gpus <= last:
                raise JobSpecError(f"GPU counts must rise and be >= 1, got {gpus} after {last}", source=where)
            if not (math.isfinite(rate) and rate > 0):
                raise JobSpecError(f"throughput at {gpus} GPUs must be a number > 0, got {rate}", source=where)
            last = gpus

    def has(self, gpus: int) -> bool:
        return any(g == gpus for g, _ in self.points)

    def rate(self, gpus: int) -> float:
        """Throughput at a measured GPU count (a count the curve lacks is the caller's bug: ``KeyError``)."""
        for g, r in self.points:
            if g == gpus:
                return r
        raise KeyError(gpus)


@dataclass(frozen=True, slots=True)
class Elastic:
    """The sizes an elastic job may run at and its curve. Sizes are whole GPUs of the whole job."""

    min_gpus: int
    max_gpus: int
    curve: ThroughputCurve
    step: int = 1

    def check(self, gpus_per_task: int, asked_gpus: int, where: str) -> None:
        """Refuse a range the job cannot run in: one clear error naming the problem."""
        if self.min_gpus < 1 or self.max_gpus < self.min_gpus:
            raise JobSpecError(f"elastic gpus need 1 <= min <= max, got {self.min_gpus}..{self.max_gpus}", source=where)
        if self.step < 1:
            raise JobSpecError(f"elastic gpus step must be >= 1, got {self.step}", source=where)
        if not self.sizes(gpus_per_task):
            raise JobSpecError(
                f"no size in {self.min_gpus}..{self.max_gpus} (step {self.step}, whole ranks of {gpus_per_task} "
                f"GPUs) is a point of the throughput curve {[g for g, _ in self.curve.points]}",
                source=where,
            )
        if not self.curve.has(asked_gpus):
            raise JobSpecError(
                f"the asked size ({asked_gpus} GPUs, which its estimate is for) must be a point of the throughput "
                f"curve {[g for g, _ in self.curve.points]}",
                source=where,
            )

    def sizes(self, gpus_per_task: int = 1) -> tuple[int, ...]:
        """The GPU counts the job may run at, ascending: in range, on the step, whole ranks, on the curve."""
        return tuple(
            g
            for g, _ in self.curve.points
            if self.min_gpus <= g <= self.max_gpus and (g - self.min_gpus) % self.step == 0 and g % gpus_per_task == 0
        )
