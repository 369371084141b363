"""The waiting reasons the scheduling loop stored, and what changed since: only those are written.

Why: a 50,000-job backlog leaves 50,000 reasons every cycle. Made one by one (a tuple each, a dict of them,
compared with the last cycle's dict), they cost 120-200 ms of CPU per cycle, half of it the garbage
collector's passes, for a write of the few that changed. A cycle over the kept queue (``scheduler.grouped``)
hands them per shape group instead (``scheduler.types.GroupWaits``: a label per job into a small table of
(reason, message)); a group whose members are those of the last cycle is compared label array against label
array (``numpy``), so nothing is made per job but the ids of the jobs whose reason changed. A group that
somebody entered or left is compared the same way once its jobs are matched to their last positions (a dict
built in C); only the jobs that entered it are looked up one by one. A cycle that went job by job (no groups:
elastic resizes, a filtered queue, pools, quotas, dependencies) is compared job by job, as before.

What is written is exactly what comparing every job's (reason, message) with the last cycle's would write: a
job waiting now whose reason differs from the one stored last cycle, or that did not wait last cycle (placed,
new, requeued). ``tests/unit/server/test_reasons.py`` holds the two to each other over random cycles.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from operator import itemgetter
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from gpupool.scheduler.types import GroupWaits, Waiting, Waits

Reason = tuple[str, str]  # (reason code, message), as stored
Changes = dict[Reason, list[str]]  # the jobs whose reason to write, by their new reason


class _Kept:
    """One group's reasons as stored after a cycle."""

    __slots__ = ("ids", "key", "labels", "table")

    def __init__(
        self, key: tuple[object, ...], ids: tuple[str, ...], labels: npt.NDArray[np.int32], table: tuple[Reason, ...]
    ) -> None:
        self.key, self.ids, self.labels, self.table = key, ids, labels, table

    def items(self) -> Iterable[tuple[str, Reason]]:
        table = self.table
        return ((jid, table[lab]) for jid, lab in zip(self.ids, self.labels.tolist(), strict=True) if lab >= 0)


class Compared(NamedTuple):
    """One cycle's reasons compared with the stored ones: ``changes`` to write, then what is stored."""

    changes: Changes
    jobs: dict[str, Reason]
    groups: dict[tuple[object, ...], _Kept]


class StoredReasons:
    """The reasons the loop stored last cycle, per group when the cycle had groups, else per job."""

    __slots__ = ("_groups", "_jobs")

    def __init__(self) -> None:
        self._jobs: dict[str, Reason] = {}  # after a cycle without groups
        self._groups: dict[tuple[object, ...], _Kept] = {}  # after one with groups, by shape

    def compare(self, waiting: Sequence[Waiting]) -> Compared:
        """What to write for this cycle's ``waiting`` (all of the cycle's waiting jobs); ``keep`` it once written."""
        groups = waiting.by_group() if isinstance(waiting, Waits) else None
        if groups is None:
            return self._without_groups(waiting)
        return self._with_groups(groups)

    def keep(self, compared: Compared) -> None:
        """The compared reasons are stored: the next cycle compares with them."""
        self._jobs, self._groups = compared.jobs, compared.groups

    def _without_groups(self, waiting: Sequence[Waiting]) -> Compared:
        now = {w.job_id: (w.reason.value, w.message) for w in waiting}
        out: Changes = defaultdict(list)
        _by_job(now.items(), self._stored(self._groups.values()), out)
        return Compared(out, now, {})

    def _stored(self, groups: Iterable[_Kept]) -> Mapping[str, Reason]:
        """The stored reasons of the jobs of ``groups`` (of every job, after a cycle without groups)."""
        if not self._groups:
            return self._jobs
        return {jid: r for g in groups for jid, r in g.items()}

    def _with_groups(self, groups: Sequence[GroupWaits]) -> Compared:
        out: Changes = defaultdict(list)
        kept: dict[tuple[object, ...], _Kept] = {}
        stored, moved = self._groups, []
        for g in groups:
            table = tuple((r.value, m) for r, m in g.table)
            new = kept[g.key] = _Kept(g.key, g.ids, g.labels, table)
            old = stored.get(g.key)
            if old is not None and (old.ids is g.ids or old.ids == g.ids):
                _emit(new, np.flatnonzero(_changed(old, new, None)), out)
            else:
                moved.append(new)
        if moved:
            where = _Where(self._jobs, {k: old for k, old in stored.items() if k not in kept or kept[k] in moved})
            for new in moved:
                where.compare(new, out)
        return Compared(out, {}, kept)


