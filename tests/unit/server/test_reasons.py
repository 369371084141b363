"""The waiting reasons the loop writes (``server.reasons``): exactly what comparing every job's reason with the
last cycle's writes (today's full diff, kept here as the reference), whether the cycle had groups or not."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import pytest

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobCancelled, JobFinished, JobPlaced, JobPreempted, JobStarted, JobSubmitted
from gpupool.domain.jobs import Allocation, JobSpec, PriorityClass
from gpupool.fabric.generators import leaf_spine
from gpupool.scheduler.driver import CycleDriver
from gpupool.scheduler.settings import SchedulerSettings, scheduler_config, sharing_policy
from gpupool.scheduler.types import Ending, GroupWaits, Preemption, ReasonCode, Signal, Waiting, Waits
from gpupool.server.reasons import Changes, StoredReasons

Stored = dict[str, tuple[str, str]]
T = TypeVar("T")


class _Rng:
    """A seeded generator with the few draws the test needs."""

    def __init__(self, seed: int) -> None:
        self._g = np.random.default_rng(seed)

    def random(self) -> float:
        return float(self._g.random())

    def choice(self, items: Sequence[T]) -> T:
        return items[int(self._g.integers(len(items)))]

    def randint(self, lo: int, hi: int) -> int:
        return int(self._g.integers(lo, hi + 1))

    def sample(self, items: Sequence[T], k: int) -> list[T]:
        return [items[int(i)] for i in self._g.choice(len(items), size=k, replace=False)]


def _full_diff(stored: Stored, waiting: Sequence[Waiting]) -> tuple[Stored, Stored]:
    """The loop's diff before ``server.reasons``: every reason made, compared with last cycle's; (what to
    write, what is stored after)."""
    reasons = {w.job_id: (w.reason.value, w.message) for w in waiting}
    return {j: r for j, r in reasons.items() if stored.get(j) != r}, reasons


def _flat(changes: Changes) -> Stored:
    out = {j: r for r, jobs in changes.items() for j in jobs}
    assert len(out) == sum(len(jobs) for jobs in changes.values())  # no job twice
    return out


class _World:
    """Decisions take effect at once, but a placement is now and then refused (as the server's store may):
    the job stays in its group, and waits again next cycle."""

    def __init__(self, state: ClusterState, rng: _Rng) -> None:
        self.state, self.rng = state, rng
        self.left: Sequence[Waiting] = ()

    def end(self, ending: Ending, now_s: float) -> bool:
        self.state.apply(JobFinished(ending.job_id, now_s, succeeded=False))
        return True

    def preempt(self, preemption: Preemption, now_s: float) -> bool:
        self.state.apply(JobPreempted(preemption.job_id, now_s, preemption.reason.value))
        return True

    def place(self, allocation: Allocation, now_s: float) -> bool:
        if self.rng.random() < 0.2:
            return False
        self.state.apply(JobPlaced(allocation, now_s))
        self.state.apply(JobStarted(allocation.job_id, now_s))
        return True

    def signal(self, signal: Signal, now_s: float) -> bool:
        return True

    def waiting(self, waiting: Sequence[Waiting]) -> None:
        self.left = waiting


def _job(rng: _Rng, n: int, now: float) -> JobSpec:
    tasks, gpus = rng.choice([(1, 1), (1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (3, 8)])
    est = rng.choice([None, 60.0, 600.0, 3600.0])
    dl = None
    if rng.random() < 0.4:
        dl = now + 0.4 + (est or 3600.0) * rng.choice([0.5, 1.05, 1.5, 4.0])
    return JobSpec(
        f"j{n:04d}",
        now,
        tasks=tasks,
        gpus_per_task=gpus,
        priority=PriorityClass(rng.choice([1, 2, 2, 3])),
        estimated_runtime_s=est,
        deadline_s=dl,
        preemptible=rng.random() < 0.3,
    )


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("policy", ["srt", "fifo"])
def test_the_written_reasons_are_those_of_the_full_diff_over_random_cycles(seed: int, policy: str) -> None:
    rng = _Rng(seed)
    state = ClusterState(leaf_spine(2, 2, 2, gpus_per_host=8))  # 32 GPUs: most of the queue waits
    s = SchedulerSettings(policy=policy, max_placements_per_cycle=rng.choice([1000, 1000, 2]))
    driver, sharing, world = (
        CycleDriver(scheduler_config(s), s.usage_half_life_s),
        sharing_policy(s),
        _World(state, rng),
    )
    n, now = 0, 0.0
    for _ in range(80):
        state.apply(JobSubmitted(_job(rng, n, now), now))
        n += 1
    book, stored = StoredReasons(), {}
    grouped = by_label = 0
    for _ in range(25):
        snap = state.snapshot()
        # Now and then a queue the driver does not keep (a new tuple): the cycle goes job by job.
        pending = snap.pending if rng.random() < 0.75 else tuple(list(snap.pending))
        driver.run_cycle(snap, pending, sharing, world, now)
        waiting = world.left
        if isinstance(waiting, Waits) and waiting.by_group() is not None:
            grouped += 1
        want, after = _full_diff(stored, waiting)
        compared = book.compare(waiting)
        assert _flat(compared.changes) == want
        by_label += len(want) < len(waiting)
        if rng.random() < 0.9:  # else the write failed: nothing is kept, the next cycle compares with the old
            book.keep(compared)
            stored = after
        now += rng.choice([1.0, 5.0, 5.0, 30.0])
        running = sorted(state.snapshot().running)
        for j in rng.sample(running, min(len(running), rng.randint(0, 3))):  # ends: shapes unblock
            state.apply(JobFinished(j, now))
        running = sorted(state.snapshot().running)
        if running and rng.random() < 0.2:  # requeued: it enters its group again
            state.apply(JobPreempted(rng.choice(running), now, "test"))
        queued = sorted(j.job_id for j in state.snapshot().pending)
        if queued and rng.random() < 0.3:  # leaves its group
            state.apply(JobCancelled(rng.choice(queued), now))
        for _ in range(rng.choice([0, 0, 1, 3])):
            state.apply(JobSubmitted(_job(rng, n, now), now))
            n += 1
    assert grouped >= 5  # the by-group path was taken
    assert by_label >= 1


def _group(key: str, ids: tuple[str, ...], labels: list[int], *table: tuple[ReasonCode, str]) -> GroupWaits:
    return GroupWaits((key,), ids, np.array(labels, dtype=np.int32), table)


def _waits(*groups: GroupWaits) -> Waits:
    return Waits(count=sum(int((g.labels >= 0).sum()) for g in groups), make=lambda: (), groups=lambda: groups)


NC, RES = ReasonCode.NO_CAPACITY, ReasonCode.RESERVED


def test_a_group_with_the_same_members_writes_only_the_jobs_whose_reason_changed() -> None:
    book = StoredReasons()
    ids = ("a", "b", "c", "d")
    first = book.compare(_waits(_group("x", ids, [0, 0, 1, -1], (NC, "full"), (RES, "t=10"))))
    assert _flat(first.changes) == {
        "a": ("no_capacity", "full"),
        "b": ("no_capacity", "full"),
        "c": ("reserved", "t=10"),
    }
    book.keep(first)
    # The table in another order, c's message changed, d (placed last cycle, its write refused: not stored)
    # waits now.
    second = book.compare(_waits(_group("x", ids, [1, 1, 0, 0], (RES, "t=15"), (NC, "full"))))
    assert dict(second.changes) == {("reserved", "t=15"): ["c", "d"]}
    book.keep(second)
    assert not book.compare(_waits(_group("x", tuple(ids), [1, 1, 0, 0], (RES, "t=15"), (NC, "full")))).changes


def test_a_job_that_moved_between_groups_is_compared_with_what_was_stored_for_it() -> None:
    book = StoredReasons()
    book.keep(book.compare(_waits(_group("x", ("a", "b"), [0, 0], (NC, "full")), _group("y", ("c",), [0], (NC, "y")))))
    # b moved from x to y with the same reason; y's c kept its reason; x lost b.
    got = book.compare(
        _waits(_group("x", ("a",), [0], (NC, "full")), _group("y", ("b", "c"), [0, 1], (NC, "full"), (NC, "y")))
    )
    assert not got.changes
    book.keep(got)
    # Without groups (job by job) from groups, and back.
    flat = book.compare((Waiting("a", NC, "full"), Waiting("b", RES, "t=1")))
    assert _flat(flat.changes) == {"b": ("reserved", "t=1")}
    book.keep(flat)
    back = book.compare(_waits(_group("x", ("a", "b"), [0, 1], (NC, "full"), (RES, "t=2"))))
    assert _flat(back.changes) == {"b": ("reserved", "t=2")}


def test_what_is_not_kept_is_compared_again() -> None:
    book = StoredReasons()
    w = _waits(_group("x", ("a",), [0], (NC, "full")))
    assert _flat(book.compare(w).changes) == {"a": ("no_capacity", "full")}
    assert _flat(book.compare(w).changes) == {"a": ("no_capacity", "full")}  # the write failed: asked again
