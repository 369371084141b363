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
passes as ``CycleInputs.service_history``. Until enough jobs finished, a prior of pseudo-samples spread
evenly on a log scale (a heavy tail: LAS-like) fills in; the prior weighs as ``prior_weight`` samples, so
real completions soon dominate. Jobs of every size share one distribution of GPU-seconds (Tiresias' 2D);
with ``by_gpu_count`` a job's own group (its GPU count) is used once it holds ``min_group_samples``
completions (on ITP cluster05, with 600 GPU-s quanta, 1.82x the bound shared against 1.84x per GPU count).

Cohorts (``cohort_window_s``): jobs submitted close together (a sweep, one user's burst) tend to need alike
service, and a burst can differ from everything before it. A job is ranked against its cohort, the jobs
submitted in its window of ``cohort_window_s`` or either next to it: the finished ones, and the ones still
waiting or running as censored samples at the service they had so far (a Kaplan-Meier estimate: without
them, a burst's first completions are its short jobs and the cohort would look short), mixed with the whole
history. The censored samples come from the cycle's snapshot (``GittinsView``); nothing about a job's own
runtime is used.

Batches (``batch_gap_s``): jobs of one GPU count submitted seconds apart (a sweep, a job array) need near the
same service. Once one of a batch finished, its siblings are ranked against the batch's completions; before
that, a job of the batch is ranked knowing it needs more than the most service a sibling still in the system
had (its index conditioned on X > that): the batch's leader goes on, its siblings wait for it instead of
each being probed in turn (ITP cluster05, first 1,871 jobs: 1.555x -> 1.417x the bound).
"""

from __future__ import annotations

import math
from collections import deque
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
    # For cohorts, the most recent completions' (submit time, service) kept: bounds a long-running server's
    # memory and the cost of each rebuild; above the simulator's traces (so their runs keep every completion).
    max_cohort_samples: int = 100_000
    # The shortest quantum the index considers: smooths the spike of a sample just ahead, and stands for the
    # cost of a preemption (a job yields at a checkpoint; probing it for less rarely pays).
    min_quantum_gpu_s: float = 8000.0
    running_bonus: float = 0.0  # a running job's index counts this much more when weighed against a waiting one
    # Cohorts: jobs submitted close together (a sweep, a user's burst) tend to be alike. With a window, a job
    # is ranked against the jobs submitted in its window or the two next to it: the finished ones and, as
    # censored samples (Kaplan-Meier), the ones still in the system with the service they had so far; mixed
    # with the whole history weighing as ``cohort_pooled_weight`` completions. Needs ``cohort_min`` finished.
    cohort_window_s: float = 43200.0  # 0: off
    cohort_min: int = 5
    # Whether ``cohort_min`` counts the cohort's survivors (jobs still in the system with some service) beside
    # its completions: a burst whose first jobs all ran past some service without finishing says so before
    # any of them finishes (Kaplan-Meier with no event puts them at twice the longest service seen).
    cohort_counts_survivors: bool = False
    cohort_pooled_weight: float = 5.0
    # Batches: jobs of one GPU count submitted within ``batch_gap_s`` of the one before (a chain: a sweep or a
    # job array, submitted in a few seconds) need near the same service (ITP: half of such batches span under
    # 2% between their shortest and longest job). Once ``batch_min`` jobs of a batch finished, its other jobs
    # are ranked against the batch (Kaplan-Meier, its running jobs censored) weighing as at least
    # ``batch_weight`` completions, mixed with the prior and the whole history; before that, as without.
    batch_gap_s: float = 5.0  # 0: off
    batch_min: int = 1
    batch_weight: float = 30.0
    # Before any completion, a batch's job is ranked knowing it needs more than the most service a running
    # job of its batch had so far (its siblings outlived that): the batch's leader goes on, the others wait,
    # instead of each being probed in turn.
    batch_floor: bool = True


@dataclass(frozen=True, slots=True)
class _Dist:
    """Sorted sample values, their weights, and suffix sums for the index."""

    x: FloatArray
    w: FloatArray

    @staticmethod
    def of(
        values: FloatArray,
        cfg: GittinsConfig,
        weights: FloatArray | None = None,
        extra: FloatArray | None = None,
        extra_weight: float = 0.0,
    ) -> _Dist:
        n = max(cfg.prior_points, 1) if cfg.prior_weight > 0 else 0
        prior = np.geomspace(cfg.prior_low_gpu_s, cfg.prior_high_gpu_s, n)
        more = extra if extra is not None and extra_weight > 0 else np.zeros(0)
        x = np.concatenate([values, prior, more])
        w = np.concatenate(
            [
                np.ones(len(values)) if weights is None else weights,
                np.full(n, cfg.prior_weight / max(n, 1)),
                np.full(len(more), extra_weight / max(len(more), 1)),
            ]
        )
        o = np.argsort(x, kind="stable")
        return _Dist(x[o], w[o])

    def plus(self, values: FloatArray, weights: FloatArray) -> _Dist:
        """This distribution with ``values`` added at ``weights`` (no sort: the few values go in by bisection;
        the index does not depend on the order of equal values)."""
        o = np.argsort(values, kind="stable")
        at = np.searchsorted(self.x, values[o], side="left")
        return _Dist(np.insert(self.x, at, values[o]), np.insert(self.w, at, weights[o]))

    def index(self, a: float, quantum: float, floor: float = 0.0) -> float:
        """G(a) per GPU-second over quanta of at least ``quantum``, knowing that the job needs more than
        ``floor`` (a sibling in its batch outlived it; else its own ``a``); beyond every sample, 1 / (2a):
        the tail is assumed as long again."""
        i = int(np.searchsorted(self.x, max(a, floor), side="right"))
        x, w = self.x[i:], self.w[i:]
        if x.size == 0 or float(w.sum()) <= 0:
            return 1.0 / (2.0 * max(a, floor, 1.0))
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

    __slots__ = (
        "_base",
        "_batch_dists",
        "_batch_memo",
        "_dists",
        "_gpus",
        "_memo",
        "_submits",
        "_values",
        "config",
        "counts",
    )

    def __init__(
        self,
        samples: Mapping[int, Iterable[float]],
        config: GittinsConfig | None = None,
        cohorts: Iterable[tuple[float, ...]] = (),
    ) -> None:
        """``samples``: GPU count -> services; ``cohorts``: (submit time, service[, GPU count]) of every
        completion, for ``cohort_window_s`` and ``batch_gap_s`` (a completion without its GPU count is in
        no batch)."""
        self.config = cfg = config or GittinsConfig()
        keep = cfg.cohort_window_s > 0 or cfg.batch_gap_s > 0
        triples = sorted(_with_gpus(c) for c in cohorts) if keep else []
        self._submits = np.asarray([p[0] for p in triples], dtype=np.float64)
        self._values = np.asarray([p[1] for p in triples], dtype=np.float64)
        self._gpus = np.asarray([p[2] for p in triples], dtype=np.int64)
        self._base: _Dist | None = None  # the prior and the whole history, which cohorts and batches add to
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
        self._batch_dists: dict[tuple[float, ...], _Dist] = {}
        self._batch_memo: dict[tuple[tuple[float, ...], float], float] = {}

    @staticmethod
    def empty(config: GittinsConfig | None = None) -> ServiceHistory:
        return ServiceHistory({}, config)

    def group(self, gpus: int) -> int:
        """The group whose distribution a job of ``gpus`` GPUs is ranked against."""
        return gpus if gpus in self._dists else ALL

    def dist(self, gpus: int) -> _Dist:
        """The distribution a job of ``gpus`` GPUs is ranked against without a cohort or batch."""
        return self._dists[self.group(gpus)]

    def index(self, gpus: int, attained_gpu_s: float) -> float:
        key = (self.group(gpus), attained_gpu_s)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self._dists[key[0]].index(max(0.0, attained_gpu_s), self.config.min_quantum_gpu_s)
        return got

    def view(self, alive: Iterable[tuple[float, ...]]) -> GittinsView:
        """One cycle's ranking: ``alive`` holds (submit time, service so far[, GPU count]) of the jobs still in
        the system."""
        return GittinsView(self, [_with_gpus(a) for a in alive])

    def cohort_dist(self, bucket: int, alive_submits: FloatArray, alive_service: FloatArray) -> _Dist | None:
        cfg = self.config
        w = cfg.cohort_window_s
        lo_t, hi_t = (bucket - 1) * w, (bucket + 2) * w
        lo = int(np.searchsorted(self._submits, lo_t, side="left"))
        hi = int(np.searchsorted(self._submits, hi_t, side="left"))
        inside = (alive_submits >= lo_t) & (alive_submits < hi_t) & (alive_service > 0)
        cens = alive_service[inside]
        if hi - lo + (len(cens) if cfg.cohort_counts_survivors else 0) < cfg.cohort_min:
            return None
        return self._censored_dist(self._values[lo:hi], cens, 1.0)

    def batch_index(self, done: tuple[float, ...], attained_gpu_s: float) -> float:
        """The index of a job whose batch finished jobs of ``done`` GPU-s (sorted; see ``batch_gap_s``): its
        completions weigh as ``batch_weight`` jobs at least, with the prior and the whole history. Kept
        while this history lives (its running jobs are not counted: the siblings of a batch need near the
        same service, so a completion says what a censored sample would)."""
        key = (done, attained_gpu_s)
        got = self._batch_memo.get(key)
        if got is None:
            dist = self._batch_dists.get(done)
            if dist is None:
                vals = np.asarray(done, dtype=np.float64)
                weight = max(1.0, self.config.batch_weight / len(vals))
                dist = self._batch_dists[done] = self._censored_dist(vals, np.zeros(0), weight)
            got = self._batch_memo[key] = dist.index(max(0.0, attained_gpu_s), self.config.min_quantum_gpu_s)
        return got

    def _censored_dist(self, done: FloatArray, cens: FloatArray, scale: float) -> _Dist:
        """Kaplan-Meier of ``done`` (events) and ``cens`` (still running at that service), each sample weighing
        ``scale``, mixed with the whole history (``cohort_pooled_weight``) and the prior."""
        cfg = self.config
        # At each finished value, the survivors' share falls by the finished / at risk.
        times = np.concatenate([done, cens])
        is_event = np.concatenate([np.ones(len(done), dtype=bool), np.zeros(len(cens), dtype=bool)])
        o = np.lexsort((~is_event, times))  # at a tie, the event first (a censored job outlived it)
        times, is_event = times[o], is_event[o]
        at_risk = len(times) - np.arange(len(times))
        surv = np.cumprod(np.where(is_event, 1.0 - 1.0 / at_risk, 1.0))
        before = np.concatenate([[1.0], surv[:-1]])
        mass = (before - surv)[is_event]
        vals = times[is_event]
        left = float(surv[-1])
        if left > 1e-9:  # beyond the last event: as long again as the longest seen
            vals = np.append(vals, 2.0 * float(times.max()))
            mass = np.append(mass, left)
        if self._base is None:
            self._base = _Dist.of(np.zeros(0), cfg, None, self._values, cfg.cohort_pooled_weight)
        return self._base.plus(vals, mass * (float(len(times)) * scale))

    def batch_ids(self, gpus: int, alive_submits: FloatArray) -> tuple[FloatArray, npt.NDArray[np.int64]]:
        """Of the submit times of ``gpus``-GPU jobs, finished (``self``) and ``alive_submits``: the merged
        sorted times and each one's batch (chains of gaps up to ``batch_gap_s``)."""
        merged = np.sort(np.concatenate([self._submits[self._gpus == gpus], alive_submits]))
        ids = np.concatenate([[0], np.cumsum(np.diff(merged) > self.config.batch_gap_s)]).astype(np.int64)
        return merged, ids

    def batch_done(
        self, gpus: int, merged: FloatArray, ids: npt.NDArray[np.int64]
    ) -> tuple[FloatArray, npt.NDArray[np.int64]]:
        """The services of the finished ``gpus``-GPU jobs and their batches."""
        mine = self._gpus == gpus
        return self._values[mine], ids[np.searchsorted(merged, self._submits[mine], side="left")]


def _with_gpus(sample: tuple[float, ...]) -> tuple[float, float, int]:
    """(submit time, service, GPU count); 0 GPUs (in no batch) where the caller gave no count."""
    return (float(sample[0]), float(sample[1]), int(sample[2]) if len(sample) > 2 else 0)


@dataclass(slots=True)
class _Batches:
    """One GPU count's batches in a cycle: every known submit time (finished and alive) and its batch; the
    finished jobs' services and the alive ones' services, each sorted by (batch, service)."""

    merged: FloatArray
    ids: npt.NDArray[np.int64]
    done: FloatArray
    done_ids: npt.NDArray[np.int64]
    alive: FloatArray
    alive_ids: npt.NDArray[np.int64]

    @staticmethod
    def build(
        merged: FloatArray,
        ids: npt.NDArray[np.int64],
        done: tuple[FloatArray, npt.NDArray[np.int64]],
        alive: tuple[FloatArray, npt.NDArray[np.int64]],
    ) -> _Batches:
        o, p = np.lexsort((done[0], done[1])), np.lexsort((alive[0], alive[1]))
        return _Batches(merged, ids, done[0][o], done[1][o], alive[0][p], alive[1][p])

    def of(self, submit_s: float, gap_s: float) -> int | None:
        """The batch of a job submitted at ``submit_s`` (the one it chains onto), or None."""
        pos = int(np.searchsorted(self.merged, submit_s, side="left"))
        if pos < len(self.merged) and self.merged[pos] - submit_s <= gap_s:
            return int(self.ids[pos])
        if pos > 0 and submit_s - self.merged[pos - 1] <= gap_s:
            return int(self.ids[pos - 1])
        return None

    def finished(self, bid: int) -> FloatArray:
        """The batch's completions' services, sorted."""
        lo, hi = np.searchsorted(self.done_ids, [bid, bid + 1], side="left")
        return self.done[lo:hi]

    def leader(self, bid: int) -> float:
        """The most service a job of the batch still in the system had (0 with none)."""
        hi = int(np.searchsorted(self.alive_ids, bid + 1, side="left"))
        return float(self.alive[hi - 1]) if hi > 0 and self.alive_ids[hi - 1] == bid else 0.0


class GittinsView:
    """A cycle's Gittins ranking: the history, and (with cohorts or batches) the jobs still in the system as
    censored samples of their cohort or batch."""

    __slots__ = (
        "_alive_gpus",
        "_alive_service",
        "_alive_submits",
        "_batches",
        "_cohorts",
        "_memo",
        "_of_job",
        "history",
    )

    def __init__(self, history: ServiceHistory, alive: list[tuple[float, float, int]]) -> None:
        self.history = history
        self._alive_submits = np.asarray([a[0] for a in alive], dtype=np.float64)
        self._alive_service = np.asarray([a[1] for a in alive], dtype=np.float64)
        self._alive_gpus = np.asarray([a[2] for a in alive], dtype=np.int64)
        self._cohorts: dict[int, _Dist | None] = {}
        self._batches: dict[int, _Batches] = {}
        self._memo: dict[tuple[int, int, float, float], float] = {}
        self._of_job: dict[tuple[int, float], tuple[tuple[float, ...] | None, float]] = {}

    def index(self, gpus: int, attained_gpu_s: float, submit_s: float) -> float:
        """The job's index against its batch (once it has completions), else its cohort, else the history;
        before its batch's first completion, knowing it needs more than its batch's leader had so far."""
        h = self.history
        done, floor = self._batch(gpus, submit_s)
        if done is not None:
            return h.batch_index(done, attained_gpu_s)
        key, dist = self._cohort(submit_s)
        if dist is None:
            if floor <= attained_gpu_s:
                return h.index(gpus, attained_gpu_s)
            key, dist = (-2, gpus), h.dist(gpus)
        memo = (*key, attained_gpu_s, floor)
        got = self._memo.get(memo)
        if got is None:
            got = self._memo[memo] = dist.index(max(0.0, attained_gpu_s), h.config.min_quantum_gpu_s, floor)
        return got

    def _cohort(self, submit_s: float) -> tuple[tuple[int, int], _Dist | None]:
        h = self.history
        w = h.config.cohort_window_s
        if w <= 0:
            return (-1, 0), None
        bucket = int(submit_s // w)
        if bucket not in self._cohorts:
            self._cohorts[bucket] = h.cohort_dist(bucket, self._alive_submits, self._alive_service)
        return (-1, bucket), self._cohorts[bucket]

    def _batch(self, gpus: int, submit_s: float) -> tuple[tuple[float, ...] | None, float]:
        """The services of the job's batch's completions (None before ``batch_min``) and, before them, the
        most service a running job of the batch had (``batch_floor``; else 0)."""
        got = self._of_job.get((gpus, submit_s))
        if got is not None:
            return got
        cfg = self.history.config
        got = (None, 0.0)
        if cfg.batch_gap_s > 0:
            batches = self._batches.get(gpus)
            if batches is None:
                batches = self._batches[gpus] = self._build_batches(gpus)
            bid = batches.of(submit_s, cfg.batch_gap_s)
            if bid is not None:
                done = batches.finished(bid)
                if len(done) >= max(cfg.batch_min, 1):
                    got = (tuple(float(v) for v in done), 0.0)
                elif cfg.batch_floor:
                    got = (None, batches.leader(bid))
        self._of_job[(gpus, submit_s)] = got
        return got

    def _build_batches(self, gpus: int) -> _Batches:
        h = self.history
        mine = self._alive_gpus == gpus
        submits = self._alive_submits[mine]
        merged, ids = h.batch_ids(gpus, submits)
        alive_ids = ids[np.searchsorted(merged, submits, side="left")]
        return _Batches.build(merged, ids, h.batch_done(gpus, merged, ids), (self._alive_service[mine], alive_ids))


def _window(n: int) -> int | None:
    return n if n > 0 else None


@dataclass(slots=True)
class HistoryBuilder:
    """Collects completions (the caller's side: the simulator's engine, the server's loop) and hands out an
    immutable ``ServiceHistory`` when asked; the same object until another job finishes. Memory is bounded:
    per group the last ``max_samples`` completions (all ``ServiceHistory`` uses), for cohorts the last
    ``max_cohort_samples``."""

    config: GittinsConfig = field(default_factory=GittinsConfig)
    _samples: dict[int, deque[float]] = field(default_factory=dict)
    _cohorts: deque[tuple[float, float, int]] = field(init=False)
    _built: ServiceHistory | None = None

    def __post_init__(self) -> None:
        self._cohorts = deque(maxlen=_window(self.config.max_cohort_samples))

    def finished(self, gpus: int, service_gpu_s: float, submit_s: float = 0.0) -> None:
        if not math.isfinite(service_gpu_s) or service_gpu_s < 0:
            return
        group = self._samples.get(int(gpus))
        if group is None:
            group = self._samples[int(gpus)] = deque(maxlen=_window(self.config.max_samples))
        group.append(float(service_gpu_s))
        self._cohorts.append((float(submit_s), float(service_gpu_s), int(gpus)))
        self._built = None

    @property
    def completions(self) -> int:
        """Completions held for cohorts (every completion seen, up to ``max_cohort_samples``)."""
        return len(self._cohorts)

    def history(self) -> ServiceHistory:
        if self._built is None:
            self._built = ServiceHistory(self._samples, self.config, self._cohorts)
        return self._built
