"""Replay a server's journal (``scheduler.journal``) through the simulator's parts: same decisions or not.

The journal holds every event the server's loop applied to its ``ClusterState`` and each cycle's inputs
(``now``, the pending jobs, the sharing rules) and decisions. ``replay`` applies the same events to a fresh
``ClusterState``, runs a ``CycleDriver`` with the journal's configuration at each cycle (so decayed usage and
the service history are measured as the server measured them) and compares what ``schedule()`` decides with
what the server decided: placements (hosts and GPUs), preemptions, checkpoint signals, reservations, the
jobs it ended (time limits, dependencies never met) and every waiting job's reason. The events the server's actuator applied after a cycle are in the journal, so
the replay's state follows the server's even past a difference, and each difference is reported once, at
its cycle. A restarted server's journal starts again (``start``): the replay starts over with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpupool.cluster import ClusterState
from gpupool.domain.errors import GpupoolError, InputError, ParseError
from gpupool.domain.jobs import Allocation, JobSpec
from gpupool.fabric.fabric import Fabric
from gpupool.scheduler.driver import CycleDriver
from gpupool.scheduler.journal import Record, read
from gpupool.scheduler.types import (
    NO_SHARING,
    Ending,
    Preemption,
    SchedulerConfig,
    ScheduleResult,
    SharingPolicy,
    Signal,
    Waiting,
)


@dataclass(frozen=True, slots=True)
class Difference:
    cycle: int  # 1-based, over the whole journal
    line: int  # the ``decided`` record's line
    now_s: float
    what: str


@dataclass(frozen=True, slots=True)
class ReplayReport:
    cycles: int
    placements: tuple[Allocation, ...]  # every placement the replay decided, in order
    preemptions: tuple[Preemption, ...]
    differences: tuple[Difference, ...]

    @property
    def same(self) -> bool:
        return not self.differences


class _Nothing:
    """The replay's actuator: the server's actuator's effects are events in the journal, applied from there."""

    def end(self, ending: Ending, now_s: float) -> bool:
        return True

    def preempt(self, preemption: Preemption, now_s: float) -> bool:
        return True

    def place(self, allocation: Allocation, now_s: float) -> bool:
        return True

    def signal(self, signal: Signal, now_s: float) -> bool:
        return True

    def waiting(self, waiting: Sequence[Waiting]) -> None:
        return None


class _Replay:
    def __init__(self, source: str) -> None:
        self.source = source
        self.driver: CycleDriver | None = None
        self.fabrics: dict[int, Fabric] = {}
        self.state: ClusterState | None = None
        self.sharing: SharingPolicy = NO_SHARING
        self.decided: tuple[int, float, ScheduleResult] | None = None  # (cycle, now, the replay's result)
        self.cycles = 0
        self.placements: list[Allocation] = []
        self.preemptions: list[Preemption] = []
        self.differences: list[Difference] = []

    def _bad(self, rec: Record, why: str) -> ParseError:
        return ParseError(why, source=self.source, line=rec.line)

    def _state(self, rec: Record) -> ClusterState:
        if self.state is None:
            raise self._bad(rec, f"a {rec.kind} record before any state record")
        return self.state

    def take(self, rec: Record) -> None:
        match rec.kind:
            case "start":
                config = rec.value
                assert isinstance(config, SchedulerConfig)
                self.driver = CycleDriver(config, float(rec.fields["usage_half_life_s"]))
                self.fabrics, self.state, self.sharing, self.decided = {}, None, NO_SHARING, None
            case "fabric":
                self.fabrics[int(rec.fields["id"])] = rec.value
            case "state":
                fabric = self.fabrics.get(int(rec.fields["fabric"]))
                if fabric is None:
                    raise self._bad(rec, f"fabric {rec.fields['fabric']!r} was not written before")
                self.state = ClusterState(fabric)
            case "event":
                try:
                    self._state(rec).apply(rec.value)
                except GpupoolError as e:  # the server's state accepted it: the replay's has diverged
                    raise self._bad(rec, f"the replayed state refuses {type(rec.value).__name__}: {e}") from None
            case "finished":
                spec = self._state(rec).job_spec(str(rec.fields["job"]))
                if spec is not None and self.driver is not None:
                    self.driver.finished(spec, float(rec.fields["service_gpu_s"]))
            case "sharing":
                self.sharing = rec.value
            case "cycle":
                self._cycle(rec)
            case "decided":
                self._compare(rec)

    def _cycle(self, rec: Record) -> None:
        state = self._state(rec)
        if self.driver is None:
            raise self._bad(rec, "a cycle before the journal's start record")
        pending: list[JobSpec] = []
        for job_id in rec.fields["pending"]:
            spec = state.job_spec(str(job_id))
            if spec is None:
                raise self._bad(rec, f"pending job {job_id} is not in the replayed state")
            pending.append(spec)
        now = float(rec.fields["now_s"])
        self.cycles += 1
        run = self.driver.run_cycle(state.snapshot(), pending, self.sharing, _Nothing(), now)
        self.decided = (self.cycles, now, run.result)
        self.placements += run.result.placements
        self.preemptions += run.result.preemptions

    def _compare(self, rec: Record) -> None:
        if self.decided is None:
            raise self._bad(rec, "a decided record without its cycle record")
        cycle, now, mine = self.decided
        self.decided = None
        for what in differences(rec.value, mine):
            self.differences.append(Difference(cycle, rec.line, now, what))


