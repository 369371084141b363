"""Queue policies: who goes next. One interface, one registry; ties always end in (priority, submit, id).

Every key ends with ``(-priority, submit_time_s, job_id)``, so the order is total and does not depend on
the order jobs arrive in the request.

A policy declares what it needs and how it ranks, so that nothing outside this registry tests a policy's
name: ``uses_service_history`` (the caller must collect finished jobs' GPU-service into
``CycleInputs.service_history``), ``preempts_by_service`` (a preemptive policy: with preemption on, a job it
ranks first may preempt a running one it ranks later) and ``service_ranker`` (the rank preemption by
service compares: the LAS queue, or the negated Gittins index).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from operator import attrgetter
from types import MappingProxyType
from typing import Protocol

from gpupool.cluster.snapshot import ClusterSnapshot
from gpupool.domain.errors import UnknownNameError
from gpupool.domain.jobs import MILLI_PER_GPU, JobSpec, PriorityClass
from gpupool.scheduler.deadlines import RESTART_S
from gpupool.scheduler.gittins import GittinsView, ServiceHistory
from gpupool.scheduler.serverfilling import Filling, server_filling
from gpupool.scheduler.types import SchedulerConfig, ScheduleRequest, SharingPolicy, SortKey

KeyFn = Callable[[JobSpec], SortKey]
# (job, attained GPU-seconds, running?) -> its service rank; lower ranks first (preemption by service).
ServiceRanker = Callable[[JobSpec, float, bool], float]


def _tie(job: JobSpec) -> tuple[int, float, str]:
    return (-int(job.priority), job.submit_time_s, job.job_id)


_ID, _SUBMIT, _PRIORITY = attrgetter("job_id"), attrgetter("submit_time_s"), attrgetter("priority")


def by_arrival(jobs: Iterable[JobSpec]) -> list[JobSpec]:
    """Jobs by (submit time, id): two stable sorts on attributes, read in C, instead of a key tuple built in
    Python per job (about 4x faster on 20,000 jobs; the order is the same)."""
    out = sorted(jobs, key=_ID)
    out.sort(key=_SUBMIT)
    return out


def by_tie(jobs: Iterable[JobSpec]) -> list[JobSpec]:
    """Jobs in ``_tie`` order (priority, highest first, then ``by_arrival``): one more stable sort."""
    out = by_arrival(jobs)
    out.sort(key=_PRIORITY, reverse=True)  # stable in reverse too: equal priorities keep their order
    return out


class QueuePolicy(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def uses_service_history(self) -> bool:
        """The caller must fill ``CycleInputs.service_history`` from completions (``gittins.HistoryBuilder``)."""
        ...

    @property
    def preempts_by_service(self) -> bool:
        """A preemptive policy: turning preemption on implies preemption by service rank."""
        ...

    def prepare(self, request: ScheduleRequest) -> KeyFn:
        """The sort key for this cycle; a policy that ranks jobs against each other computes it here."""
        ...

    def service_ranker(self, request: ScheduleRequest) -> ServiceRanker:
        """This cycle's service rank for preemption by service."""
        ...

    def order(self, request: ScheduleRequest) -> list[JobSpec]:
        """The pending jobs in this cycle's order (``prepare``'s key)."""
        ...

    @property
    def static_key(self) -> KeyFn | None:
        """A key that depends on the job alone and orders the queue as ``order`` does in every cycle, so the
        order can be kept between cycles (``scheduler.queue``); None when the order changes with time or
        state (waits, attained service, usage)."""
        ...


def las_ranker(request: ScheduleRequest) -> ServiceRanker:
    limits = request.config.las_thresholds_gpu_s
    return lambda job, attained, running: float(las_queue(attained, limits))


@dataclass(frozen=True, slots=True)
class _Policy:
    """What most policies declare: no service history, not preemptive, ranked by LAS queue for preemption."""

    uses_service_history: bool = False
    preempts_by_service: bool = False

    def service_ranker(self, request: ScheduleRequest) -> ServiceRanker:
        return las_ranker(request)

    def prepare(self, request: ScheduleRequest) -> KeyFn:
        raise NotImplementedError

    def order(self, request: ScheduleRequest) -> list[JobSpec]:
        return sorted(request.pending, key=self.prepare(request))

    @property
    def static_key(self) -> KeyFn | None:
        return None


