"""Refusals remembered within one sharing cycle, so a queue of blocked jobs of few shapes costs lookups.

Two kinds of memory, both exact (the sharing loop decides the same with or without them):

- Lasting refusals: "this shape, on this mask, does not fit". Inside a sharing cycle capacity only
  shrinks (placements take it; preemption and backfill give it back only tentatively and undo), and for
  the placers' exact searches a shape that does not fit still does not on less capacity, so these stay
  true until ``Capacity.releases`` moves. Searches that are bounded heuristics (rail-aligned gangs tried
  in a few domains, required-scope shares placed greedily) are not monotone: their refusals are only
  remembered as long as nothing changed (see ``monotone``).
- Results that depend on the state as it is (a diagnosis and its numbers, a victim search, a backfill
  reservation search, a job's whole refusal): remembered until the next change of state, which the cycle
  reports with ``bump`` (a placement, a preemption, a reservation).
"""

from __future__ import annotations

from collections.abc import Hashable

from gpupool.scheduler.capacity import Capacity
from gpupool.scheduler.placement import Need
from gpupool.scheduler.types import ReasonCode


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


class Refusals:
    """Owned by one cycle. ``enabled=False`` remembers nothing: the reference the tests compare against."""

    __slots__ = ("_answers", "_cap", "_facts", "_lasting", "_releases", "enabled", "version")

    def __init__(self, cap: Capacity, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.version = 0  # bumps with every change of the cycle's state
        self._cap = cap
        self._releases = cap.releases
        self._lasting: set[Hashable] = set()
        self._facts: set[Hashable] = set()  # hold until the next bump
        self._answers: dict[Hashable, tuple[ReasonCode, str]] = {}  # until the next bump

    def bump(self) -> None:
        """The cycle's state changed: forget what depended on it as it was."""
        self.version += 1
        self._facts.clear()
        self._answers.clear()

    def _fresh(self) -> bool:
        if self._cap.releases != self._releases:
            # Capacity grew: no refusal may still hold.
            self._releases = self._cap.releases
            self._lasting.clear()
            self.bump()
        return self.enabled

    def refused(self, key: Hashable) -> bool:
        """True when ``key`` (a shape on a mask) was refused and must still be."""
        return self._fresh() and (key in self._lasting or key in self._facts)

    def refuse(self, key: Hashable, need: Need) -> None:
        if self._fresh():
            (self._lasting if monotone(need) else self._facts).add(key)

    def holds(self, key: Hashable) -> bool:
        """True when ``note(key)`` was called since the last change of state."""
        return self._fresh() and key in self._facts

    def note(self, key: Hashable) -> None:
        if self._fresh():
            self._facts.add(key)

    def answer(self, key: Hashable) -> tuple[ReasonCode, str] | None:
        """The (reason, sentence) ``answered`` under ``key`` since the last change of state, or None."""
        return self._answers.get(key) if self._fresh() else None

    def answered(self, key: Hashable, value: tuple[ReasonCode, str]) -> None:
        if self._fresh():
            self._answers[key] = value
