"""The cycle over a queue grouped by shape: it visits only the jobs whose outcome can differ from what is known.

Without pools, quotas, held jobs (dependencies, array caps) or conservative backfill (``groups_decide``), a
job's fate in a cycle follows its shape, the cycle's state and a few numbers of its own (``JobNumbers``):

- deadline admission: a job that cannot finish by its deadline even if placed now waits, whatever the state;
- a job that does not fit on its shape's hosts (ignoring reservations) waits for capacity, as does every job
  of the shape until the state changes (a placement, a preemption, a reservation), and for good when the
  search is exact (``refusals.monotone``: inside a cycle capacity only shrinks, and a shape that could not
  reserve cannot either);
- with the EASY reservation made, a job expected to end after it starts is kept off its hosts: refused there,
  it waits RESERVED (it fits elsewhere) or for capacity; a job that ends before it is placed as without it;
- a job that may preempt (one of a higher priority than some preemptible running job, or a deadline job at
  risk, which may also hold a reservation of its own: ``taking.deadline_reservation``) and an elastic deadline
  job (its sizes follow its deadline) are decided one by one.

So the cycle takes the jobs of all shapes in the policy's order (a merge of the groups' next jobs to visit),
runs each visited job through the stages (``stages.decide``), learns from its outcome what holds for the rest
of its shape, and skips, by index (``numpy`` over the group's numbers, then bisection), the jobs whose outcome
that knowledge decides. A state change puts the groups whose knowledge held only until it back in the merge,
from their first job after the change. A cycle's cost follows the shapes and what changes, not the queue's
length: a long queue with nothing placeable costs one visit per shape.

It decides exactly what the job-by-job pass (``cycle._run``) decides: the same placements, preemptions and
reservations, and for every other job the same reason (``tests/unit/scheduler/test_queue.py``):

- a job after the cycle's stop (its placement limit, or with ``strict`` its first job not placed) waits
  CYCLE_LIMIT or BLOCKED;
- a job skipped waits DEADLINE_INFEASIBLE, RESERVED, or for capacity (diagnosed once per shape on the
  capacity the cycle leaves).

The waiting list is made only when read (``Waits``), from the view's tuples, which never change.
"""

from __future__ import annotations

from bisect import bisect_right
from functools import cache, partial
from heapq import heappop, heappush
from operator import itemgetter

import numpy as np
import numpy.typing as npt

from gpupool.scheduler.cyclestate import UNDIAGNOSED, Ask, Cycle, Wide
from gpupool.scheduler.deadlines import AT_RISK_MIN_S, RESTART_S, at_risk_each
from gpupool.scheduler.diagnose import diagnose
from gpupool.scheduler.placement import make_need
from gpupool.scheduler.refusals import Diagnosis, monotone
from gpupool.scheduler.stages import decide, infeasible, reserved_waiting
from gpupool.scheduler.types import (
    BackfillMode,
    GroupWaits,
    JobNumbers,
    QueueGroup,
    QueueView,
    ReasonCode,
    SortKey,
    Waiting,
    Waits,
)

_Stop = tuple[SortKey | None, ReasonCode, str]  # jobs after this key (None: all of them) wait for this reason
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
_UNKNOWN, _REFUSED, _FITS = 0, 1, 2  # what is known of the shape on its hosts, reservations ignored
_LATER, _RESERVED, _INFEASIBLE = 0, 1, 2  # a skipped job's outcome
_make = partial(tuple.__new__, Waiting)  # ``Waiting(*fields)`` without its Python ``__new__``: per job of a long queue


def groups_decide(cy: Cycle, view: QueueView) -> bool:
    """Whether this cycle may decide from the kept queue by shape (``run_groups``)."""
    if cy.placer.uses_mix or cy.pools is not None or cy.book is not None or view.held:
        return False
    cfg = cy.request.config
    return cy.by_shape or (not cfg.strict and cy.sh.backfill is not BackfillMode.CONSERVATIVE)


