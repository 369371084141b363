"""Expected start times on the server: ``scheduler.projection`` run off the scheduling loop's path.

Every replica answers for the reads it serves (the API's jobs, the dashboard's queue), from the last
projection it made, at once: a read never waits for one. A read that finds that projection older than
``eta_refresh_s`` (or none yet) wakes this replica's projector thread, which makes the next one; so a replica
nobody asks does no work, and a projection (bounded by ``eta_horizon_s`` and ``eta_max_cycles``) is made at
most once per refresh period however many read.

Where a projection starts from:

- on the leader, the loop's own state after its last cycle, handed over by ``offer`` on the loop's thread:
  an immutable ``ProjectionInput`` (the snapshot the cycle's metrics took anyway, the releasing ranks, the
  queue it scheduled, its sharing policy and measured inputs): references, nothing copied or computed;
- on a standby (no offer for three scheduling periods), the store, as a new leader rebuilds its state
  (``statesync.fold_stored``: live jobs, allocations, releasing ranks, nodes, GPU grades and labels), with
  the policy and sharing rules built from the same settings; what only the leader measures is missing (the
  decayed usage per tenant ``fair`` orders by, live temperatures and leaf congestion), so its order can
  differ from the leader's where those decide.

The runtimes of running and projected jobs come from ``scheduler.estimates``: the user's estimate, then the
history of finished runs (``Store.finished_runs``, read at most every ``_HISTORY_S``), then the time limit.

Not stored in the database: a projection changes with every cycle, and writing thousands of rows per refresh
would compete with the loop for the write lock; a failover loses one projection, which the next read redoes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from gpupool.cluster import ClusterState
from gpupool.domain.states import JobState
from gpupool.scheduler.estimates import RuntimeHistory
from gpupool.scheduler.projection import Projection, ProjectionConfig, ProjectionInput, project
from gpupool.scheduler.settings import scheduler_config
from gpupool.server.fabric_cache import FabricCache
from gpupool.server.live import HeldFacts
from gpupool.server.settings import Settings
from gpupool.server.sharing import SharingBuilder
from gpupool.server.statesync import fold_stored
from gpupool.store import Store

log = logging.getLogger("gpupool.server.eta")
_HISTORY_S = 300.0  # finished runs are read again after this long
_HISTORY_RUNS = 5000  # the most recent finished runs the history holds


class StartProjector:
    """One per replica. ``offer`` is called by the loop's thread, ``expected_start_s`` by request threads;
    the projections are made on a thread of its own (``start``/``stop``)."""

    def __init__(
        self, store: Store, fabrics: FabricCache, settings: Settings, clock: Callable[[], float] = time.time
    ) -> None:
        self._store, self._fabrics, self._settings, self._clock = store, fabrics, settings, clock
        self._config = ProjectionConfig(horizon_s=settings.eta_horizon_s, max_cycles=settings.eta_max_cycles)
        self._sharing = SharingBuilder(store, settings.scheduler)  # the standby's own (this thread's only)
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._offered: tuple[float, ProjectionInput] | None = None  # (monotonic time, input) from the loop
        self._latest: tuple[float, Projection] | None = None  # (monotonic time made, projection)
        self._history: tuple[float, RuntimeHistory] | None = None
        self.made = 0  # projections made (for tests and logs)

    # -- the loop's side ---------------------------------------------------------------------------------------
    def offer(self, inp: ProjectionInput) -> None:
        """The leader's state after a cycle (immutable): the next projection starts from it."""
        with self._lock:
            self._offered = (time.monotonic(), inp)

    # -- readers -----------------------------------------------------------------------------------------------
    def expected_start_s(self, job_id: str) -> float | None:
        """The last projection's expected start of ``job_id`` (epoch seconds), None when unknown; a stale or
        missing projection wakes the next."""
        latest = self._latest
        if latest is None or time.monotonic() - latest[0] > self._settings.eta_refresh_s:
            self._wanted.set()
        return None if latest is None else latest[1].start_s(job_id)

    # -- the projector's thread --------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpupool-eta", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wanted.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wanted.wait()
            if self._stop.is_set():
                return
            self._wanted.clear()
            try:
                self.refresh()
            except Exception:  # a bad projection must not end the thread; the next read tries again
                log.exception("projecting expected starts failed")
            # At most one projection per refresh period, however many read meanwhile.
            self._stop.wait(self._settings.eta_refresh_s)

    def refresh(self) -> Projection | None:
        """Make a projection now (on the caller's thread) from the freshest input; None without a fabric."""
        inp = self._input()
        if inp is None:
            return None
        started = time.perf_counter()
        p = project(inp, self._runtimes(), self._config)
        self._latest = (time.monotonic(), p)
        self.made += 1
        log.debug(
            "expected starts of %d jobs: %d cycles, %s, %.3f s",
            len(p.starts),
            p.cycles,
            p.stopped,
            time.perf_counter() - started,
        )
        return p

    def _input(self) -> ProjectionInput | None:
        with self._lock:
            offered = self._offered
        fresh_s = 3 * self._settings.schedule_period_s
        if offered is not None and time.monotonic() - offered[0] <= fresh_s:
            return offered[1]
        return self._from_store()

    def _from_store(self) -> ProjectionInput | None:
        """A standby's input: the state as the store holds it (see the module's docstring)."""
        fabric, _ = self._fabrics.current()
        if fabric is None:
            return None
        now = self._clock()
        loaded = self._store.load_state()
        state = ClusterState(fabric)
        fold_stored(state, loaded, fabric, now)
        HeldFacts().sync(state, loaded.nodes, now)
        waiting = {j.job_id for j in loaded.jobs if j.state is JobState.PENDING}
        snap = state.snapshot()
        s = self._settings.scheduler
        return ProjectionInput(
            snap,
            tuple(j for j in snap.pending if j.job_id in waiting),
            now,
            scheduler_config(s),
            self._sharing.policy(),
            releasing=state.releasing,
            usage_half_life_s=s.usage_half_life_s,
        )

    def _runtimes(self) -> RuntimeHistory:
        held = self._history
        if held is None or time.monotonic() - held[0] > _HISTORY_S:
            held = (time.monotonic(), RuntimeHistory.of(self._store.finished_runs(_HISTORY_RUNS)))
            self._history = held
        return held[1]
