"""Refusals remembered within one cycle, so a queue of blocked jobs of few shapes costs lookups.

Two kinds of memory, both exact (the cycle decides the same with or without them):

- Lasting refusals: "this shape, on this mask, does not fit". Inside a cycle capacity only shrinks
  (placements take it; preemption and backfill give it back only tentatively and undo), and for the
  placers' exact searches a shape that does not fit still does not on less capacity, so these stay true
  until ``Capacity.releases`` moves. Searches that are bounded heuristics (rail-aligned gangs tried in a
  few domains, required-scope shares placed greedily) are not monotone: their refusals are only remembered
  as long as nothing changed (see ``monotone``).
- Results that depend on the state as it is (a diagnosis and its numbers, a victim search, a backfill
  reservation search, a job's whole refusal): remembered until the next change of state, which the cycle
  reports with ``bump`` (a placement, a preemption, a reservation).

Every kind of question has its own memo and its own key type (small NamedTuples: built and hashed in C,
and kept apart by their memo, so two kinds of key can never be mistaken for each other).
"""

from __future__ import annotations

from typing import Generic, NamedTuple, TypeVar

from gpupool.scheduler.capacity import Capacity
from gpupool.scheduler.placement import Need, TaskPick
from gpupool.scheduler.types import ReasonCode

K = TypeVar("K")
V = TypeVar("V")
Diagnosis = tuple[ReasonCode, str]


class ReservationKey(NamedTuple):
    """Which reservations a job must keep off: how many there are, and when the job would end."""

    made: int  # reservations made so far in the cycle
    end_s: float


class Who(NamedTuple):
    """What preemption on a job's behalf depends on besides its shape and pool."""

    tenant: str
    priority: int
    rank: float  # its service rank (0 unless preemption by service is on)
    at_risk: bool = False  # a deadline job about to miss: it may preempt preemptible jobs without a deadline


class PlaceKey(NamedTuple):
    """A placement try: a shape at a size, on a pool's hosts (None: hosts lent by other pools)."""

    shape: int
    tasks: int
    pool: str | None
    lent_for: str | None  # the job's pool, when lent hosts depend on it (some pool keeps hosts for demand)
    reservations: ReservationKey | None


class OutcomeKey(NamedTuple):
    """Everything a job's whole refusal depends on besides the cycle's state: while nothing changes, a job
    like an earlier refused one is refused alike."""

    shape: int
    pool: str
    preemptible: bool  # a service never borrows another pool's hosts, so it may be refused where others fit
    reservations: ReservationKey | None
    sizes: tuple[int, ...]
    who: Who | None  # None: this job may not preempt (preemption off, or the cycle's preemptors used up)
    latest_s: float | None = None  # near it: its latest start, by which a deadline reservation must start


class Outcome(NamedTuple):
    """A job's remembered refusal: a reason and its sentence, or (``reason`` None) "waits for want of
    capacity", which the cycle's last stage diagnoses on the capacity left at the end."""

    reason: ReasonCode | None
    message: str


LATER = Outcome(None, "")


class VictimKey(NamedTuple):
    """Everything the victim candidates and the victim search depend on besides the cycle's state."""

    shape: int
    pool: str
    who: Who
    milli: int
    restarts: bool = False  # deadline jobs that still meet theirs after a restart are candidates too


def monotone(need: Need) -> bool:
    """True when the placers' answer for ``need`` can only go from fits to does-not-fit as capacity shrinks.

    Whole-GPU searches are exact (a host, or a domain whose exact task count suffices, is found whenever
    one exists), and per-task share picks each use exactly one slot whatever GPU they take. The exceptions
    are bounded searches: rail-aligned gangs (a few GPU index patterns in a few domains) and shares that
    must land in one domain (placed greedily, then checked).
    """
    if need.share:
        return not need.required
    return not (need.job.rail_aligned and need.tasks > 1)


