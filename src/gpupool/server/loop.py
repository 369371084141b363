"""The scheduling loop: sync from the store, snapshot, ``schedule()``, then assume -> persist -> actuate.

One background thread owns the ``ClusterState`` (it is not thread-safe). Request handlers on any replica only
write the store and wake the loop; each cycle the leader reads the (id, state, version) of the jobs whose state
or version changed since its last read (the database's change counter, migration 0015) and folds them into its
state, so submissions and reports reaching a standby are seen too (jobs this process's
group commit stored come with their specs, so only other replicas' new jobs are read whole). A placement is
applied to the state first (the next decision sees it at once), then written in one short transaction; a
refused write marks the state dirty and the next cycle rebuilds it from the store. Agents learn of new work
on their next heartbeat (the gateway compares what they run with the stored assignments), so no network
call is made here and none while a transaction is open.

The cycle also ends jobs (``scheduler.types.Ending``): a running job past its time limit is stopped as
timeout (its checkpoint signal first), a pending one whose dependency can never be met is cancelled. The
ends of the jobs that pending jobs depend on are facts of the state (``JobEnded``): the sync reads how each
job that left the live set ended, and jobs that ended before the state was built are read when first needed.

Telemetry does not come from the store: the gateway turns each heartbeat into domain events (samples, per-leaf
counters, link states, grades; ``server.live``) and ``deliver``s them after their writes commit; a cycle folds
them in before its snapshot, and a job on a GPU that turned BAD is requeued whole.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gpupool.cluster import ClusterState
from gpupool.domain.errors import GpupoolError, StaleLeaderError
from gpupool.domain.events import (
    Event,
    JobEnded,
    JobPlaced,
    JobPreempted,
    RanksReleasing,
)
from gpupool.domain.jobs import Allocation, JobSpec, RetryOn
from gpupool.domain.states import JobState, NodeState
from gpupool.fabric.fabric import Fabric
from gpupool.scheduler import CycleInputs, ScheduleRequest, SharingPolicy
from gpupool.scheduler.deadlines import Admission, admit
from gpupool.scheduler.driver import CycleDriver, CycleRun
from gpupool.scheduler.projection import ProjectionInput
from gpupool.scheduler.settings import scheduler_config
from gpupool.scheduler.types import Ending, Preemption, ReasonCode, Signal, Waiting
from gpupool.server.fabric_cache import FabricCache
from gpupool.server.hostcache import HostCache
from gpupool.server.journal import Journal, NoJournal
from gpupool.server.leader import LeaderLease
from gpupool.server.live import HeldFacts, LiveInbox, jobs_on, requeue_reason
from gpupool.server.liveness import BeatPace, IntakeWatch, LastSeen
from gpupool.server.metrics import ServerMetrics
from gpupool.server.reasons import StoredReasons
from gpupool.server.settings import Settings
from gpupool.server.sharing import SharingBuilder
from gpupool.server.statesync import StoreSync
from gpupool.store import JobRecord, NodeRecord, Store
from gpupool.store.fencing import Fence
from gpupool.store.server_ops import ChangeMark, ServerOps

log = logging.getLogger("gpupool.server.loop")
ACTOR = "scheduler"
_MAX_FRESH = 100_000


@dataclass(frozen=True, slots=True)
class CycleReport:
    placed: int
    preempted: int
    waiting: int
    rebuilt: bool
    seconds: float
    leader: bool = True  # False: this replica does not hold the lease (or lost it during the cycle)


def coalescing_gap(cycle_cpu_s: float, min_gap_s: float, max_busy: float) -> float:
    """How long the loop rests after a cycle before a wake-up may start the next: a burst of submits wakes it
    once per gap, and the gap grows with what the cycle cost (thousands queued), so that cycles woken without
    pause take at most ``max_busy`` of a core (clamped to 1%..100%)."""
    busy = min(max(max_busy, 0.01), 1.0)
    return max(min_gap_s, cycle_cpu_s * (1.0 - busy) / busy)


class SchedulingLoop(StoreSync):
    def __init__(
        self,
        store: Store,
        ops: ServerOps,
        fabrics: FabricCache,
        settings: Settings,
        metrics: ServerMetrics,
        leader: LeaderLease,
        *,
        pace: BeatPace,
        clock: Callable[[], float] = time.time,
        seen: LastSeen | None = None,
        hosts: HostCache | None = None,
        intake: IntakeWatch | None = None,
        eta: Callable[[ProjectionInput], None] | None = None,
    ) -> None:
        self._store, self._ops, self._fabrics = store, ops, fabrics
        self._eta = eta  # takes the state after each cycle, for expected starts (``server.eta``)
        self._settings, self._metrics, self._leader = settings, metrics, leader
        self._clock = clock
        self._seen = seen
        self._hosts = hosts  # the gateway's view of nodes and assignments: dropped whenever this loop writes
        self._intake = intake  # the heartbeat intake's stalls: not counted against a node's silence
        self._pace = pace  # how long a silent node has before it is lost, by the fleet's size
        # When this process last became the leader: a node is judged silent only after a full lost-timeout
        # of our leadership, so a standby taking over (whose predecessor may have held beats unflushed in
        # memory) does not mark every node lost at once.
        self._leader_since: float | None = None
        # The lease this loop's writes carry (every one checks it first in its transaction: ``store.fencing``);
        # a new token is a new term, whose state is rebuilt from the store.
        self._fence: Fence | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._state: ClusterState | None = None
        self._fabric: Fabric | None = None  # the fabric the state was built on
        self._dirty = True
        self._suspect = True
        self._db_state: dict[str, JobState] = {}
        self._versions: dict[str, int] = {}
        self._mark = ChangeMark(0)  # set by each rebuild
        self._reasons = StoredReasons()  # the waiting reasons stored last cycle: only changes are written
        self._facts = HeldFacts()  # the GPU grades and labels the state holds
        # Heartbeats' events (``server.live``), handed over by the gateway after their writes committed.
        self.live = LiveInbox(self.nudge)
        self._sharing = SharingBuilder(store, settings.scheduler)
        self._placed_ids: list[str] = []
        # The cycle's skeleton, shared with the simulator's engine. A policy that ranks by service (``gittins``)
        # learns its distribution from completions, as the engine does: each job the sync sees finish (not fail
        # or be cancelled) while running adds its GPU-seconds (all its runs, as the state counts them). Kept
        # across rebuilds; a new leader starts empty.
        config, half_life = scheduler_config(settings.scheduler), settings.scheduler.usage_half_life_s
        self._driver = CycleDriver(config, half_life)
        # What this loop applied and decided, for ``gpupool sim replay`` (``server.journal``); off by default.
        self._journal = Journal(settings.journal_path, config, half_life) if settings.journal_path else NoJournal()
        # The last cycle's request (immutable), for /why's deadline admission from request threads, and the
        # whole run (request and result) for the queue's order (``server.queueorder``); None on a standby.
        self._view: ScheduleRequest | None = None
        self.last_run: CycleRun | None = None
        # Jobs this process committed since the last sync (from the group-commit writer): their specs, so the
        # sync folds them in without reading each spec back (a hint: a job missing here is read as before).
        self._fresh_lock = threading.Lock()
        self._fresh: dict[str, JobRecord] = {}
        self._placing: list[Allocation] = []  # this cycle's placements, assumed and not yet stored
        self.cycles = 0

    # -- thread ------------------------------------------------------------------------------------------------
    def wake(self) -> None:
        # Whoever wakes the loop (a route, the gateway) has just changed something durable: the gateway's
        # cached nodes and assignments must not outlive it.
        self._changed()
        self._wake.set()

    def submitted(self, records: Sequence[JobRecord]) -> None:
        """Jobs just committed by this process: remembered for the next sync, then the loop is nudged."""
        with self._fresh_lock:
            if len(self._fresh) >= _MAX_FRESH:
                self._fresh.clear()  # nobody syncs (a standby, a stopped loop): hints are optional
            for rec in records:
                self._fresh[rec.job_id] = rec
        self._wake.set()

    def deliver(self, events: Sequence[Event]) -> None:
        """Events whose writes are committed (the gateway's, from heartbeats): folded in at the next cycle."""
        self.live.put(events)

    def nudge(self) -> None:
        """Run soon, keeping the host cache: for the gateway, which updates that cache itself (a node's
        record after its beat, an invalidation after a job moved), so 1,000 first beats cost no reloads."""
        self._wake.set()

    def _changed(self, jobs: Iterable[str] | None = None) -> None:
        """Drop the host cache (only ``jobs``' assignments, when only their ranks changed)."""
        if self._hosts is not None:
            self._hosts.invalidate(jobs)

    def start(self) -> None:
        self._leader.start()
        self._thread = threading.Thread(target=self._run, name="gpupool-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._leader.release()
        self._journal.close()

    @property
    def is_leader(self) -> bool:
        return self._leader.held

    def _run(self) -> None:
        while not self._stop.is_set():
            spent = time.thread_time()
            try:
                led = self.run_cycle().leader
            except Exception:  # the loop must outlive one bad cycle; the next one rebuilds from the store
                log.exception("scheduling cycle failed")
                self._dirty = True
                led = self._leader.held
            self._metrics.set_leader(led)
            if not led:
                self._stop.wait(self._settings.leader_retry_s)
                continue
            spent = time.thread_time() - spent
            s = self._settings
            self._stop.wait(coalescing_gap(spent, s.schedule_min_gap_s, s.schedule_max_busy))
            self._wake.wait(self._settings.schedule_period_s)
            self._wake.clear()

    # -- one cycle ---------------------------------------------------------------------------------------------
    def run_cycle(self) -> CycleReport:
        """One cycle if this replica holds the lease (taking it over if it is free): every write it makes
        carries the lease, and one the database refuses as stale ends the cycle and this replica's term."""
        started = time.perf_counter()
        fence = self._leader.hold()
        if fence != self._fence:
            self._new_term(fence)
        if fence is None:
            return CycleReport(0, 0, 0, False, time.perf_counter() - started, leader=False)
        try:
            return self._cycle(started)
        except StaleLeaderError as e:
            log.warning("a write was refused, this replica no longer leads: %s", e)
            self._leader.lost()
            self._new_term(None)
            return CycleReport(0, 0, 0, False, time.perf_counter() - started, leader=False)

    def _new_term(self, fence: Fence | None) -> None:
        """Leadership changed hands (``fence`` None: this replica is a standby now). Whatever the state held was
        assumed under another term: it is dropped and the next cycle rebuilds it from the store."""
        self._fence = fence
        self._state = None
        self._dirty = True
        self._leader_since = None
        self.last_run = None  # what a standby knows of the queue's order: nothing

    def _cycle(self, started: float) -> CycleReport:
        nodes = self._mark_lost_nodes()  # the cycle's one read of the nodes (up to 3 ORM reads of them cost more)
        fabric, _ = self._fabrics.current()
        rebuilt = False
        if fabric is None:
            self._state = None
            return CycleReport(0, 0, 0, False, time.perf_counter() - started)
        # A new fabric object is a new topology; an agent registering under an imported fabric changes none
        # (its node's record is folded in by the sync, as any node's change).
        if self._state is None or self._dirty or fabric is not self._fabric or not self._sync(nodes):
            self._rebuild(fabric)  # re-applies the latest telemetry and drops what was pending (``restart``)
            rebuilt = True
        state = self._state
        assert state is not None
        now = self._clock()
        if not rebuilt:
            self._facts.fold(state, self.live.drain())
        self._load_dependencies(state, now)
        self._requeue_bad(state, now)
        snap = state.snapshot()
        pending = self._waiting(snap.pending)
        self._placing = []
        sharing = self._sharing.policy()
        self._journal.cycle(now, (j.job_id for j in pending), sharing)
        run = self._driver.run_cycle(snap, pending, sharing, _StoreActuator(self, state), now)
        self._journal.decided(run.result)
        placed = self._store_placements()
        self._view = run.request
        self.last_run = run
        seconds = time.perf_counter() - started
        self._observe(state, seconds, placed, run.preempted, nodes)
        self._offer(state, run.request, now)
        self.cycles += 1
        return CycleReport(placed, run.preempted, len(run.result.waiting), rebuilt, seconds)

    def _waiting(self, pending: tuple[JobSpec, ...]) -> tuple[JobSpec, ...]:
        """The state's pending jobs that the store holds pending too. After a rebuild the store may hold a job
        placed that the state could not place (its allocation missing, or off the fabric): left out until they
        agree. Between rebuilds they agree by construction (each write changes both, each change read from the
        store is applied to the state as such), so the pass over the whole queue is made only until it finds
        no disagreement. Else the snapshot's own tuple: the driver then keeps the queue's order between cycles
        (``scheduler.queue``)."""
        if not self._suspect:
            return pending
        db = self._db_state
        if any(db.get(j.job_id) is not JobState.PENDING for j in pending):
            return tuple(j for j in pending if db.get(j.job_id) is JobState.PENDING)
        self._suspect = False
        return pending

    def _offer(self, state: ClusterState, req: ScheduleRequest, now: float) -> None:
        """The state after the cycle, for expected starts (``server.eta``): references and the releasing ranks'
        small map; the projection is made on another thread."""
        if self._eta is not None:
            half_life = self._settings.scheduler.usage_half_life_s
            snap = state.snapshot()  # the one the cycle's metrics took
            self._eta(
                ProjectionInput(snap, req.pending, now, req.config, req.sharing, req.inputs, state.releasing, half_life)
            )

    @property
    def sharing(self) -> SharingPolicy | None:
        """The last cycle's sharing policy, as ``schedule()`` got it (None before the first cycle)."""
        view = self._view
        return None if view is None else view.sharing

    @property
    def inputs(self) -> CycleInputs | None:
        """The last cycle's measured inputs (usage, service history), as ``schedule()`` got them."""
        view = self._view
        return None if view is None else view.inputs

    def admission(self, job: JobSpec) -> Admission | None:
        """Deadline admission of a pending ``job`` against the last cycle's view (None before the first cycle).

        Its queue is the pending jobs that go before it: higher priority, then earlier submission.
        """
        view = self._view
        if view is None:
            return None
        rank = (-int(job.priority), job.submit_time_s, job.job_id)
        ahead = [j for j in view.pending if (-int(j.priority), j.submit_time_s, j.job_id) < rank]
        return admit(view.snapshot, job, ahead, self._clock(), view.sharing, view.inputs)

    def _place(self, state: ClusterState, alloc: Allocation, now: float) -> bool:
        """Assume a placement: the state takes it at once (the cycle's next decisions see it); it is stored with
        the cycle's other placements in one transaction once ``schedule()`` is done (``_store_placements``)."""
        job_id = alloc.job_id
        try:
            state.apply(JobPlaced(alloc, now))  # assume
        except GpupoolError as e:
            log.warning("placement of %s refused by the cluster state: %s", job_id, e)
            self._dirty = True
            return False
        if job_id not in self._versions:
            log.warning("placement of %s not stored (no stored version): rebuilding from the store", job_id)
            self._dirty = True
            return False
        self._placing.append(alloc)
        return True

    def _store_placements(self) -> int:
        """Persist the cycle's assumed placements in one write (one lease check, one commit, one statement per
        table: ``Store.record_allocations``). Each write's fixed cost (the lease check, three reads, five
        statements compiled, the commit) was paid per 128 placements before, eight times for a cycle placing a
        thousand jobs at 1,000 nodes; SQLite's write lock is now held once per cycle, for the few milliseconds
        per hundred placements the rows take. A refused placement, or a failed write, makes the next cycle
        rebuild from the store, which rolls the assumption back; agents are told only after the commit. How
        many were stored."""
        placing, self._placing = self._placing, []
        if not placing:
            return 0
        batch = [(a.job_id, self._versions[a.job_id], a) for a in placing]
        try:
            stored = self._store.record_allocations(batch, ACTOR, fence=self._fence)  # persist
        except StaleLeaderError:
            raise
        except GpupoolError as e:
            log.warning("%d placements not stored (%s): rebuilding from the store", len(batch), e)
            self._dirty = True
            return 0
        placed = 0
        for alloc, rec in zip(placing, stored, strict=True):
            if isinstance(rec, GpupoolError):
                log.warning("placement of %s not stored (%s): rebuilding from the store", alloc.job_id, rec)
                self._dirty = True
                continue
            self._versions[alloc.job_id] = rec.version
            self._db_state[alloc.job_id] = JobState.PLACED
            self._placed_ids.append(alloc.job_id)  # its queue wait is observed with the cycle's metrics
            placed += 1
        if placed:
            self._changed({a.job_id for a in placing})  # act: the agents' commands come from what was committed
        return placed

    def _preempt(self, state: ClusterState, job_id: str, reason: str, now: float) -> bool:
        try:
            held = state.snapshot().running[job_id].allocation
            state.apply(JobPreempted(job_id, now, reason))
            state.apply(RanksReleasing(held, now))  # its processes still run: nothing lands there this cycle
            # Requeued; a retry policy that counts preemptions and has none left fails it instead (the next
            # sync sees it leave the queue).
            rec = self._store.release_allocation(
                job_id, self._versions[job_id], ACTOR, reason=reason, cause=RetryOn.PREEMPTION, fence=self._fence
            )
            self._changed()
        except StaleLeaderError:
            raise
        except (GpupoolError, KeyError) as e:
            log.warning("preemption of %s failed (%s): rebuilding from the store", job_id, e)
            self._dirty = True
            return False
        self._versions[job_id] = rec.version
        self._db_state[job_id] = JobState.PENDING
        return True

    def _end_job(self, state: ClusterState, ending: Ending, now: float) -> bool:
        """A time limit passed (the job stops: timeout, its ranks releasing until their processes are gone) or
        a dependency can never be met (the pending job is cancelled), with the ending's reason stored."""
        job_id = ending.job_id
        final = JobState.TIMEOUT if ending.reason is ReasonCode.TIME_LIMIT else JobState.CANCELLED
        try:
            running = state.snapshot().running.get(job_id)
            state.apply(JobEnded(job_id, final, now))
            if running is not None:
                state.apply(RanksReleasing(running.allocation, now))
            rec = self._store.transition_job(
                job_id,
                self._versions[job_id],
                final,
                ending.message,
                ACTOR,
                reason_code=ending.reason.value,
                fence=self._fence,
            )
            self._changed()
        except StaleLeaderError:
            raise
        except (GpupoolError, KeyError) as e:
            log.warning("ending %s (%s) failed (%s): rebuilding from the store", job_id, ending.reason.value, e)
            self._dirty = True
            return False
        log.info("job %s %s: %s", job_id, final.value, ending.message)
        self._versions[job_id] = rec.version
        self._db_state[job_id] = rec.state
        return True

    def _signal(self, state: ClusterState, sig: Signal) -> bool:
        if state.job_state(sig.job_id) not in (JobState.PLACED, JobState.RUNNING):
            return False
        log.info("checkpoint signal to %s: %s (preempted at %.0f)", sig.job_id, sig.message, sig.preempt_at_s)
        return self._checkpoint(sig.job_id)

    def _checkpoint(self, job_id: str) -> bool:
        """Store a checkpoint signal for each of ``job_id``'s ranks (under the lease); any replica delivers it."""
        try:
            ranks = [a.assignment_id for a in self._ops.job_assignments(job_id)]
            self._store.queue_signals(ranks, fence=self._fence)
        except StaleLeaderError:
            raise
        except GpupoolError as e:
            log.warning("checkpoint signal to %s not stored (%s): tried again next cycle", job_id, e)
            return False
        self._changed()  # the host cache reloads and rings the ranks' hosts
        return True

    def _wait(self, waiting: Sequence[Waiting]) -> None:
        """Store the reasons that changed since the last cycle (``server.reasons``)."""
        self._reasons.store(waiting, self._ops, self._fence)

    # -- live events -------------------------------------------------------------------------------------------
    def _requeue_bad(self, state: ClusterState, now: float) -> None:
        """A job holding a GPU that turned BAD gets its checkpoint signal and goes back to the queue whole, as
        the simulator's world does on an XID; placed elsewhere by this very cycle if it fits."""
        for job_id, host, gpu in jobs_on(state.snapshot(), self._facts.newly_bad()):
            why = requeue_reason(host, gpu, self.live.reason(host, gpu))
            log.warning("job %s: %s", job_id, why)
            self._checkpoint(job_id)
            self._preempt(state, job_id, why, now)

    # -- node loss ---------------------------------------------------------------------------------------------
    def _mark_lost_nodes(self) -> list[NodeRecord]:
        """Nodes silent too long become lost (their jobs requeued); the nodes as stored after that."""
        now = self._clock()
        if self._leader_since is None:
            self._leader_since = now
        limit = self._pace.lost_after_s()
        # From the host cache when there is one (at most ``host_cache_s`` old; this process's own node writes are
        # in it at once): a node that looks silent there is judged on a fresh read of the store, its beats held
        # in memory flushed first, and only through a versioned write.
        nodes = self._store.list_nodes() if self._hosts is None else self._hosts.nodes()
        if not self._quiet_past(nodes, now, limit):
            return nodes  # the usual cycle: one pass for the oldest beat, none per node
        if any(self._silent(n, now, limit) for n in nodes):
            if self._seen is not None:
                self._seen.flush(now)  # beats this replica holds in memory first: a beating node is never lost
            nodes = self._store.list_nodes()
        lost = False
        for n in nodes:
            if not self._silent(n, now, limit):
                continue
            try:
                self._store.transition_node(
                    n.name, NodeState.LOST, "no heartbeat", ACTOR, expected_version=n.version, fence=self._fence
                )
            except StaleLeaderError:
                raise
            except GpupoolError:
                continue  # it beat again meanwhile, or another writer moved it
            self._changed()  # its next beat must see LOST (and write the recovery)
            ago = now - (n.last_heartbeat_s or now)
            stalled = self._stalled(n, now)
            log.warning(
                "node %s lost: last heartbeat %.1f s ago (%.1f s of it the intake stood still)", n.name, ago, stalled
            )
            self.requeue_host(n.name, "its node was lost")
            self._dirty = True
            lost = True
        return self._store.list_nodes() if lost else nodes

    def _quiet_past(self, nodes: Sequence[NodeRecord], now: float, limit: float) -> bool:
        """Whether any node may be ``_silent``: its quiet time (since its last beat or this leadership's start,
        whichever is later) past ``limit``. The longest quiet is that of the oldest beat."""
        beating = [n for n in nodes if n.last_heartbeat_s is not None and n.state is not NodeState.LOST]
        oldest = min(beating, key=self._since, default=None)
        return oldest is not None and now - self._since(oldest) > limit

    def _since(self, n: NodeRecord) -> float:
        assert n.last_heartbeat_s is not None
        return max(n.last_heartbeat_s, self._leader_since or n.last_heartbeat_s)

    def _stalled(self, n: NodeRecord, now: float) -> float:
        return 0.0 if self._intake is None else self._intake.stalled_s(self._since(n), now)

    def _silent(self, n: NodeRecord, now: float, limit: float) -> bool:
        """Silent past ``limit`` of the server's own progress: the intake's stalls since its last beat (or this
        leadership's start) are not counted, as its beats may be waiting inside this server."""
        if n.state is NodeState.LOST or n.last_heartbeat_s is None:
            return False
        quiet = now - self._since(n)
        return quiet > limit and quiet - self._stalled(n, now) > limit

    def requeue_host(self, host: str, reason: str) -> None:
        """Every job holding GPUs on ``host`` goes back to the queue, whole gang."""
        for job_id in sorted({a.job_id for a in self._ops.assignments(host) if not a.releasing}):
            for _ in range(3):
                try:
                    rec = self._store.get_job(job_id)
                    if rec.state in (JobState.PLACED, JobState.RUNNING):
                        self._store.release_allocation(
                            job_id, rec.version, ACTOR, reason=reason, cause=RetryOn.NODE_LOST, fence=self._fence
                        )
                        self._changed()
                    break
                except StaleLeaderError:
                    raise
                except GpupoolError:
                    continue

    # -- metrics ---------------------------------------------------------------------------------------------
    def _observe(
        self, state: ClusterState, seconds: float, placed: int, preempted: int, nodes: Sequence[NodeRecord]
    ) -> None:
        m = self._metrics
        m.cycle_seconds.observe(seconds)
        m.placements.inc(placed)
        m.preemptions.inc(preempted)
        snap = state.snapshot()
        placed_ids, self._placed_ids = self._placed_ids, []
        m.observe_waits(
            r.placed_at_s - r.spec.submit_time_s for r in (snap.running.get(j) for j in placed_ids) if r is not None
        )
        sharing = self._sharing.latest
        m.observe_state(snap, nodes, () if sharing is None else sharing.quotas)  # computed when scraped


class _StoreActuator:
    """The server's side of a cycle (``scheduler.driver.Actuator``): assume each decision in the state, persist
    it in one short transaction, and let agents act after the commit (commands are derived from the store)."""

    __slots__ = ("_loop", "_state")

    def __init__(self, loop: SchedulingLoop, state: ClusterState) -> None:
        self._loop, self._state = loop, state

    def end(self, ending: Ending, now_s: float) -> bool:
        return self._loop._end_job(self._state, ending, now_s)

    def preempt(self, preemption: Preemption, now_s: float) -> bool:
        reason = f"{preemption.reason.value}: {preemption.message}"
        return self._loop._preempt(self._state, preemption.job_id, reason, now_s)

    def place(self, allocation: Allocation, now_s: float) -> bool:
        return self._loop._place(self._state, allocation, now_s)

    def signal(self, signal: Signal, now_s: float) -> bool:
        return self._loop._signal(self._state, signal)

    def waiting(self, waiting: Sequence[Waiting]) -> None:
        self._loop._wait(waiting)
