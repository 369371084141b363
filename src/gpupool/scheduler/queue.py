"""The pending queue kept in a policy's order between cycles, grouped by shape, and the per-cycle view of it.

Why: a cycle over 50,000 pending jobs that sorts and visits every one of them costs tens of milliseconds
even when nothing can be placed. When the policy's order depends on each job alone (``static_key``: fifo,
priority, sjf, srt, edf), the caller keeps a ``QueueIndex``: each job is keyed and grouped once, when it
enters the queue, with the numbers a cycle reads without visiting it (``JobNumbers``: deadline, estimate,
priority, elasticity), and the cycle visits only the jobs whose outcome their shape does not decide
(``scheduler.grouped``). The index follows the cluster state's ``PendingFeed`` (what entered and left the
queue since it last read), so keeping it costs O(changes) per cycle.

Pure: the driver owns the index and hands ``schedule()`` an immutable ``QueueView`` of it; a view's groups
are tuples (copied only for the groups that changed), so a result that refers to them stays valid whatever
the index does next. ``schedule()`` trusts a view only for the policy that built it and a queue of the
request's length; the tests hold its order to the policy's own (``tests/unit/scheduler/test_queue.py``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

import numpy as np

from gpupool.cluster.snapshot import ClusterSnapshot, PendingFeed
from gpupool.domain.jobs import JobSpec
from gpupool.scheduler.policies import get_policy
from gpupool.scheduler.shapes import Shape, shape
from gpupool.scheduler.types import JobNumbers, QueueGroup, QueueView, SortKey


class _Group:
    __slots__ = ("frozen", "ids", "jobs", "keys", "numbers", "shape")

    def __init__(self, sh: Shape) -> None:
        self.shape = sh
        self.keys: list[SortKey] = []
        self.jobs: list[JobSpec] = []
        self.ids: list[str] = []
        # Kept beside the jobs: new arrays on each change (O(group) in C), so a view may share them.
        self.numbers = JobNumbers.of(())
        self.frozen: QueueGroup | None = None  # the last view's copy, until the group changes

    def insert(self, i: int, k: SortKey, job: JobSpec) -> None:
        self.keys.insert(i, k)
        self.jobs.insert(i, job)
        self.ids.insert(i, job.job_id)
        self.numbers = JobNumbers(np.insert(self.numbers.table, i, JobNumbers.row(job), axis=0))
        self.frozen = None

    def delete(self, i: int) -> None:
        del self.keys[i], self.jobs[i], self.ids[i]
        self.numbers = JobNumbers(np.delete(self.numbers.table, i, axis=0))
        self.frozen = None


class QueueIndex:
    """The pending jobs by ``policy``'s static key, grouped by shape. Owned by one caller (the driver)."""

    __slots__ = (
        "_deadlines",
        "_elastic",
        "_feed",
        "_groups",
        "_held",
        "_ids",
        "_keys",
        "_order",
        "_read",
        "_where",
        "key",
        "policy",
    )

    def __init__(self, policy: str) -> None:
        key = get_policy(policy).static_key
        if key is None:
            raise ValueError(f"policy {policy!r} has no static order to keep")
        self.policy, self.key = policy, key
        self._groups: dict[Shape, _Group] = {}
        # Every job in the policy's order too: a cycle's reasons are listed in it, without merging the groups.
        self._keys: list[SortKey] = []
        self._ids: list[str] = []
        self._order: tuple[str, ...] | None = None  # the last view's copy, until the queue changes
        self._where: dict[str, tuple[SortKey, Shape]] = {}  # job id -> its key and its group
        self._held: set[str] = set()  # jobs with dependencies or an array cap (``QueueView.held``)
        self._deadlines = 0  # jobs with a deadline (``QueueView.deadlines``)
        self._elastic = 0  # jobs with an elastic spec (``elastic``)
        self._feed: PendingFeed | None = None
        self._read = 0  # entries of ``_feed`` folded in

    @staticmethod
    def for_policy(policy: str) -> QueueIndex | None:
        """An index for ``policy``, or None when its order cannot be kept between cycles."""
        return QueueIndex(policy) if get_policy(policy).static_key is not None else None

    def __len__(self) -> int:
        return len(self._where)

    def add(self, job: JobSpec) -> None:
        self.discard(job.job_id)
        k, sh = self.key(job), shape(job)
        g = self._groups.get(sh)
        if g is None:
            g = self._groups[sh] = _Group(sh)
        g.insert(bisect_left(g.keys, k), k, job)
        i = bisect_left(self._keys, k)
        self._keys.insert(i, k)
        self._ids.insert(i, job.job_id)
        self._order = None
        self._where[job.job_id] = (k, sh)
        if job.after or job.array_cap:
            self._held.add(job.job_id)
        self._count(job, 1)

    def _count(self, job: JobSpec, sign: int) -> None:
        self._deadlines += sign * (job.deadline_s is not None)
        self._elastic += sign * (job.elastic is not None)

    @property
    def elastic(self) -> int:
        """How many pending jobs are elastic (``scheduler.elastic`` plans them before the cycle)."""
        return self._elastic

    def discard(self, job_id: str) -> None:
        got = self._where.pop(job_id, None)
        if got is None:
            return
        k, sh = got
        self._held.discard(job_id)
        g = self._groups[sh]
        i = bisect_left(g.keys, k)
        self._count(g.jobs[i], -1)
        g.delete(i)
        i = bisect_left(self._keys, k)
        del self._keys[i], self._ids[i]
        self._order = None
        if not g.keys:
            del self._groups[sh]

    def reset(self, jobs: Iterable[JobSpec]) -> None:
        """Start again from these jobs (a new feed, or a snapshot without one)."""
        self._groups.clear()
        self._where.clear()
        self._held.clear()
        self._deadlines = self._elastic = 0
        by_shape: dict[Shape, list[tuple[SortKey, JobSpec]]] = {}
        for job in jobs:
            k = self.key(job)
            sh = shape(job)
            by_shape.setdefault(sh, []).append((k, job))
            self._where[job.job_id] = (k, sh)
            if job.after or job.array_cap:
                self._held.add(job.job_id)
            self._count(job, 1)
        for sh, entries in by_shape.items():
            entries.sort(key=lambda e: e[0])
            g = self._groups[sh] = _Group(sh)
            g.keys = [k for k, _ in entries]
            g.jobs = [j for _, j in entries]
            g.ids = [j.job_id for j in g.jobs]
            g.numbers = JobNumbers.of(g.jobs)
        every = sorted((e for entries in by_shape.values() for e in entries), key=lambda e: e[0])
        self._keys = [k for k, _ in every]
        self._ids = [j.job_id for _, j in every]
        self._order = None

    def sync(self, snapshot: ClusterSnapshot) -> bool:
        """Bring the index to the snapshot's queue from its pending feed; False when the snapshot has none
        (built by hand: nothing says what changed), and the index is then left as it was."""
        feed, at = snapshot.pending_feed, snapshot.pending_feed_at
        if feed is None:
            return False
        if feed is not self._feed or at < self._read:
            self.reset(snapshot.pending)
        else:
            for entry in feed.entries[self._read : at]:
                if isinstance(entry, str):
                    self.discard(entry)
                else:
                    self.add(entry)
        self._feed, self._read = feed, at
        return True

    def view(self) -> QueueView:
        groups = []
        for g in self._groups.values():
            if g.frozen is None:
                g.frozen = QueueGroup(g.shape, tuple(g.keys), tuple(g.jobs), tuple(g.ids), g.numbers)
            groups.append(g.frozen)
        if self._order is None:
            self._order = tuple(self._ids)
        return QueueView(self.policy, tuple(groups), self._order, len(self._held), self._deadlines)
