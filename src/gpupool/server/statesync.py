"""The scheduling loop's state from the store: the rebuild of a ``ClusterState`` from what is stored, and the
per-cycle sync that folds in what other writers changed (new jobs, jobs that moved or left the live set and
how they ended, releasing ranks, nodes' states, grades and labels), and the ends of jobs that pending jobs
depend on. A mixin of ``SchedulingLoop``, which owns the attributes declared here; only the loop's thread
calls it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from gpupool.cluster import ClusterState
from gpupool.domain.dependencies import TERMINAL
from gpupool.domain.errors import GpupoolError
from gpupool.domain.events import (
    JobEnded,
    JobPlaced,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    NodeDrained,
    NodeLost,
    NodeRestored,
    RanksReleased,
    RanksReleasing,
)
from gpupool.domain.states import JobState, NodeState
from gpupool.fabric.fabric import Fabric
from gpupool.scheduler.driver import CycleDriver
from gpupool.server.journal import NoJournal
from gpupool.server.live import HeldFacts, LiveInbox
from gpupool.store import JobRecord, LoadedState, NodeRecord, Store
from gpupool.store.server_ops import ChangeMark, LiveJob, ServerOps

log = logging.getLogger("gpupool.server.loop")

_PLACED = (JobState.PLACED, JobState.RUNNING)
_LIVE = (JobState.PENDING, *_PLACED)


class StoreSync:
    _store: Store
    _ops: ServerOps
    _clock: Callable[[], float]
    _state: ClusterState | None
    _fabric: Fabric | None
    _dirty: bool
    _db_state: dict[str, JobState]
    _versions: dict[str, int]
    _suspect: bool  # the state and the stored states may disagree on a pending job (``SchedulingLoop._waiting``)
    _mark: ChangeMark  # where the next read of the jobs' changes starts (``ServerOps.job_changes``)
    _facts: HeldFacts
    _driver: CycleDriver
    _journal: NoJournal
    _fresh_lock: threading.Lock
    _fresh: dict[str, JobRecord]
    live: LiveInbox

    # -- state from the store ----------------------------------------------------------------------------------
    def _rebuild(self, fabric: Fabric) -> None:
        # Taken before the store is read: an event put from here on is pending for the next cycle's drain,
        # and one put before is in ``telemetry`` (or, a durable fact, in the store), so none is lost or doubled.
        telemetry = self.live.restart()
        mark = self._ops.change_mark()  # before the read: a job changed meanwhile is read again by the next sync
        loaded = self._store.load_state()
        state = self._journal.new_state(fabric)
        fold_stored(state, loaded, fabric, self._clock())
        self._facts = HeldFacts()  # a job the store still places on a BAD GPU is requeued by this cycle
        self._facts.sync(state, loaded.nodes, self._clock())
        for ev in telemetry:
            try:
                state.apply(ev)
            except GpupoolError:
                continue  # a host or switch the new fabric lacks
        self._state = state
        self._fabric = fabric
        self._db_state = {j.job_id: j.state for j in loaded.jobs}
        self._versions = {j.job_id: j.version for j in loaded.jobs}
        self._mark = mark
        self._dirty = False
        self._suspect = True

    def _sync(self, nodes: Sequence[NodeRecord]) -> bool:
        """Fold changes other writers made into the state; False when only a rebuild can explain them.

        Only the jobs whose state or version changed since the last read are read (``ServerOps.job_changes``,
        the database's own change counter): the loop's own writes come back too and agree with what it holds."""
        state = self._state
        assert state is not None
        # Taken before the read: every hint was committed before it, so a hinted job the read does not show as
        # pending has already left the queue (or was folded in earlier) and its hint can go.
        with self._fresh_lock:
            fresh, self._fresh = self._fresh, {}
        changes, mark = self._ops.job_changes(self._mark)
        db = self._db_state
        if any(c.job_id not in db and c.state in _PLACED for c in changes):
            return False  # placed by another writer (a former leader): only the whole store explains it
        new = [c.job_id for c in changes if c.job_id not in db and c.state is JobState.PENDING]
        now = self._clock()
        try:
            read = {r.job_id: r for r in self._ops.specs([j for j in new if j not in fresh])}
            for job_id in new:
                rec = fresh.get(job_id) or read[job_id]
                state.apply(JobSubmitted(rec.spec, rec.created_s))
                db[job_id] = JobState.PENDING
            if not self._fold_changes(state, changes, now):
                return False
            self._sync_releasing(state, now)
            self._sync_nodes(state, now, nodes)
        except GpupoolError as e:
            log.info("state sync needs a rebuild: %s", e)
            return False
        self._mark = mark
        return True

    def _fold_changes(self, state: ClusterState, changes: Sequence[LiveJob], now: float) -> bool:
        """Each known job's new state: ended (it left the live set, with how it ended), started, requeued."""
        db = self._db_state
        for c in changes:
            old = db.get(c.job_id)
            if old is None:
                continue  # ended before this loop ever saw it live
            if c.state not in _LIVE:
                learns = old is JobState.RUNNING and c.state is JobState.FINISHED
                self._end(state, c.job_id, c.state, now, learns)
                del db[c.job_id]
                self._versions.pop(c.job_id, None)
                continue
            if c.state is not old:
                if old is JobState.PLACED and c.state is JobState.RUNNING:
                    state.apply(JobStarted(c.job_id, now))
                elif old in _PLACED and c.state is JobState.PENDING:
                    state.apply(JobPreempted(c.job_id, now, "requeued"))
                else:
                    return False
            db[c.job_id] = c.state
            self._versions[c.job_id] = c.version
        return True

    def _sync_releasing(self, state: ClusterState, now: float) -> None:
        """Hold the GPUs of stopped jobs' ranks still releasing (whoever stopped them); free those confirmed gone."""
        stored, held = self._store.releasing_allocations(), state.releasing
        for job_id in held.keys() - stored.keys():
            state.apply(RanksReleased(job_id, now))
        for job_id, alloc in stored.items():
            if held.get(job_id) != alloc:
                state.apply(RanksReleasing(alloc, now))

    def _end(self, state: ClusterState, job_id: str, final: JobState, now: float, learns: bool) -> None:
        """A job left the live set as ``final`` (read from the store: the jobs depending on it see how it
        ended). ``learns``: it finished while running (a policy that learns from completions counts it, as the
        simulator does; the journal notes it for the replay)."""
        if state.job_state(job_id) in TERMINAL:
            return  # ended here (a time limit, a dependency never met) before the store said so
        spec = state.job_spec(job_id)
        if learns and spec is not None and self._driver.history is not None:
            service = state.service_gpu_s(job_id, now)
            self._driver.finished(spec, service)
            self._journal.finished(job_id, service)
        state.apply(JobEnded(job_id, final if final in TERMINAL else JobState.CANCELLED, now))

    def _sync_nodes(self, state: ClusterState, now: float, nodes: Sequence[NodeRecord]) -> None:
        """Fold in the nodes' states, grades and labels as the cycle read them (its one read of the nodes): only
        the records that changed since the last cycle (``HeldFacts.sync``). A node's state here moves only by
        this fold (a node lost makes the next cycle rebuild, with new facts), so a record folded in before
        still agrees with it."""
        fabric = state.index.fabric
        for n in self._facts.sync(state, nodes, now):
            if not fabric.has_host(n.name):
                continue
            mem = state.node_state(n.name)
            if mem is n.state:
                continue
            if n.state is NodeState.DRAINED and mem is NodeState.UP:
                state.apply(NodeDrained(n.name, now))
            elif n.state is NodeState.UP:
                state.apply(NodeRestored(n.name, now))
            else:
                raise GpupoolError(f"node {n.name}: {mem.value} here, {n.state.value} in the store")

    def _load_dependencies(self, state: ClusterState, now: float) -> None:
        """The ends of jobs pending jobs depend on that the state does not hold (they ended before it was built,
        or on another replica's watch): read once, then held as ``JobEnded`` facts."""
        unknown = state.unknown_dependencies()
        if not unknown:
            return
        for job_id, final in self._ops.job_states(unknown).items():
            if final in TERMINAL:
                state.apply(JobEnded(job_id, final, now))


def fold_stored(state: ClusterState, loaded: LoadedState, fabric: Fabric, now: float) -> None:
    """Apply what the store holds to a new ``state``: the live jobs, their allocations, the releasing ranks and
    the nodes' states (the rebuild's part that needs no loop; a standby's expected starts, ``server.eta``,
    build their state with it too)."""
    for job in loaded.jobs:
        state.apply(JobSubmitted(job.spec, job.created_s))
    by_job = {j.job_id: j for j in loaded.jobs}
    for alloc in loaded.allocations:
        rec = by_job.get(alloc.job_id)
        if rec is None:
            continue
        try:
            state.apply(JobPlaced(alloc, rec.updated_s))
            if rec.state is JobState.RUNNING:
                state.apply(JobStarted(alloc.job_id, rec.updated_s))
        except GpupoolError as e:
            log.warning("stored allocation of %s does not fit the fabric: %s", alloc.job_id, e)
    for alloc in loaded.releasing:
        try:
            state.apply(RanksReleasing(alloc, now))
        except GpupoolError as e:
            log.warning("releasing ranks of %s do not fit the fabric: %s", alloc.job_id, e)
    nodes = {n.name: n for n in loaded.nodes}
    for host in fabric.hosts:
        n = nodes.get(host.name)
        if n is None or n.state is NodeState.LOST:
            state.apply(NodeLost(host.name, 0.0))
        elif n.state is NodeState.DRAINED:
            state.apply(NodeDrained(host.name, 0.0))