@dataclass(frozen=True, slots=True)
class _Static(_Policy):
    """A policy whose key depends on the job alone: the same in every cycle."""

    @property
    def static_key(self) -> KeyFn:
        raise NotImplementedError

    def prepare(self, request: ScheduleRequest) -> KeyFn:
        return keyed_as_restarted(self.static_key, request.snapshot.preemption_count)


def as_ordered(job: JobSpec, preempted: Mapping[str, int]) -> JobSpec:
    """The job as a static order sees it: a deadline job preempted before pays a restart (``RESTART_S``)
    before its work goes on again, so its deadline counts that much earlier (``srt``, ``edf``: its latest
    start, the restart counted, as ``taking.latest_start``). Ordered by its deadline alone, a restarted job
    went after jobs with up to a minute more slack, which took the room its preemptor had left it (Chronus
    SLO and MIX2 on 960 GPUs)."""
    if job.deadline_s is None or not preempted.get(job.job_id):
        return job
    return replace(job, deadline_s=job.deadline_s - RESTART_S)


def keyed_as_restarted(key: KeyFn, preempted: Mapping[str, int]) -> KeyFn:
    """``key`` over ``as_ordered`` jobs (``key`` itself when no job was preempted)."""
    if not preempted:
        return key
    return lambda job: key(as_ordered(job, preempted))


@dataclass(frozen=True, slots=True)
class _ByKey(_Policy):
    """A policy whose key depends on the job alone (and the cycle's inputs)."""

    def key(self, job: JobSpec, now_s: float, snapshot: ClusterSnapshot, config: SchedulerConfig) -> SortKey:
        raise NotImplementedError

    def prepare(self, request: ScheduleRequest) -> KeyFn:
        now_s, snapshot, config = request.now_s, request.snapshot, request.config
        return lambda j: self.key(j, now_s, snapshot, config)


def _arrival(job: JobSpec) -> SortKey:
    return (job.submit_time_s, job.job_id)


def _smallest_work(job: JobSpec) -> SortKey:
    est = job.estimated_runtime_s
    return (math.inf if est is None else est * job.gpu_milli, *_tie(job))


def _class_then_runtime(job: JobSpec) -> SortKey:
    est = job.estimated_runtime_s
    if job.deadline_s is not None:  # the latest start that meets it, earliest first (edf's order)
        return (-int(job.priority), 0, job.deadline_s - (est or 0.0), job.submit_time_s, job.job_id)
    return (-int(job.priority), 1, math.inf if est is None else est, job.submit_time_s, job.job_id)


def _latest_start(job: JobSpec) -> SortKey:
    # deadline - now - runtime orders as deadline - runtime: ``now`` is the same for every job of a cycle.
    if job.deadline_s is None:
        return (1, math.inf, *_tie(job))
    return (0, job.deadline_s - (job.estimated_runtime_s or 0.0), *_tie(job))


@dataclass(frozen=True, slots=True)
class Fifo(_Static):
    name: str = "fifo"

    @property
    def static_key(self) -> KeyFn:
        return _arrival

    def order(self, request: ScheduleRequest) -> list[JobSpec]:
        return by_arrival(request.pending)


@dataclass(frozen=True, slots=True)
class Priority(_Static):
    """Priority classes, highest first, then first come first served."""

    name: str = "priority"

    @property
    def static_key(self) -> KeyFn:
        return _tie

    def order(self, request: ScheduleRequest) -> list[JobSpec]:
        return by_tie(request.pending)  # sorting 20,000 jobs is a cycle's fixed cost


@dataclass(frozen=True, slots=True)
class ShortestJobFirst(_Static):
    """Shortest estimated GPU-time first (runtime x GPUs); jobs without an estimate go last."""

    name: str = "sjf"

    @property
    def static_key(self) -> KeyFn:
        return _smallest_work


@dataclass(frozen=True, slots=True)
class ShortestRuntimeFirst(_Static):
    """Priority classes, highest first; inside a class deadline jobs first, by the latest start that meets the
    deadline (``edf``'s order), then the shortest estimated runtime (time limit) first, jobs without an
    estimate after those with one, first come first served. The default: with no deadlines or estimates it is
    ``priority``; with a time limit per job (Slurm's information) it is what lowers the mean JCT most of the
    static orders on the Slurm-comparison traces (docs/benchmarks.md), and EASY backfill's reservation for
    the first job that does not fit keeps a long gang from waiting behind every later short job."""

    name: str = "srt"

    @property
    def static_key(self) -> KeyFn:
        return _class_then_runtime