class _Bounds:
    """Which pending jobs may have preemption victims in this cycle (a superset: those outside cannot)."""

    __slots__ = ("above", "all", "risk_from")

    def __init__(self, cy: Cycle) -> None:
        pre, now = cy.sh.preemption, cy.now
        self.all = pre.by_service
        running = cy.request.snapshot.running.values()
        ok = [r.spec for r in running if r.spec.preemptible and r.runtime_s(now) >= pre.min_runtime_s]
        # PRIORITY: a preemptible job of a lower class, old enough; DEADLINE (at risk): one not higher, however
        # young, without a deadline or (``taking.restartable``) with one it still meets after a restart.
        self.above = min((int(s.priority) for s in ok), default=None) if pre.by_priority else None
        young = (r.spec for r in running if r.spec.preemptible)
        self.risk_from = min((int(s.priority) for s in young), default=None)


class _Track:
    """One group through one cycle: what is known of its shape, where it stands, what its skips meant."""

    __slots__ = (
        "adm",
        "admissible",
        "always",
        "base",
        "cursor",
        "early",
        "elastic",
        "g",
        "gen",
        "known_resv",
        "lasting",
        "late",
        "late_idx",
        "n",
        "placed",
        "placed_at",
        "resv_refused",
        "runtime",
        "segments",
        "visited",
    )

    def __init__(self, cy: Cycle, g: QueueGroup, bounds: _Bounds | None, restarts: bool = False) -> None:
        self.g, self.n = g, len(g.jobs)
        self.cursor = self.gen = self.placed = 0
        self.placed_at: list[int] = []  # jobs placed, by index
        self.visited: dict[int, Waiting] = {}  # jobs decided one by one that wait for a reason of their own
        self.base, self.resv_refused, self.lasting, self.known_resv = _UNKNOWN, False, False, False
        self.segments: list[tuple[int, int, bool, bool]] = []  # [lo, hi) skipped: with a reservation, base fits
        self.late: BoolArray | None = None  # per job: expected to end after the reservation starts
        self.early: IntArray | None = None  # admissible jobs (not in ``always``) that end before it / after it
        self.late_idx: IntArray | None = None
        self.runtime: FloatArray | None = None  # None (with ``adm`` None): every job admissible, none always
        self.admissible: BoolArray | None = None
        self.elastic: BoolArray | None = None
        self.adm: IntArray | None = None  # admissible jobs not in ``always`` (None: every job)
        self.always: IntArray | None = None  # jobs visited whatever is known (None: none)
        if (cy.admits and cy.sh.deadline_admission) or bounds is not None or cy.reservations:
            self._numbers(cy, bounds, restarts)

    def _numbers(self, cy: Cycle, bounds: _Bounds | None, restarts: bool = False) -> None:
        """``restarts``: some pending job was preempted before; its admission and risk count a restart
        (``taking.start_delay``) that the numbers do not, so every deadline job it could change is visited."""
        sh, g = cy.sh, self.g
        nums = g.numbers if g.numbers is not None else JobNumbers.of(g.jobs)
        runtime = self.runtime = np.where(np.isnan(nums.estimate_s), sh.default_runtime_s, nums.estimate_s)
        dl = nums.deadline_s
        if cy.admits and sh.deadline_admission:
            adm = ~((cy.now + sh.launch_latency_s) + runtime > dl)  # ``stages.admit``'s test, element-wise
        else:
            adm = np.ones(self.n, dtype=np.bool_)
        self.admissible = adm
        elastic = self.elastic = nums.elastic & np.isfinite(dl) & sh.deadline_admission  # ``Cycle.sizes``
        visit = elastic.copy()
        if restarts:  # admissible ones only (below); a second more than the restart: rounding cannot leave one out
            slack = dl - cy.now - sh.launch_latency_s - runtime
            visit |= slack <= np.maximum(sh.deadline_at_risk * runtime, AT_RISK_MIN_S) + RESTART_S + 1.0
        if bounds is not None:
            if bounds.all:
                visit[:] = True
            else:
                prio = nums.priority
                if bounds.above is not None:
                    visit |= prio > bounds.above
                if bounds.risk_from is not None:
                    slack = dl - cy.now - sh.launch_latency_s - runtime  # ``taking.at_risk``
                    visit |= at_risk_each(slack, runtime, sh.deadline_at_risk) & (prio >= bounds.risk_from)
        visit &= adm
        self.always = np.flatnonzero(visit)
        self.adm = np.flatnonzero(adm & ~visit)

    def reserve_made(self, cy: Cycle) -> None:
        """The EASY reservation exists: split the admissible jobs by whether they end before it starts."""
        if self.runtime is None:
            self._numbers(cy, None)  # a plain group: nothing to visit always, every job admissible
        assert self.runtime is not None and self.adm is not None
        late = self.late = cy.now + self.runtime > float(cy.reserved_from.min())  # ``stages.place``: hosts kept off
        pick = np.zeros(self.n, dtype=np.bool_)
        pick[self.adm] = True
        self.early = np.flatnonzero(pick & ~late)
        self.late_idx = np.flatnonzero(pick & late)

    def next_visit(self, resv: bool) -> int:
        """The first job at or after the cursor whose outcome is not known (``n``: none)."""
        c, n = self.cursor, self.n
        best = _after(self.always, c, n) if self.always is not None else n
        if not resv:
            if self.base != _REFUSED:
                best = min(best, _after(self.adm, c, n))
            return best
        if self.base != _REFUSED:
            best = min(best, _after(self.early, c, n))
        if not self.resv_refused and not self.lasting:
            best = min(best, _after(self.late_idx, c, n))
        return best

    def skip(self, upto: int) -> None:
        """Jobs from the cursor to ``upto`` take the outcome what is known decides."""
        if upto > self.cursor:
            self.segments.append((self.cursor, upto, self.known_resv, self.base == _FITS))
            self.cursor = upto

    def changed_after(self, key: SortKey) -> None:
        """The state changed at ``key``: what was known holds for the jobs before it, not after."""
        self.skip(bisect_right(self.g.keys, key, self.cursor))
        self.forget()

    def forget(self) -> None:
        self.base, self.resv_refused, self.lasting, self.known_resv = _UNKNOWN, False, False, False

    def learn(self, cy: Cycle, i: int, got: Waiting | None, ask: Ask, exact: dict[int, bool]) -> None:
        """What job ``i``'s outcome (None: it waits for capacity) says of its shape until the next change.
        ``exact``: per shape id, whether its search is monotone (filled here)."""
        if self.elastic is not None and self.elastic[i]:
            return  # it tried smaller sizes too: its outcome says nothing of the full size alone
        resv = bool(cy.reservations)
        late = resv and self.late is not None and bool(self.late[i])
        if got is None:
            self.base = _REFUSED  # refused on its hosts (or, late, kept off reserved ones and not fitting without)
            self.resv_refused = self.resv_refused or late
        elif got.reason is ReasonCode.RESERVED:
            self.base, self.resv_refused = _FITS, True
        else:
            return
        self.known_resv = resv
        if self.base == _REFUSED:
            known = exact.get(ask.shape)
            if known is None:
                known = exact[ask.shape] = monotone(Wide(ask.job, cy.cap, ask.base).need)
            self.lasting = known
        else:
            self.lasting = False


