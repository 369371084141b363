"""How good are expected starts? A replayed trace, projected as it runs, against what then happened.

``ProjectingEngine`` is the simulator's engine that, after the cycles at an instant when jobs arrived (every
``every``-th such instant), projects (``scheduler.projection``, as the server does from its live state) the
expected start of each of those jobs that still waits, and writes it down. The run goes on as if nothing
was projected (a projection forks the state, it never changes it), so each projection meets the job's actual
start in the same run: ``errors`` pairs them. The estimates the projection uses are the server's: each job's
``estimated_runtime_s`` (the trace's duration with ``know_durations``, else none), the history of the runs
that finished so far in the run (per tenant and name), and time limits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpupool.fabric.fabric import Fabric
from gpupool.scheduler.estimates import NO_HISTORY, RuntimeHistory
from gpupool.scheduler.projection import ProjectionConfig, ProjectionInput, project
from gpupool.scheduler.settings import SchedulerSettings
from gpupool.scheduler.types import CycleInputs
from gpupool.sim.engine import Engine
from gpupool.sim.world import JobRecord, SimJob, WorldConfig

MIN_WAIT_S = 60.0  # relative errors divide by the actual wait, or by this when the wait was shorter


@dataclass(frozen=True, slots=True)
class EtaSample:
    job_id: str
    at_s: float  # when it was projected (its arrival)
    expected_s: float | None  # None: the projection could not say
    cycles: int  # the projection's cost: cycles it ran


@dataclass(frozen=True, slots=True)
class EtaOptions:
    every: int = 1  # project at every n-th instant with arrivals
    learn: bool = True  # estimate from the runs finished so far (per tenant and name) where a job gives none
    projection: ProjectionConfig = field(default_factory=ProjectionConfig)


class ProjectingEngine(Engine):
    """An ``Engine`` that projects arriving jobs' starts as it runs (see the module's docstring)."""

    def __init__(
        self,
        fabric: Fabric,
        jobs: Sequence[SimJob],
        settings: SchedulerSettings | None = None,
        world: WorldConfig | None = None,
        options: EtaOptions | None = None,
    ) -> None:
        super().__init__(fabric, jobs, settings, world)
        self.options = options or EtaOptions()
        w = self.world
        self.projection = self.options.projection
        if (self.projection.launch_latency_s, self.projection.exit_latency_s) != (w.launch_latency_s, w.exit_latency_s):
            raise ValueError("the projection's latencies must be the world's")
        self.half_life_s = (settings or SchedulerSettings()).usage_half_life_s
        self.samples: list[EtaSample] = []
        self._seen = 0  # arrivals already considered
        self._instants = 0
        self._runs: list[tuple[str, str, float]] = []  # finished runs, for the history
        self._unfinished = {j.spec.job_id for j in jobs}

    def _maybe_cycle(self, t: float) -> None:
        super()._maybe_cycle(t)
        arrived = []
        while self._seen < len(self.arrivals) and self.arrivals[self._seen].spec.submit_time_s <= t:
            arrived.append(self.arrivals[self._seen].spec.job_id)
            self._seen += 1
        waiting = [j for j in arrived if j in self.pending]
        if not waiting:
            return
        self._instants += 1
        if (self._instants - 1) % max(1, self.options.every):
            return
        snap = self.state.snapshot()
        inputs = self.driver.last_inputs or CycleInputs()
        inp = ProjectionInput(
            snap, snap.pending, t, self.driver.config, self.sharing, inputs, usage_half_life_s=self.half_life_s
        )
        p = project(inp, self._history() if self.options.learn else NO_HISTORY, self.projection)
        self.samples.extend(EtaSample(j, t, p.start_s(j), p.cycles) for j in waiting)

    def _history(self) -> RuntimeHistory:
        done = [j for j in self._unfinished if self.track[j].end is not None]
        for job_id in sorted(done, key=lambda j: (self.track[j].end, j)):
            tr = self.track[job_id]
            # Work time: the world holds a finished job's GPUs an exit latency past its work, as the store's
            # ended_s (the server's history) does not count.
            runtime = max(0.0, tr.served_s - self.world.exit_latency_s)
            self._runs.append((tr.job.spec.tenant, tr.job.spec.name, runtime))
            self._unfinished.discard(job_id)
        return RuntimeHistory.of(self._runs)


def _pct(values: list[float], q: float) -> float | None:
    return None if not values else round(float(np.percentile(values, q)), 3)


def errors(samples: Sequence[EtaSample], records: Sequence[JobRecord]) -> dict[str, Any]:
    """``error_stats`` of each sample against its job's actual start in ``records``, with the projections' cost."""
    start = {r.job_id: r.start_s for r in records}
    out = error_stats([(s.at_s, s.expected_s, start.get(s.job_id)) for s in samples])
    cycles = [float(s.cycles) for s in samples]
    out.update(projection_cycles_median=_pct(cycles, 50), projection_cycles_max=int(max(cycles, default=0)))
    return out


def error_stats(
    triples: Sequence[tuple[float, float | None, float | None]], min_wait_s: float = MIN_WAIT_S
) -> dict[str, Any]:
    """Over (projected at, expected start, actual start) triples: median and p90 of |expected - actual| in
    seconds and relative to the actual wait from the projection (or ``min_wait_s`` when shorter), over those
    whose job started and whose projection said a time; how many said none (unknown), and how many of the jobs
    never started."""
    abs_err: list[float] = []
    rel_err: list[float] = []
    waits: list[float] = []
    unknown = never = late = 0
    for at, expected, actual in triples:
        if actual is None:
            never += 1
            continue
        if expected is None:
            unknown += 1
            continue
        err = abs(expected - actual)
        wait = actual - at
        abs_err.append(err)
        rel_err.append(err / max(wait, min_wait_s))
        waits.append(wait)
        late += actual > expected
    return {
        "projected": len(triples),
        "compared": len(abs_err),
        "unknown": unknown,
        "never_started": never,
        "started_later_than_expected": late,
        "wait_s_median": _pct(waits, 50),
        "abs_err_s_median": _pct(abs_err, 50),
        "abs_err_s_p90": _pct(abs_err, 90),
        "rel_err_median": _pct(rel_err, 50),
        "rel_err_p90": _pct(rel_err, 90),
    }