@dataclass(frozen=True, slots=True)
class HighestResponseRatioNext(_ByKey):
    """Highest response ratio next: ratio = (wait + estimate) / estimate, highest first, with wait =
    now - submit time (never below 0) and estimate the job's estimated runtime (its time limit). A short
    job rises fast, but every waiting job's ratio grows, so a long job cannot starve behind a stream of
    short ones. Jobs without an estimate go after every job with one, FIFO among themselves (submit
    time first); ties end in (-priority, submit, id) as everywhere. Pure: the clock is ``now_s``."""

    name: str = "hrrn"

    def key(self, job: JobSpec, now_s: float, snapshot: ClusterSnapshot, config: SchedulerConfig) -> SortKey:
        est = job.estimated_runtime_s
        if est is None:
            return (1, job.submit_time_s, *_tie(job))
        wait = max(0.0, now_s - job.submit_time_s)
        return (0, -(wait + est) / est, *_tie(job))


def las_queue(attained_gpu_s: float, thresholds_gpu_s: tuple[float, ...]) -> int:
    """The LAS queue of a job with this much attained service: how many thresholds it has reached."""
    return sum(1 for t in thresholds_gpu_s if attained_gpu_s >= t)


@dataclass(frozen=True, slots=True)
class LeastAttainedService(_ByKey):
    """Tiresias' discretised LAS: the queue is the number of GPU-second thresholds the job's attained
    service has passed; lower queues first, FIFO inside a queue. Needs no runtime estimates."""

    name: str = "las"

    def key(self, job: JobSpec, now_s: float, snapshot: ClusterSnapshot, config: SchedulerConfig) -> SortKey:
        queue = las_queue(snapshot.attained_gpu_s.get(job.job_id, 0.0), config.las_thresholds_gpu_s)
        return (queue, job.submit_time_s, -int(job.priority), job.job_id)


def service_history(request: ScheduleRequest) -> ServiceHistory:
    """The request's finished-job service distribution, or the prior alone when it carries none."""
    got = request.inputs.service_history
    return got if got is not None else ServiceHistory.empty(request.config.gittins)


@dataclass(frozen=True, slots=True)
class GittinsIndex(_Policy):
    """Highest Gittins index of attained GPU-service first (``scheduler.gittins``), against the distribution
    of finished jobs of the same GPU count (``CycleInputs.service_history``); FIFO among equal indices.
    Needs no runtime estimates: only attained service and completions of other jobs. Preemptive: with
    preemption on, a job of a higher index preempts a running one of a lower index (counting its run)."""

    uses_service_history: bool = True
    preempts_by_service: bool = True
    name: str = "gittins"

    def prepare(self, request: ScheduleRequest) -> KeyFn:
        view = gittins_view(request)
        attained = request.snapshot.attained_gpu_s
        return lambda j: (
            -view.index(j.total_gpus, attained.get(j.job_id, 0.0), j.submit_time_s),
            j.submit_time_s,
            -int(j.priority),
            j.job_id,
        )

    def service_ranker(self, request: ScheduleRequest) -> ServiceRanker:
        """The negated index; a running job's raised by ``GittinsConfig.running_bonus``."""
        view = gittins_view(request)
        bonus = 1.0 + request.config.gittins.running_bonus

        def rank(job: JobSpec, attained: float, running: bool) -> float:
            return -view.index(job.total_gpus, attained, job.submit_time_s) * (bonus if running else 1.0)

        return rank


def in_system(request: ScheduleRequest, pending: Iterable[JobSpec]) -> list[tuple[JobSpec, float]]:
    """``pending`` and the running jobs, each with its GPU-service so far (a running job's current run counted)."""
    snapshot, now_s = request.snapshot, request.now_s
    att = snapshot.attained_gpu_s
    out = [(j, att.get(j.job_id, 0.0)) for j in pending]
    out += [
        (r.spec, att.get(jid, 0.0) + r.runtime_s(now_s) * r.gpu_milli / MILLI_PER_GPU)
        for jid, r in snapshot.running.items()
    ]
    return out