def _after(idx: IntArray | None, c: int, n: int) -> int:
    """The first index of ``idx`` at or after ``c`` (``idx`` None: every index), ``n`` if none."""
    if idx is None:
        return c if c < n else n
    i = int(np.searchsorted(idx, c))
    return int(idx[i]) if i < len(idx) else n


def run_groups(cy: Cycle, view: QueueView) -> Waits:
    """Decide ``view``'s jobs in policy order, visiting only those whose outcome is not known; the jobs left
    waiting, made when read."""
    cfg, groups = cy.request.config, view.groups
    bounds = _Bounds(cy) if cy.may_preempt else None
    snap = cy.request.snapshot
    restarts = any(j not in snap.running for j in snap.preemption_count)  # pending jobs preempted before
    tracks = [_Track(cy, g, bounds, restarts) for g in groups]
    soft: set[int] = set()  # groups whose knowledge holds only until the next change of state
    exact: dict[int, bool] = {}  # shape id -> its search is monotone
    stop: _Stop | None = None
    heap: list[tuple[SortKey, int, int, int]] = []  # (key, group, its generation, job index)

    def push(gi: int) -> None:
        t = tracks[gi]
        t.gen += 1
        i = t.next_visit(bool(cy.reservations))
        if i < t.n:
            heappush(heap, (t.g.keys[i], gi, t.gen, i))

    if cfg.max_placements_per_cycle <= 0:
        stop = (None, ReasonCode.CYCLE_LIMIT, _limit_message(cfg.max_placements_per_cycle))
    else:
        for gi in range(len(groups)):
            push(gi)
    seen = cy.seen
    while heap:
        key, gi, gen, i = heappop(heap)
        t = tracks[gi]
        if gen != t.gen:
            continue  # pushed again since
        t.skip(i)
        t.cursor = i + 1
        ask = _ask(cy, t.g, i)
        job = ask.job
        version, allocs, resv = seen.version, len(cy.allocs), len(cy.reservations)
        decide(cy, ask)
        got: Waiting | None = None
        if len(cy.allocs) > allocs:
            t.placed += 1
            t.placed_at.append(i)
        else:
            w = cy.waiting[-1]
            if w is not UNDIAGNOSED:
                got = t.visited[i] = w
        if seen.version == version:
            if cfg.strict:
                stop = (key, ReasonCode.BLOCKED, f"waits behind {job.job_id}, which does not fit (strict ordering)")
                break
            t.learn(cy, i, got, ask, exact)
            (soft.discard if t.lasting or t.base == _UNKNOWN else soft.add)(gi)
            push(gi)
            continue
        # The state changed: what the groups knew until now holds for their jobs before this one only.
        if len(cy.allocs) >= cfg.max_placements_per_cycle:
            stop = (key, ReasonCode.CYCLE_LIMIT, _limit_message(cfg.max_placements_per_cycle))
            break
        if len(cy.reservations) > resv:
            for other in tracks:
                other.reserve_made(cy)
        soft.discard(gi)
        t.forget()
        for p in soft:
            tracks[p].changed_after(key)
            push(p)
        soft.clear()
        push(gi)
    for t in tracks:
        t.skip(t.n)
    diagnosed = _diagnoses(cy, tracks, stop)
    by_group = cache(lambda: _group_waits(cy, tracks, stop, diagnosed))
    return Waits(count=view.count - len(cy.allocs), make=lambda: _waiting(by_group(), view.order), groups=by_group)


