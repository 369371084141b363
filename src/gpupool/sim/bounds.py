"""Lower bounds on the same trace, so a run's numbers can be judged against what no scheduler can beat.

- Mean isolated runtime: every job alone on an empty cluster at its best placement (its trace duration).
- Fluid preemptive SRPT over GPU-seconds on one machine of the cluster's size: relax the cluster to one
  machine that serves ``capacity`` GPU-seconds per second, shared at will; any real schedule maps onto it
  with no later completions, and on one preemptive machine SRPT minimises the sum of completion times. So
  its mean (completion - release) is a valid lower bound on mean JCT. Each job also needs at least its own
  duration; the bound reported is the larger of the two averages.
- Release-aware capacity bound on makespan: for every release time r, the work released at or after r
  cannot finish before r + work / capacity; nor can any job before its release plus its duration.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Bounds:
    mean_isolated_s: float
    srpt_avg_jct_s: float
    avg_jct_s: float  # max of the two above: both are valid, so is the larger
    makespan_s: float


def srpt_mean_jct(release_s: Sequence[float], work: Sequence[float], capacity: float) -> float:
    """Mean (completion - release) of preemptive SRPT on one machine serving ``capacity`` work units per second."""
    n = len(release_s)
    if n == 0:
        return 0.0
    order = sorted(range(n), key=lambda i: release_s[i])
    heap: list[tuple[float, int]] = []
    t = 0.0
    total = 0.0
    k = 0
    while k < n or heap:
        if not heap:
            t = max(t, release_s[order[k]])
        while k < n and release_s[order[k]] <= t:
            i = order[k]
            heapq.heappush(heap, (work[i] / capacity, i))
            k += 1
        rem, i = heapq.heappop(heap)
        nxt = release_s[order[k]] if k < n else float("inf")
        if t + rem <= nxt:
            t += rem
            total += t - release_s[i]
        else:
            heapq.heappush(heap, (rem - (nxt - t), i))
            t = nxt
    return total / n


def makespan_bound(
    release_s: Sequence[float], duration_s: Sequence[float], work: Sequence[float], capacity: float
) -> float:
    if not release_s:
        return 0.0
    r = np.asarray(release_s, dtype=np.float64)
    w = np.asarray(work, dtype=np.float64)
    order = np.argsort(r, kind="stable")
    r, w = r[order], w[order]
    suffix = np.cumsum(w[::-1])[::-1]  # work released at or after each release
    capacity_bound = float(np.max(r + suffix / capacity)) - float(r[0])
    own = float(np.max(np.asarray(release_s) + np.asarray(duration_s))) - float(r[0])
    return max(capacity_bound, own)


def lower_bounds(
    release_s: Sequence[float], duration_s: Sequence[float], gpus: Sequence[float], capacity: int
) -> Bounds:
    """Bounds for jobs released at ``release_s`` that run ``duration_s`` on ``gpus`` GPUs, on ``capacity`` GPUs.
    Makespan is measured from the first release."""
    work = [d * g for d, g in zip(duration_s, gpus, strict=True)]
    isolated = float(np.mean(duration_s)) if duration_s else 0.0
    srpt = srpt_mean_jct(release_s, work, float(capacity))
    return Bounds(isolated, srpt, max(isolated, srpt), makespan_bound(release_s, duration_s, work, float(capacity)))