def gittins_view(request: ScheduleRequest) -> GittinsView:
    """This cycle's Gittins ranking; with cohorts or batches, every job in the system is a censored sample."""
    hist = service_history(request)
    if hist.config.cohort_window_s <= 0 and hist.config.batch_gap_s <= 0:
        return hist.view(())
    alive = in_system(request, request.snapshot.pending)
    return hist.view((j.submit_time_s, service, j.total_gpus) for j, service in alive)


# (job, GPU-service so far) -> its priority in a ServerFilling policy; lower first.
Rank = Callable[[JobSpec, float], float]


@dataclass(frozen=True, slots=True)
class _ServerFilling(_Policy):
    """ServerFilling (``scheduler.serverfilling``) over every job in the system (the request's pending jobs
    and the running ones) ranked by ``priority``, on the cluster's GPUs. The queue's order: the waiting jobs
    of the prefix, largest first, then the others by priority (they take GPUs the prefix leaves free, as on
    hosts a large job of the prefix may not fit at once). Preemptive: with preemption on, a waiting job of the
    prefix preempts running jobs outside it, the lowest ranked first (at their checkpoints, ``max_lost_s``);
    jobs of the prefix never preempt each other, and outside it a job preempts the running ones it ranks
    before (as ``gittins`` does: the GPUs a large job of the prefix cannot use yet still go by rank)."""

    preempts_by_service: bool = True

    def priority(self, request: ScheduleRequest) -> Rank:
        raise NotImplementedError

    def filling(self, request: ScheduleRequest) -> tuple[Filling, dict[str, int]]:
        """The cycle's choice, and each job's place in the ranking."""
        prio = self.priority(request)
        jobs = in_system(request, request.pending)
        ranked = sorted(((prio(j, s), j.submit_time_s, j.job_id, j.total_gpus) for j, s in jobs))
        gpus = int(request.snapshot.index.host_gpus.sum())
        got = server_filling([(r[2], r[3]) for r in ranked], gpus)
        return got, {r[2]: i for i, r in enumerate(ranked)}

    def prepare(self, request: ScheduleRequest) -> KeyFn:
        pos = {jid: i for i, jid in enumerate(self.filling(request)[0].order)}
        return lambda j: (pos[j.job_id], j.job_id)

    def service_ranker(self, request: ScheduleRequest) -> ServiceRanker:
        """-1 in the prefix; outside, the job's place in the ranking (the last is preempted first)."""
        got, place = self.filling(request)
        served = got.served

        def rank(job: JobSpec, attained: float, running: bool) -> float:
            if job.job_id in served:
                return -1.0
            return float(place.get(job.job_id, len(place)))

        return rank


def remaining_work(job: JobSpec, service_gpu_s: float) -> float:
    """GPU-seconds left by the job's estimate (infinite without one). Work lost to preemptions counts as done
    (attained service includes it): at most ``max_lost_s`` and a restart per preemption."""
    est = job.estimated_runtime_s
    return math.inf if est is None else max(0.0, est * job.gpu_milli / MILLI_PER_GPU - service_gpu_s)


@dataclass(frozen=True, slots=True)
class ServerFillingSrpt(_ServerFilling):
    """ServerFilling-SRPT: least remaining work (GPU-seconds, the fluid bound's SRPT) first. Clairvoyant: it
    reads the jobs' runtime estimates as exact (a reference arm, an oracle with ``--know-durations``)."""

    name: str = "sf-srpt"

    def priority(self, request: ScheduleRequest) -> Rank:
        return remaining_work


@dataclass(frozen=True, slots=True)
class ServerFillingGittins(_ServerFilling):
    """ServerFilling-Gittins: highest Gittins index of attained GPU-service first (``gittins``' index, its
    history and cohorts). Needs no runtime estimates."""

    uses_service_history: bool = True
    name: str = "sf-gittins"

    def priority(self, request: ScheduleRequest) -> Rank:
        view = gittins_view(request)
        return lambda j, service: -view.index(j.total_gpus, service, j.submit_time_s)


@dataclass(frozen=True, slots=True)
class EarliestDeadlineFirst(_Static):
    """Least slack first: deadline - now - estimated runtime (the runtime counts as 0 when unknown), that is
    the latest start that still meets the deadline, earliest first. Jobs without a deadline follow, by
    priority."""

    name: str = "edf"

    @property
    def static_key(self) -> KeyFn:
        return _latest_start