def _ask(cy: Cycle, g: QueueGroup, i: int) -> Ask:
    job = cy.placed_as(g.jobs[i])
    sk = cy.shape_ids.get(g.shape)
    if sk is None:
        sk = cy.shape_ids[g.shape] = len(cy.shape_ids)
    mkey, mask = cy.mask(job)
    return Ask(job, sk, mask, mkey, job.runtime_with(job.tasks, cy.sh.default_runtime_s))


def _limit_message(limit: int) -> str:
    return f"not considered: this cycle placed its limit of {limit} jobs first"


def _diagnoses(cy: Cycle, tracks: list[_Track], stop: _Stop | None) -> list[Diagnosis | None]:
    """Per group that has jobs waiting (none after the stop), its diagnosis on the capacity the cycle leaves."""
    out: list[Diagnosis | None] = []
    for t in tracks:
        keys = t.g.keys
        before_stop = len(keys) if stop is None else (0 if stop[0] is None else bisect_right(keys, stop[0]))
        if before_stop > t.placed:
            job = cy.placed_as(t.g.jobs[0])
            out.append(diagnose(cy.cap, make_need(job, cy.cap, cy.mask(job)[1])))
        else:
            out.append(None)
    return out


def _outcomes(t: _Track) -> npt.NDArray[np.int8]:
    """Each job's outcome if it was skipped (``_LATER``, ``_RESERVED``, ``_INFEASIBLE``)."""
    out = np.zeros(t.n, dtype=np.int8)
    for lo, hi, resv, fits in t.segments:
        if resv and fits:
            assert t.late is not None
            out[lo:hi][t.late[lo:hi]] = _RESERVED
    if t.admissible is not None:
        out[~t.admissible] = _INFEASIBLE
    return out