class Lasting(Generic[K]):
    """Refusals: lasting for monotone searches, else until the next change of state."""

    __slots__ = ("lasting", "until_change")

    def __init__(self) -> None:
        self.lasting: set[K] = set()
        self.until_change: set[K] = set()


class Facts(Generic[K]):
    """Facts that hold until the next change of state."""

    __slots__ = ("keys",)

    def __init__(self) -> None:
        self.keys: set[K] = set()


class Answers(Generic[K, V]):
    """Answers that hold until the next change of state."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: dict[K, V] = {}


class Refusals:
    """Owned by one cycle. ``enabled=False`` remembers nothing: the reference the tests compare against."""

    __slots__ = (
        "_cap",
        "_releases",
        "blocked",
        "enabled",
        "fits",
        "fits_not",
        "no_reservation",
        "no_victims",
        "outcome",
        "place",
        "reservation",
        "version",
    )

    def __init__(self, cap: Capacity, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.version = 0  # bumps with every change of the cycle's state
        self._cap = cap
        self._releases = cap.releases
        self.place: Lasting[PlaceKey] = Lasting()
        self.fits_not: Lasting[int] = Lasting()  # shape ids that do not fit even ignoring reservations
        self.fits: Facts[int] = Facts()  # shape ids that fit ignoring reservations
        self.no_victims: Facts[VictimKey] = Facts()
        self.no_reservation: Facts[int] = Facts()  # shape ids
        self.blocked: Lasting[int] = Lasting()  # shape ids that wait for capacity, where the shape decides
        self.outcome: Answers[OutcomeKey, Outcome] = Answers()
        # A deadline reservation's search (``taking.deadline_reservation``): what it found, and by when it looked.
        self.reservation: Answers[object, tuple[tuple[float, list[TaskPick]] | None, float]] = Answers()

    def bump(self) -> None:
        """The cycle's state changed: forget what depended on it as it was."""
        self.version += 1
        # Most of these are empty (a plain cycle uses two of them): asked after every placement.
        for lasting in (self.place, self.fits_not, self.blocked):
            if lasting.until_change:
                lasting.until_change.clear()
        for facts in (self.fits, self.no_victims, self.no_reservation):
            if facts.keys:
                facts.keys.clear()
        for answers in (self.outcome, self.reservation):
            if answers.values:
                answers.values.clear()

    def _fresh(self) -> bool:
        if self._cap.releases != self._releases:
            # Capacity grew: no refusal may still hold.
            self._releases = self._cap.releases
            for lasting in (self.place, self.fits_not, self.blocked):
                lasting.lasting.clear()
            self.bump()
        return self.enabled

    def refused(self, memo: Lasting[K], key: K) -> bool:
        """True when ``key`` was refused and must still be."""
        return self._fresh() and (key in memo.lasting or key in memo.until_change)

    def refuse(self, memo: Lasting[K], key: K, need: Need) -> None:
        if self._fresh():
            (memo.lasting if monotone(need) else memo.until_change).add(key)

    def blocked_shape(self, shape_id: int) -> bool:
        """``refused(self.blocked, shape_id)``, in one call: asked for every job of a long blocked queue."""
        if self._cap.releases != self._releases:
            self._fresh()
        return self.enabled and (shape_id in self.blocked.lasting or shape_id in self.blocked.until_change)

    def holds(self, memo: Facts[K], key: K) -> bool:
        """True when ``note(memo, key)`` was called since the last change of state."""
        return self._fresh() and key in memo.keys

    def note(self, memo: Facts[K], key: K) -> None:
        if self._fresh():
            memo.keys.add(key)

    def answer(self, memo: Answers[K, V], key: K) -> V | None:
        """The value ``answered`` under ``key`` since the last change of state, or None."""
        return memo.values.get(key) if self._fresh() else None

    def answered(self, memo: Answers[K, V], key: K, value: V) -> None:
        if self._fresh():
            memo.values[key] = value
