"""Gittins index of attained GPU-service (Tiresias' 2D-Gittins) against a service distribution learned online.

Without knowing a job's runtime, the best order for the mean completion time is by the Gittins index of the
service it has had (Gittins; Aalto, Ayesta and Righter): for a job that attained ``a`` GPU-seconds, with X
the service a job needs,

    G(a) = max over b > a of  P(a < X <= b) / E[min(X, b) - a ; X > a]

the best ratio of "chance to finish within the next quantum" to "GPU-seconds the quantum costs". Highest
index first. With a decreasing hazard (a heavy tail) it behaves like least-attained-service; with an
increasing one (jobs bunched around a size) like first-come-first-served, and in between it finds the
quantum worth giving every new job before demoting it.

The scheduler knows no job's runtime. What it knows is ``ServiceHistory``: the total GPU-seconds of service
(wall time x GPUs over all runs, as ``ClusterSnapshot.attained_gpu_s`` counts it) of jobs that already
finished, which the caller (the simulator's engine, the server's loop) collects from completions and
passes as ``SharingPolicy.service_history``. Until enough jobs finished, a prior of pseudo-samples spread
evenly on a log scale (a heavy tail: LAS-like) fills in; the prior weighs as ``prior_weight`` samples, so
real completions soon dominate. Jobs of every size share one distribution of GPU-seconds (Tiresias' 2D);
with ``by_gpu_count`` a job's own group (its GPU count) is used once it holds ``min_group_samples``
completions (on ITP cluster05, with 600 GPU-s quanta, 1.82x the bound shared against 1.84x per GPU count).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
ALL = 0  # the group of every job, whatever its GPU count


@dataclass(frozen=True, slots=True)
class GittinsConfig:
    prior_low_gpu_s: float = 60.0  # the prior's pseudo-samples span this ..
    prior_high_gpu_s: float = 4.0e6  # .. to this, evenly on a log scale
    prior_points: int = 32
    prior_weight: float = 8.0  # the prior counts as this many finished jobs
    by_gpu_count: bool = False  # one distribution per GPU count (else one for all jobs, Tiresias' 2D)
    min_group_samples: int = 30  # with ``by_gpu_count``, a group is used on its own from this many completions
    max_samples: int = 2000  # per group, the most recent completions kept (the distribution may drift)
    # The shortest quantum the index considers: smooths the spike of a sample just ahead, and stands for the
    # cost of a preemption (a job yields at a checkpoint; probing it for less rarely pays).
    min_quantum_gpu_s: float = 8000.0
    running_bonus: float = 0.0  # a running job's index counts this much more when weighed against a waiting one


@dataclass(frozen=True, slots=True)
class _Dist:
    """Sorted sample values, their weights, and suffix sums for the index."""

    x: FloatArray
    w: FloatArray

    @staticmethod
    def of(values: FloatArray, cfg: GittinsConfig) -> _Dist:
        n = max(cfg.prior_points, 1) if cfg.prior_weight > 0 else 0
        prior = np.geomspace(cfg.prior_low_gpu_s, cfg.prior_high_gpu_s, n)
        x = np.concatenate([values, prior])
        w = np.concatenate([np.ones(len(values)), np.full(n, cfg.prior_weight / max(n, 1))])
        o = np.argsort(x, kind="stable")
        return _Dist(x[o], w[o])

    def index(self, a: float, quantum: float) -> float:
        """G(a) per GPU-second over quanta of at least ``quantum``; beyond every sample, 1 / (2a): the tail
        is assumed as long again."""
        i = int(np.searchsorted(self.x, a, side="right"))
        x, w = self.x[i:], self.w[i:]
        if x.size == 0 or float(w.sum()) <= 0:
            return 1.0 / (2.0 * max(a, 1.0))
        cw = np.cumsum(w)  # weight finished by each candidate end b = x[k]
        cwx = np.cumsum(w * (x - a))  # their service past a
        rest = cw[-1] - cw  # weight still running at b, each having had b - a
        ratio = cw / np.maximum(cwx + rest * (x - a), 1e-9)
        # Quanta shorter than ``quantum`` do not count: an empirical sample just above ``a`` would otherwise
        # make the index spike, and no real preemption is that fine-grained. The quantum of exactly
        # ``quantum`` is a candidate of its own.
        k = int(np.searchsorted(x, a + quantum, side="right"))
        best = float(ratio[k:].max()) if k < x.size else 0.0
        if k > 0:
            best = max(best, float(cw[k - 1]) / max(float(cwx[k - 1] + rest[k - 1] * quantum), 1e-9))
        return best


class ServiceHistory:
    """Completed jobs' GPU-service per GPU-count group. Immutable once built; indices are memoised."""

    __slots__ = ("_dists", "_memo", "config", "counts")

    def __init__(self, samples: Mapping[int, Iterable[float]], config: GittinsConfig | None = None) -> None:
        self.config = cfg = config or GittinsConfig()
        groups = {g: np.asarray(list(v), dtype=np.float64)[-cfg.max_samples :] for g, v in samples.items()}
        pooled = [v for g, v in groups.items() if g != ALL]
        if ALL not in groups:
            groups[ALL] = np.concatenate(pooled) if pooled else np.zeros(0)
        self.counts: Mapping[int, int] = MappingProxyType({g: len(v) for g, v in groups.items()})
        self._dists = {
            g: _Dist.of(v, cfg)
            for g, v in groups.items()
            if g == ALL or (cfg.by_gpu_count and len(v) >= cfg.min_group_samples)
        }
        self._memo: dict[tuple[int, float], float] = {}

    @staticmethod
    def empty(config: GittinsConfig | None = None) -> ServiceHistory:
        return ServiceHistory({}, config)

    def group(self, gpus: int) -> int:
        """The group whose distribution a job of ``gpus`` GPUs is ranked against."""
        return gpus if gpus in self._dists else ALL

    def index(self, gpus: int, attained_gpu_s: float) -> float:
        key = (self.group(gpus), attained_gpu_s)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self._dists[key[0]].index(max(0.0, attained_gpu_s), self.config.min_quantum_gpu_s)
        return got


@dataclass(slots=True)
class HistoryBuilder:
    """Collects completions (the caller's side) and hands out an immutable ``ServiceHistory`` when asked;
    the same object until another job finishes."""

    config: GittinsConfig = field(default_factory=GittinsConfig)
    _samples: dict[int, list[float]] = field(default_factory=dict)
    _built: ServiceHistory | None = None

    def finished(self, gpus: int, service_gpu_s: float) -> None:
        if not math.isfinite(service_gpu_s) or service_gpu_s < 0:
            return
        self._samples.setdefault(int(gpus), []).append(float(service_gpu_s))
        self._built = None

    def history(self) -> ServiceHistory:
        if self._built is None:
            self._built = ServiceHistory(self._samples, self.config)
        return self._built