def replay(records: Iterable[Record], source: str = "journal") -> ReplayReport:
    r = _Replay(source)
    for rec in records:
        r.take(rec)
    return ReplayReport(r.cycles, tuple(r.placements), tuple(r.preemptions), tuple(r.differences))


def replay_file(path: Path) -> ReplayReport:
    """``replay`` of the journal at ``path``, read line by line; ``InputError`` when it cannot be read."""
    try:
        with path.open(encoding="utf-8") as f:
            return replay(read(f, str(path)), str(path))
    except OSError as e:
        raise InputError(f"cannot read the journal: {e.strerror}", source=str(path)) from None
    except UnicodeDecodeError:
        raise ParseError("not a journal: not UTF-8 text", source=str(path)) from None


def report_json(report: ReplayReport) -> dict[str, object]:
    """The report as one JSON object: every placement the replay decided, and the differences."""
    return {
        "same": report.same,
        "cycles": report.cycles,
        "placements": [
            {"job": a.job_id, "tasks": [{"host": t.host, "gpus": list(t.gpus)} for t in a.tasks]}
            for a in report.placements
        ],
        "preemptions": [{"job": p.job_id, "reason": p.reason.value} for p in report.preemptions],
        "differences": [
            {"cycle": d.cycle, "line": d.line, "now_s": d.now_s, "what": d.what} for d in report.differences
        ],
    }


def _where(a: Allocation | None) -> str:
    if a is None:
        return "not placed"
    return "; ".join(f"{t.host} GPUs {','.join(map(str, t.gpus))}" for t in a.tasks)


def _said(w: Waiting | None) -> str:
    return "not waiting" if w is None else f"{w.reason.value} ({w.message})"


def differences(server: ScheduleResult, replayed: ScheduleResult) -> list[str]:
    """What the replay decided otherwise than the server, one sentence each (empty: the same decisions)."""
    out: list[str] = []
    theirs, mine = {a.job_id: a for a in server.placements}, {a.job_id: a for a in replayed.placements}
    for job in sorted(theirs.keys() | mine.keys()):
        if theirs.get(job) != mine.get(job):
            out.append(f"job {job}: the server {_where(theirs.get(job))}, the replay {_where(mine.get(job))}")
    if not out and server.placements != replayed.placements:
        out.append("the same placements in another order")
    pairs: tuple[tuple[str, tuple[object, ...], tuple[object, ...]], ...] = (
        ("preemptions", server.preemptions, replayed.preemptions),
        ("checkpoint signals", server.signals, replayed.signals),
        ("reservations", server.reservations, replayed.reservations),
        ("endings", server.endings, replayed.endings),
    )
    for name, a, b in pairs:
        if a != b:
            out.append(f"{name}: the server {list(a)}, the replay {list(b)}")
    waits, mine_w = {w.job_id: w for w in server.waiting}, {w.job_id: w for w in replayed.waiting}
    for job in sorted(waits.keys() | mine_w.keys()):
        if waits.get(job) != mine_w.get(job):
            out.append(f"job {job} waits: the server says {_said(waits.get(job))}, the replay {_said(mine_w.get(job))}")
    if server.snapshot_version != replayed.snapshot_version:
        out.append(f"state version: the server's {server.snapshot_version}, the replay's {replayed.snapshot_version}")
    return out
