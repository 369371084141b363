"""The waiting reasons the loop writes (``server.reasons``): after each write, every waiting job reads back the
reason the cycle gave it (its own, or the shared class it points at), whether the cycle had groups or not; only
jobs whose reason changed (the full diff, kept here as the reference) or that move between a class and a reason
of their own are written; a whole shape changing reason is one class written, no job."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import pytest

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobCancelled, JobFinished, JobPreempted, JobSubmitted
from gpupool.domain.jobs import JobSpec, PriorityClass
from gpupool.fabric.generators import leaf_spine
from gpupool.scheduler.driver import CycleDriver
from gpupool.scheduler.settings import SchedulerSettings, scheduler_config, sharing_policy
from gpupool.scheduler.types import GroupWaits, ReasonCode, Waiting, Waits
from gpupool.server.reasons import Compared, Joined, Reason, StoredReasons
from gpupool.server.reasons import Stored as Token
from gpupool.sim.instant import InstantWorld

Stored = dict[str, tuple[str, str]]
T = TypeVar("T")


class _Db:
    """What ``ServerOps.write_reasons`` leaves stored, in memory: per job its own reason or its class."""

    def __init__(self) -> None:
        self.jobs: dict[str, Token] = {}
        self.classes: dict[str, Reason] = {}

    def apply(self, compared: Compared) -> set[str]:
        """Store the writes; the jobs written."""
        w = compared.writes()
        if w.prune:
            self.classes.clear()
        self.classes.update(w.classes)
        for cid in w.dropped:
            del self.classes[cid]
        written: list[str] = []
        for cid, jobs in w.joined.items():
            self.jobs.update(dict.fromkeys(jobs, Joined(cid)))
            written += jobs
        for reason, jobs in w.own.items():
            self.jobs.update(dict.fromkeys(jobs, reason))
            written += jobs
        assert len(written) == len(set(written)) == compared.written  # no job twice
        return set(written)

    def reason(self, job_id: str) -> Reason | None:
        got = self.jobs.get(job_id)
        return self.classes.get(got.class_id) if isinstance(got, Joined) else got


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
        InstantWorld(state, refuse=lambda: rng.random() < 0.2),  # refused as the server's store may: waits again
    )
    n, now = 0, 0.0
    for _ in range(80):
        state.apply(JobSubmitted(_job(rng, n, now), now))
        n += 1
    book, stored, db = StoredReasons(), {}, _Db()
    grouped = by_label = joined = 0
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
        before = dict(db.jobs)
        by_label += len(want) < len(waiting)
        if rng.random() < 0.9:  # else the write failed: nothing is kept, the next cycle compares with the old
            written = db.apply(compared)
            assert {w.job_id: db.reason(w.job_id) for w in waiting} == after
            # A job is written when its reason changed, or when it moves between a class and its own reason.
            for j in written - set(want):
                assert isinstance(before.get(j), Joined) != isinstance(db.jobs[j], Joined) or before.get(j) is None
            joined += sum(isinstance(t, Joined) for t in db.jobs.values())
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
    assert joined > 0  # jobs were stored by class


def _group(
    key: str,
    ids: tuple[str, ...],
    labels: list[int],
    *table: tuple[ReasonCode, str],
    runtime: list[float] | None = None,
) -> GroupWaits:
    rt = None if runtime is None else np.array(runtime, dtype=np.float64)
    return GroupWaits((key,), ids, np.array(labels, dtype=np.int32), table, rt)


def _waits(*groups: GroupWaits) -> Waits:
    return Waits(count=sum(int((g.labels >= 0).sum()) for g in groups), make=lambda: (), groups=lambda: groups)


NC, RES, LATE = ReasonCode.NO_CAPACITY, ReasonCode.RESERVED, ReasonCode.DEADLINE_INFEASIBLE


def _cycle(book: StoredReasons, db: _Db, waiting: Sequence[Waiting] | Waits) -> set[str]:
    """Compare, write and keep; the jobs written. Every waiting job then reads back its reason."""
    compared = book.compare(waiting)
    written = db.apply(compared)
    book.keep(compared)
    assert {w.job_id: db.reason(w.job_id) for w in waiting} == {w.job_id: (w.reason.value, w.message) for w in waiting}
    return written


def test_a_whole_shape_changing_reason_writes_its_classes_and_no_job() -> None:
    book, db, ids, rt = StoredReasons(), _Db(), ("a", "b", "c", "d", "e"), [300.0, 300.0, 300.0, 600.0, 300.0]
    # e cannot meet its deadline: a reason of its own; the others wait for their class's.
    assert _cycle(book, db, _waits(_group("x", ids, [0, 0, 0, 0, 1], (NC, "full"), (LATE, "e's"), runtime=rt))) == {
        *ids
    }
    assert len(db.classes) == 2 and not isinstance(db.jobs["e"], Joined)
    # The EASY reservation came: every job that fits now waits RESERVED, one message per runtime.
    table = ((RES, "its 300 s"), (RES, "its 600 s"), (LATE, "e's"))
    assert not _cycle(book, db, _waits(_group("x", ids, [0, 0, 0, 1, 2], *table, runtime=rt)))
    # It went; a was placed.
    assert not _cycle(book, db, _waits(_group("x", ids, [-1, 0, 0, 0, 1], (NC, "full"), (LATE, "e's"), runtime=rt)))
    assert db.reason("a") == ("no_capacity", "full")  # its write is the placement's, not the loop's


def test_a_group_with_the_same_members_writes_only_the_jobs_whose_reason_changed() -> None:
    book, db, ids = StoredReasons(), _Db(), ("a", "b", "c", "d")
    assert _cycle(book, db, _waits(_group("x", ids, [0, 0, 1, -1], (NC, "full"), (RES, "t=10")))) == {"a", "b", "c"}
    # The table in another order, c's message changed, d (placed last cycle, its write refused: not stored)
    # waits now.
    assert _cycle(book, db, _waits(_group("x", ids, [1, 1, 0, 0], (RES, "t=15"), (NC, "full")))) == {"c", "d"}
    assert not _cycle(book, db, _waits(_group("x", tuple(ids), [1, 1, 0, 0], (RES, "t=15"), (NC, "full"))))


def test_a_job_that_moved_between_groups_is_compared_with_what_was_stored_for_it() -> None:
    book, db = StoredReasons(), _Db()
    _cycle(book, db, _waits(_group("x", ("a", "b"), [0, 0], (NC, "full")), _group("y", ("c", "d"), [0, 0], (NC, "y"))))
    # b moved from x to y, with y's reason: it points at y's class now; the others are as stored.
    assert _cycle(
        book, db, _waits(_group("x", ("a",), [0], (NC, "full")), _group("y", ("b", "c", "d"), [0] * 3, (NC, "y")))
    ) == {"b"}
    # Without groups (job by job) from groups: only b's reason changed; a keeps its class.
    assert _cycle(book, db, (Waiting("a", NC, "full"), Waiting("b", RES, "t=1"))) == {"b"}
    assert isinstance(db.jobs["a"], Joined)
    assert _cycle(book, db, _waits(_group("x", ("a", "b"), [0, 1], (NC, "full"), (RES, "t=2")))) == {"b"}


def test_what_is_not_kept_is_compared_again() -> None:
    book = StoredReasons()
    w = _waits(_group("x", ("a",), [0], (NC, "full")))
    assert book.compare(w).written == 1
    assert book.compare(w).written == 1  # the write failed: asked again
