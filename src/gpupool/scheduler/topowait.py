"""Topology by default: a gang over several hosts goes to the smallest domain that holds it, or waits for one.

A job that needs more GPUs than one host has is placed under one leaf (else one SU) whenever a domain of that
size could ever hold it, without the user asking (``scope: any`` means "the smallest that fits", not "spread").
Its ``topology.mode`` says how hard to try:

- ``required``: only there; it waits as long as it takes.
- ``preferred`` (the default): only there while such a domain is expected to have room within
  ``SchedulerConfig.topology_wait_s`` (by the running jobs' estimates, or for a job without one, its attained
  runtime again: a job that ran an hour is expected to run about another); otherwise anywhere, smallest domain
  first. A bounded wait: the expected ends move later as jobs run on, so a job never waits for a domain
  whose room keeps receding.
- ``any``: anywhere now, smallest domain first (what ``preferred`` meant before).

The decision is the cycle's, made from the cluster as the cycle found it (not as its earlier placements left
it), so jobs of one shape are decided alike within a cycle and a shape refused stays refused (``refusals``).
It is carried as the job's topology for this cycle: a ``preferred`` job that waits becomes ``required`` at its
scope, so placement, reservations, preemption and the reason it waits all see the one requirement.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpupool.cluster.index import Level
from gpupool.cluster.snapshot import ClusterSnapshot
from gpupool.domain.jobs import JobSpec, Scope, TopologyMode, TopologyRequirement
from gpupool.fabric.model import Domain

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
_SCOPE_OF = {Domain.LEAF: Scope.LEAF, Domain.SU: Scope.SU}
_DOMAIN_OF = {Scope.LEAF: Domain.LEAF, Scope.SU: Domain.SU}


class TopologyWait:
    """This cycle's topology decisions, one per (shape, mask), from the capacity the cycle started with."""

    __slots__ = ("_future", "_memo", "free0", "host_gpus", "levels", "max_gpus", "now", "snapshot", "wait_s")

    def __init__(self, snapshot: ClusterSnapshot, free_whole: IntArray, now_s: float, wait_s: float) -> None:
        ix = snapshot.index
        self.snapshot, self.now, self.wait_s = snapshot, now_s, wait_s
        self.free0 = free_whole.copy()
        self.host_gpus: IntArray = ix.host_gpus
        self.max_gpus = ix.max_gpus
        self.levels = [lv for lv in ix.levels if lv.domain in _SCOPE_OF]
        self._future: IntArray | None = None
        self._memo: dict[tuple[object, ...], TopologyRequirement | None] = {}

    def decision(self, job: JobSpec, mask_key: object, mask: BoolArray | None) -> TopologyRequirement | None:
        """The topology ``job`` is placed by in this cycle when it is not its own; None: its own (the cycle
        copies the job with it only where more than its shape is needed: ``Cycle.placed_as``)."""
        t = job.topology
        if (
            job.tasks == 1
            or t.mode is TopologyMode.ANY
            or job.share is not None
            or job.gpus_per_task * job.tasks <= self.max_gpus
            or t.scope is Scope.NVLINK
            or t.required
        ):
            return None
        key = (job.tasks, job.gpus_per_task, t, mask_key)
        memo = self._memo
        if key in memo:
            return memo[key]
        got = memo[key] = self._decide(t, job.gpus_per_task, job.tasks, mask)
        return got

    def _decide(self, t: TopologyRequirement, g: int, tasks: int, mask: BoolArray | None) -> TopologyRequirement | None:
        level = self._level(t.scope, g, tasks, mask)
        if level is None:
            return None
        if t.mode is TopologyMode.REQUIRED or (self.wait_s > 0 and self._room_soon(level, g, tasks, mask)):
            return TopologyRequirement(_SCOPE_OF[level.domain], TopologyMode.REQUIRED)
        return None

    def _level(self, scope: Scope, g: int, tasks: int, mask: BoolArray | None) -> Level | None:
        """The job's scope as a level: the one it names, or the smallest whose largest domain holds it."""
        per_host = self.host_gpus // g
        if mask is not None:
            per_host = np.where(mask, per_host, 0)
        for lv in self.levels:
            if scope is not Scope.ANY and lv.domain != _DOMAIN_OF[scope]:
                continue
            if int(np.bincount(lv.ids, weights=per_host, minlength=lv.count).max(initial=0)) >= tasks:
                return lv
        return None

    def _room_soon(self, lv: Level, g: int, tasks: int, mask: BoolArray | None) -> bool:
        """Whether some domain of ``level`` is expected to hold the gang within ``wait_s``."""
        if self._room(lv, self.free0, g, tasks, mask):
            return True  # room now: the GPUs free later include those free now
        return self._room(lv, self._future_free(), g, tasks, mask)

    @staticmethod
    def _room(lv: Level, free_whole: IntArray, g: int, tasks: int, mask: BoolArray | None) -> bool:
        free = free_whole // g
        if mask is not None:
            free = np.where(mask, free, 0)
        per_dom = np.bincount(lv.ids, weights=free, minlength=lv.count)
        return bool((per_dom >= tasks).any())

    def _future_free(self) -> IntArray:
        """Whole GPUs free per host once the jobs expected to end within ``wait_s`` have ended. A job is expected
        to end at start + estimate while within it; past its estimate or without one, at now + its runtime so
        far (attained service as the predictor of what is left). From the snapshot's running arrays: every
        job's end compared at once, their whole-GPU tasks summed per host at once."""
        if self._future is None:
            now, run = self.now, self.snapshot.running_arrays()
            age = np.maximum(now - run.start_s, 0.0)
            # The estimate while within it (NaN, no estimate, compares False), else the runtime so far again.
            ends = np.where(run.estimate_s > age, run.start_s + run.estimate_s, now + age) <= now + self.wait_s
            ending = (run.alive & ends)[run.task_slot]
            ended = np.bincount(run.task_host[ending], weights=run.task_gpus[ending], minlength=self.free0.size)
            self._future = self.free0 + ended.astype(np.int64)
        return self._future
