"""The cycle over a queue grouped by shape: shapes are visited, not jobs, when the shape alone decides.

With no admission, pools, preemption or backfill (``Cycle.by_shape``), a job is placed or waits for capacity,
and a shape refused stays refused: for as long as capacity only shrinks (every exact search), or until the
next placement (bounded searches: ``refusals.monotone``). So the cycle takes the jobs of all shapes in the
policy's order (a merge of the groups' heads), and a refused shape leaves the merge with all its jobs at
once; a shape refused until the next placement comes back after it, from the first job after that point.
Its cost follows what is placed and how many shapes there are, not the queue's length.

It decides exactly what the job-by-job pass (``cycle._run``) decides: the same placements, and for every
other job the same reason (``tests/unit/scheduler/test_queue.py``):

- a job after the cycle's stop (its placement limit, or with ``strict`` its first job not placed) waits
  CYCLE_LIMIT or BLOCKED;
- every other job not placed waits for capacity, diagnosed once per shape on the capacity the cycle leaves.

The waiting list is made only when read (``Waits``), from the view's tuples, which never change.
"""

from __future__ import annotations

from bisect import bisect_right
from heapq import heapify, heappop, heappush, merge
from itertools import repeat

from gpupool.scheduler.cyclestate import Ask, Cycle, Wide
from gpupool.scheduler.diagnose import diagnose
from gpupool.scheduler.placement import make_need
from gpupool.scheduler.refusals import Diagnosis, monotone
from gpupool.scheduler.stages import place
from gpupool.scheduler.types import QueueGroup, QueueView, ReasonCode, SortKey, Waiting, Waits

_Stop = tuple[SortKey | None, ReasonCode, str]  # jobs after this key (None: all of them) wait for this reason


def run_groups(cy: Cycle, view: QueueView) -> Waits:
    """Place from ``view`` in policy order, shape by shape; the jobs left waiting, made when read."""
    cfg = cy.request.config
    groups = view.groups
    cursor = [0] * len(groups)  # each group's next job to decide
    placed = [0] * len(groups)
    stop: _Stop | None = None
    if cfg.max_placements_per_cycle <= 0:
        stop = (None, ReasonCode.CYCLE_LIMIT, _limit_message(cfg.max_placements_per_cycle))
    heap = [(g.keys[0], gi) for gi, g in enumerate(groups) if g.keys and stop is None]
    heapify(heap)
    parked: list[int] = []  # groups refused until the next placement
    default_runtime = cy.sh.default_runtime_s
    while heap:
        key, gi = heappop(heap)
        g = groups[gi]
        i = cursor[gi]
        job = cy.placed_as(g.jobs[i])
        cursor[gi] = i + 1
        sh = cy.shape_ids.get(g.shape)
        if sh is None:
            sh = cy.shape_ids[g.shape] = len(cy.shape_ids)
        mkey, mask = cy.mask(job)
        if place(cy, Ask(job, sh, mask, mkey, job.runtime_with(job.tasks, default_runtime)), (job.tasks,), None):
            placed[gi] += 1
            if i + 1 < len(g.keys):
                heappush(heap, (g.keys[i + 1], gi))
            for p in parked:  # the placement ended their refusal: back from their first job after it
                keys = groups[p].keys
                c = cursor[p] = bisect_right(keys, key, cursor[p])
                if c < len(keys):
                    heappush(heap, (keys[c], p))
            parked.clear()
            if len(cy.allocs) >= cfg.max_placements_per_cycle:
                stop = (key, ReasonCode.CYCLE_LIMIT, _limit_message(cfg.max_placements_per_cycle))
                break
            continue
        if cfg.strict:
            stop = (key, ReasonCode.BLOCKED, f"waits behind {job.job_id}, which does not fit (strict ordering)")
            break
        if not monotone(Wide(job, cy.cap, mask).need):
            parked.append(gi)
    diagnosed = _diagnoses(cy, groups, placed, stop)
    placed_ids = frozenset(a.job_id for a in cy.allocs)
    return Waits(count=view.count - len(cy.allocs), make=lambda: _waiting(groups, placed_ids, stop, diagnosed))


def _limit_message(limit: int) -> str:
    return f"not considered: this cycle placed its limit of {limit} jobs first"


def _diagnoses(
    cy: Cycle, groups: tuple[QueueGroup, ...], placed: list[int], stop: _Stop | None
) -> list[Diagnosis | None]:
    """Per group that has jobs waiting for capacity (none after the stop), its diagnosis on the capacity the
    cycle leaves."""
    out: list[Diagnosis | None] = []
    for gi, g in enumerate(groups):
        before_stop = len(g.keys) if stop is None else (0 if stop[0] is None else bisect_right(g.keys, stop[0]))
        if before_stop > placed[gi]:
            job = cy.placed_as(g.jobs[0])
            out.append(diagnose(cy.cap, make_need(job, cy.cap, cy.mask(job)[1])))
        else:
            out.append(None)
    return out


def _waiting(
    groups: tuple[QueueGroup, ...], placed: frozenset[str], stop: _Stop | None, diagnosed: list[Diagnosis | None]
) -> tuple[Waiting, ...]:
    out = []
    for key, gi, job in merge(*(zip(g.keys, repeat(gi), g.jobs) for gi, g in enumerate(groups))):
        if job.job_id in placed:
            continue
        if stop is not None and (stop[0] is None or key > stop[0]):
            out.append(Waiting(job.job_id, stop[1], stop[2]))
        else:
            why = diagnosed[gi]
            assert why is not None
            out.append(Waiting(job.job_id, why[0], why[1]))
    return tuple(out)