def _group_waits(
    cy: Cycle, tracks: list[_Track], stop: _Stop | None, diagnosed: list[Diagnosis | None]
) -> tuple[GroupWaits, ...]:
    """Every job's reason, group by group: a label per job into a small table of (reason, message). Most jobs
    of a long queue wait for their group's diagnosis (label 0); RESERVED says when a job would end and whose
    reservation it would cross, not who it is (one entry per runtime); DEADLINE_INFEASIBLE and the visited
    jobs have entries of their own; placed jobs -1."""
    first = min(cy.reservations, key=lambda r: r.start_s) if cy.reservations else None
    reserved: dict[float, Waiting] = {}  # by runtime, across groups
    out = []
    for t, why in zip(tracks, diagnosed, strict=True):
        cut = t.n if stop is None else (0 if stop[0] is None else bisect_right(t.g.keys, stop[0]))
        table: dict[tuple[ReasonCode, str], int] = {why if why is not None else (ReasonCode.NO_CAPACITY, ""): 0}

        def label(reason: ReasonCode, message: str, table: dict[tuple[ReasonCode, str], int] = table) -> int:
            return table.setdefault((reason, message), len(table))

        labels = np.zeros(t.n, dtype=np.int32)
        codes = _outcomes(t)[:cut]
        own = np.flatnonzero(codes)
        if len(own):
            assert t.runtime is not None
            jobs = t.g.jobs
            late = own[codes[own] == _RESERVED]
            if len(late):
                rts, inverse = np.unique(t.runtime[late], return_inverse=True)
                at = []
                for j, rt in zip(late[np.unique(inverse, return_index=True)[1]].tolist(), rts.tolist(), strict=True):
                    like = reserved.get(rt)
                    if like is None:
                        like = reserved[rt] = reserved_waiting(cy, jobs[j], rt, first)
                    at.append(label(like.reason, like.message))
                labels[late] = np.asarray(at, dtype=np.int32)[inverse]
            refused = own[codes[own] == _INFEASIBLE]
            for i, rt in zip(refused.tolist(), t.runtime[refused].tolist(), strict=True):
                w = infeasible(cy, jobs[i], rt)
                labels[i] = label(w.reason, w.message)
        for i, w in t.visited.items():
            if i < cut:
                labels[i] = label(w.reason, w.message)
        if stop is not None and cut < t.n:
            labels[cut:] = label(stop[1], stop[2])
        labels[t.placed_at] = -1
        out.append(GroupWaits(t.g.shape, t.g.ids, labels, tuple(table), t.runtime))
    return tuple(out)


def _waiting(groups: tuple[GroupWaits, ...], order: tuple[str, ...]) -> tuple[Waiting, ...]:
    """Every job not placed, in policy order, with its reason: the groups' labels expanded, then put in the
    view's ``order``."""
    by_id: dict[str, Waiting | None] = {}
    for g in groups:
        labels = g.labels.tolist()
        if not labels:
            continue
        reasons, messages = (*(e[0] for e in g.table), None), (*(e[1] for e in g.table), None)  # -1: the last
        if len(labels) > 1:
            pick = itemgetter(*labels)
            rs, ms = pick(reasons), pick(messages)
        else:
            rs, ms = (reasons[labels[0]],), (messages[labels[0]],)
        out: list[Waiting | None] = list(map(_make, zip(g.ids, rs, ms, strict=True)))
        for i in np.flatnonzero(g.labels < 0).tolist():
            out[i] = None
        by_id.update(zip(g.ids, out, strict=True))
    if len(order) < 2:
        return tuple(got for jid in order if (got := by_id[jid]) is not None)
    return tuple(filter(None, itemgetter(*order)(by_id)))  # in order, the placed (None) left out, all in C
