"""The submit-time check: a job that can never run is refused at the door, with why, instead of waiting forever.

Knowable at submit, from the registered nodes (whatever their state: a lost or drained node may come back)
and the defined pools:

- a pool nobody defined, once pools are in use (a stored pool, a pool a calendar names, or a quota's pool):
  ``UNKNOWN_POOL``; with none of those, a pool is only a label (accounting) and any name is taken;
- a node selector or GPU model no node has: ``NO_MATCHING_NODES``, listing what exists;
- more GPUs than the matching nodes have in all, or a task larger than the largest of them:
  ``UNSCHEDULABLE``. Checked only once a node is registered (before that, nothing is knowable).

Each is a 422 naming the field. What changes later (a node set shrinks) is the scheduler's to say: the job
waits with ``unschedulable`` and the sentence (``scheduler.diagnose``). The facts are cached for ``ttl_s``;
a job the cached facts refuse is checked again against a fresh read before it is refused, so a node, label
or pool added a moment ago (on any replica) is never refused.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gpupool.domain.errors import GpupoolError
from gpupool.domain.jobs import JobSpec
from gpupool.server.labels import NoMatchingNodesError, refusal
from gpupool.store.records import NodeRecord

_SHOWN = 12  # names listed in a refusal


class UnknownPoolError(GpupoolError):
    code = "UNKNOWN_POOL"


class UnschedulableError(GpupoolError):
    code = "UNSCHEDULABLE"


@dataclass(frozen=True, slots=True)
class NodeFacts:
    name: str
    gpu_model: str
    gpus: int
    labels: frozenset[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Facts:
    nodes: tuple[NodeFacts, ...]
    pools: frozenset[str]  # the defined pools; empty: pools are not in use
    # How many nodes have each GPU count: what a job without a model or selector is judged on, so a submit
    # costs a few steps rather than one per node (thousands of submits a second meet a thousand nodes).
    sizes: tuple[tuple[int, int], ...] = ()


def facts(nodes: Iterable[NodeRecord], pools: Iterable[str]) -> Facts:
    return _facts(tuple(_node_facts(n) for n in nodes), pools)


def _facts(listed: tuple[NodeFacts, ...], pools: Iterable[str]) -> Facts:
    return Facts(listed, frozenset(pools), _sizes(listed))


def _sizes(nodes: Iterable[NodeFacts]) -> tuple[tuple[int, int], ...]:
    return tuple(sorted(Counter(n.gpus for n in nodes).items()))


def _node_facts(n: NodeRecord) -> NodeFacts:
    return NodeFacts(n.name, n.gpu_model, n.gpu_count, frozenset(n.labels))


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _listed(names: Iterable[str]) -> str:
    shown = sorted(names)
    more = f" and {len(shown) - _SHOWN} more" if len(shown) > _SHOWN else ""
    return ", ".join(shown[:_SHOWN]) + more


def never_runs(job: JobSpec, known: Facts) -> GpupoolError | None:
    """Why ``job`` can never run on the cluster ``known`` describes, or None. Pure."""
    if known.pools and job.pool not in known.pools:
        return UnknownPoolError(f"pool {job.pool!r} is not defined; the defined pools: {_listed(known.pools)}")
    matching = [n for n in known.nodes if n.gpu_model in job.gpu_models] if job.gpu_models else []
    if job.gpu_models and not matching:
        models = {n.gpu_model for n in known.nodes if n.gpu_model}
        on = f"GPU models on nodes: {_listed(models)}" if models else "no node has reported a GPU model"
        return NoMatchingNodesError(f"no node has GPU model {' or '.join(job.gpu_models)}; {on}")
    wanted = frozenset(job.node_selector)
    if wanted:
        matching = [n for n in (matching if job.gpu_models else known.nodes) if wanted <= n.labels]
        if not matching:
            return NoMatchingNodesError(refusal(wanted, [n.labels for n in known.nodes]))
    if not known.nodes:
        return None
    constrained = bool(job.gpu_models or wanted)
    sizes = _sizes(matching) if constrained else known.sizes
    where = " with the requested GPU model and labels" if constrained else ""
    largest = max((gpus for gpus, _ in sizes), default=0)
    if job.share is not None:
        if largest > 0:
            return None
        return UnschedulableError(f"needs a share of one GPU; no registered node{where} has a GPU")
    g, tasks = job.gpus_per_task, job.fewest_tasks
    if g > largest:
        return UnschedulableError(
            f"a task needs {_gpus(g)} on one node; the largest registered node{where} has {largest}"
        )
    slots = sum(count * (gpus // g) for gpus, count in sizes)
    if slots < tasks:
        total, nodes = sum(count * gpus for gpus, count in sizes), sum(count for _, count in sizes)
        return UnschedulableError(
            f"needs {tasks} task(s) of {_gpus(g)} ({_gpus(tasks * g)}); the {nodes} registered node(s){where} "
            f"have {_gpus(total)}, room for {slots} such task(s)"
        )
    return None


class SubmitCheck:
    """The cached facts and the check (thread-safe). ``recent`` reads the nodes as the host cache holds them (at
    most ``host_cache_s`` old, this replica's own changes in at once), ``fresh`` reads them from the store, and
    ``pools`` reads the defined pools."""

    def __init__(
        self,
        recent: Callable[[], Sequence[NodeRecord]],
        fresh: Callable[[], Sequence[NodeRecord]],
        pools: Callable[[], Iterable[str]],
        ttl_s: float,
        clock: Callable[[], float],
    ) -> None:
        self._recent, self._fresh, self._pools, self._ttl_s, self._clock = recent, fresh, pools, ttl_s, clock
        self._lock = threading.Lock()
        self._reading = threading.Lock()  # one read at a time (``check``)
        self._known: Facts | None = None
        self._at = 0.0
        self._epoch = 0  # bumped by ``invalidate``: a read begun before it is not kept
        self._removed = False  # since the last fresh read: the host cache may not show it yet
        # Each record's facts, by the record's identity: the host cache hands back the same record for a node
        # whose row did not change, so the facts of a thousand nodes are not made again every ``ttl_s``.
        self._made: dict[int, tuple[NodeRecord, NodeFacts]] = {}

    def invalidate(self) -> None:
        """Labels, nodes or pools were removed here: a cached fact must not let in a job nothing can run."""
        with self._lock:
            self._known = None
            self._epoch += 1
            self._removed = True

    def cached_ok(self, job: JobSpec) -> bool:
        """Whether the cached facts, if fresh, let ``job`` in (no store read; False when none are cached)."""
        with self._lock:
            known, fresh = self._known, self._clock() - self._at < self._ttl_s
        return known is not None and fresh and never_runs(job, known) is None

    def check(self, job: JobSpec) -> None:
        """Raise why ``job`` can never run (call it off the event loop). Let in by the facts kept (if younger than
        ``ttl_s``) or by the host cache's (unless something was removed here since the last fresh read: the host
        cache may not show that yet); refused only on a fresh read of the store, so a node, label or pool added a
        moment ago on any replica never refuses a job.

        One read at a time: the submits that found the facts stale together wait for one read and are let in
        by what it read (as ``cached_ok`` would have let them in after it); a job those facts refuse is judged
        on a read of its own. Every submit stream finds them stale at once each ``ttl_s``."""
        with self._reading:
            if self.cached_ok(job):
                return
            with self._lock:
                recent = not self._removed and (self._known is None or self._clock() - self._at >= self._ttl_s)
            if recent and never_runs(job, self._read(fresh=False)) is None:
                return
            err = never_runs(job, self._read(fresh=True))
        if err is not None:
            raise err

    def _read(self, *, fresh: bool) -> Facts:
        """The facts of the nodes (the store's when ``fresh``, else the host cache's) and the pools, kept unless
        something was removed meanwhile."""
        with self._lock:
            epoch = self._epoch
        now = self._clock()
        known = _facts(self._facts_of((self._fresh if fresh else self._recent)()), self._pools())
        with self._lock:
            if self._epoch == epoch:  # else something was removed meanwhile: this read may not show it
                # No node yet: not kept, so the first nodes to register count at the next submit, not a ttl later.
                self._known, self._at = (known if known.nodes else None), now
                self._removed = self._removed and not fresh
        return known

    def _facts_of(self, nodes: Sequence[NodeRecord]) -> tuple[NodeFacts, ...]:
        made: dict[int, tuple[NodeRecord, NodeFacts]] = {}
        out = []
        for n in nodes:
            kept = self._made.get(id(n))
            f = kept[1] if kept is not None and kept[0] is n else _node_facts(n)
            made[id(n)] = (n, f)
            out.append(f)
        self._made = made
        return tuple(out)