class _Where:
    """Where the jobs of the groups that did not keep their members were last cycle: in the group of their
    shape (most of them: found by position, a dict built in C), else in another such group or, after a cycle
    without groups, among its jobs. A job that entered a group came from outside the queue or from a group it
    left, so no other group can hold it."""

    __slots__ = ("_at", "_jobs", "_old")

    def __init__(self, jobs: Mapping[str, Reason], old: dict[tuple[object, ...], _Kept]) -> None:
        self._jobs, self._old = jobs, old
        self._at: dict[tuple[object, ...], dict[str, int]] = {}

    def _positions(self, key: tuple[object, ...]) -> dict[str, int]:
        at = self._at.get(key)
        if at is None:
            ids = self._old[key].ids
            at = self._at[key] = dict(zip(ids, range(len(ids)), strict=True))
        return at

    def _elsewhere(self, jid: str) -> Reason | None:
        if not self._old:
            return self._jobs.get(jid)
        for key, old in self._old.items():
            i = self._positions(key).get(jid)
            if i is not None:
                lab = int(old.labels[i])
                return old.table[lab] if lab >= 0 else None
        return None

    def compare(self, new: _Kept, out: Changes) -> None:
        """Write the jobs of ``new`` (a group that did not keep its members) whose reason changed."""
        n, old = len(new.ids), self._old.get(new.key)
        if old is None:
            idx = np.full(n, -1, dtype=np.int64)
        else:
            idx = np.fromiter(map(self._positions(new.key).get, new.ids, repeat(-1)), dtype=np.int64, count=n)
        changed = _changed(old, new, idx)
        for i in np.flatnonzero((idx < 0) & (new.labels >= 0)).tolist():
            changed[i] = self._elsewhere(new.ids[i]) != new.table[int(new.labels[i])]
        _emit(new, np.flatnonzero(changed), out)


def _by_job(now: Iterable[tuple[str, Reason]], stored: Mapping[str, Reason], out: Changes) -> None:
    """Each job whose reason differs from the stored one (or has none stored), one by one."""
    get = stored.get
    for jid, reason in now:
        if get(jid) != reason:
            out[reason].append(jid)


def _changed(old: _Kept | None, new: _Kept, idx: npt.NDArray[np.int64] | None) -> npt.NDArray[np.bool_]:
    """Per job of ``new``, whether it waits with another (reason, message) than stored for it in ``old`` at
    ``idx`` (None: the same position; -1: not in ``old``, taken as changed)."""
    labels = new.labels
    if old is None:
        out: npt.NDArray[np.bool_] = labels >= 0
        return out
    at = {r: i for i, r in enumerate(new.table)}
    # Old label -> the new label of the same reason (-2: none); an old -1 (it was placed) picks the last: -3.
    remap = np.array([at.get(r, -2) for r in old.table] + [-3], dtype=np.int32)
    if idx is None:
        before = remap[old.labels]
    else:
        before = np.where(idx >= 0, remap[old.labels[idx]], -3) if len(idx) else np.empty(0, dtype=np.int32)
    changed: npt.NDArray[np.bool_] = (labels >= 0) & (labels != before)
    return changed


def _emit(new: _Kept, idx: npt.NDArray[np.intp], out: Changes) -> None:
    """The jobs of ``new`` at ``idx``, by their (reason, message)."""
    if not len(idx):
        return
    labs = new.labels[idx]
    order = np.argsort(labs, kind="stable")
    idx, labs = idx[order], labs[order]
    cuts = [0, *(np.flatnonzero(np.diff(labs)) + 1).tolist(), len(idx)]
    ids, table = new.ids, new.table
    for lo, hi in itertools.pairwise(cuts):
        pick = idx[lo:hi].tolist()
        got = itemgetter(*pick)(ids) if len(pick) > 1 else (ids[pick[0]],)
        out[table[int(labs[lo])]].extend(got)