def slack_priority(job: JobSpec, now_s: float, sharing: SharingPolicy) -> int:
    """A deadline job's priority, raised by one class for each ``slack_boost_at`` ratio its slack / runtime
    has fallen to (up to REALTIME); other jobs keep theirs."""
    if job.deadline_s is None:
        return int(job.priority)
    runtime = job.runtime_with(job.tasks, sharing.default_runtime_s)
    ratio = (job.deadline_s - now_s - runtime) / runtime
    boost = sum(1 for r in sharing.slack_boost_at if ratio <= r)
    return min(int(PriorityClass.REALTIME), int(job.priority) + boost)


@dataclass(frozen=True, slots=True)
class Slack(_Policy):
    """Priority classes with deadline jobs raised as their slack shrinks, least slack first inside a class."""

    name: str = "slack"

    def prepare(self, request: ScheduleRequest) -> KeyFn:
        now_s, sharing = request.now_s, request.sharing
        default = sharing.default_runtime_s

        def key(j: JobSpec) -> SortKey:
            slack = math.inf if j.deadline_s is None else j.deadline_s - now_s - j.runtime_with(j.tasks, default)
            return (-slack_priority(j, now_s, sharing), slack, j.submit_time_s, j.job_id)

        return key


@dataclass(frozen=True, slots=True)
class FairShare(_Policy):
    """Weighted dominant resource fairness with decayed history, by progressive filling.

    A tenant's standing is its dominant share now (the largest of its GPU, CPU and memory fractions of the
    cluster) plus its decayed usage as a fraction of the cluster over one half-life, divided by its weight.
    Each of its pending jobs, in (priority, submit, id) order, is keyed by that standing plus the dominant
    shares of its jobs ahead of it, so tenants interleave as DRF would fill them. Ties end in ``_tie``.
    """

    name: str = "fair"

    def prepare(self, request: ScheduleRequest) -> KeyFn:
        sh, snapshot, pending, usage = request.sharing, request.snapshot, request.pending, request.inputs.usage_gpu_s
        ix = snapshot.index
        gpus = max(1.0, float(ix.host_gpus.sum()))
        cpu = max(1.0, float(ix.host_cpu_millicores.sum()))
        mem = max(1.0, float(ix.host_memory_mib.sum()))

        def dominant(g_milli: float, c: float, m: float) -> float:
            return max(g_milli / MILLI_PER_GPU / gpus, c / cpu, m / mem)

        used: dict[str, list[float]] = {}
        for r in snapshot.running.values():
            u = used.setdefault(r.spec.tenant, [0.0, 0.0, 0.0])
            u[0] += r.gpu_milli
            u[1] += sum(t.cpu_millicores for t in r.allocation.tasks)
            u[2] += sum(t.memory_mib for t in r.allocation.tasks)
        standing: dict[str, float] = {}
        for t in {j.tenant for j in pending} | set(used):
            u = used.get(t, [0.0, 0.0, 0.0])
            history = usage.get(t, 0.0) / (gpus * sh.usage_half_life_s)
            standing[t] = dominant(u[0], u[1], u[2]) + history
        keys: dict[str, float] = {}
        for j in sorted(pending, key=_tie):
            w = sh.weights.get(j.tenant, 1.0)
            keys[j.job_id] = standing[j.tenant] / w
            standing[j.tenant] += dominant(j.gpu_milli, j.cpu_millicores * j.tasks, j.memory_mib * j.tasks)

        return lambda j: (keys.get(j.job_id, 0.0), *_tie(j))


POLICIES: Mapping[str, QueuePolicy] = MappingProxyType(
    {
        p.name: p
        for p in (
            Fifo(),
            Priority(),
            ShortestJobFirst(),
            ShortestRuntimeFirst(),
            HighestResponseRatioNext(),
            LeastAttainedService(),
            GittinsIndex(),
            ServerFillingSrpt(),
            ServerFillingGittins(),
            EarliestDeadlineFirst(),
            Slack(),
            FairShare(),
        )
    }
)


def get_policy(name: str) -> QueuePolicy:
    """The one place a policy is chosen by its name."""
    try:
        return POLICIES[name]
    except KeyError:
        raise UnknownNameError(f"unknown queue policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None


def order(policy: QueuePolicy, request: ScheduleRequest) -> list[JobSpec]:
    return policy.order(request)
