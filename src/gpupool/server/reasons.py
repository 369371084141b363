"""The waiting reasons the scheduling loop stored, and what changed since: only those are written.

Why: a 50,000-job backlog leaves 50,000 reasons every cycle. Made one by one (a tuple each, a dict of them,
compared with the last cycle's dict), they cost 120-200 ms of CPU per cycle, half of it the garbage
collector's passes, for a write of the few that changed. A cycle over the kept queue (``scheduler.grouped``)
hands them per shape group instead (``scheduler.types.GroupWaits``: a label per job into a small table of
(reason, message)); a group whose members are those of the last cycle is compared label array against label
array (``numpy``), so nothing is made per job but the ids of the jobs whose reason changed. A group that
somebody entered or left, and a cycle that went job by job (no groups), are compared job by job against the
stored reasons (one code path, ``_by_job``).

What is written is exactly what comparing every job's (reason, message) with the last cycle's would write: a
job waiting now whose reason differs from the one stored last cycle, or that did not wait last cycle (placed,
new, requeued). ``tests/unit/server/test_reasons.py`` holds the two to each other over random cycles.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from gpupool.scheduler.types import GroupWaits, Waiting, Waits

Reason = tuple[str, str]  # (reason code, message), as stored
Changes = dict[Reason, list[str]]  # the jobs whose reason to write, by their new reason


class _Kept:
    """One group's reasons as stored after a cycle."""

    __slots__ = ("ids", "labels", "table")

    def __init__(self, ids: tuple[str, ...], labels: npt.NDArray[np.int32], table: tuple[Reason, ...]) -> None:
        self.ids, self.labels, self.table = ids, labels, table

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
        stored, same, moved = self._groups, set(), []
        for g in groups:
            table = tuple((r.value, m) for r, m in g.table)
            new = kept[g.key] = _Kept(g.ids, g.labels, table)
            old = stored.get(g.key)
            if old is not None and (old.ids is g.ids or old.ids == g.ids):
                _by_label(old, new, out)
                same.add(g.key)
            else:
                moved.append(new)
        if moved:
            # A job that entered a group came from outside the queue or from a group it left: compare it with
            # what the groups that did not keep their members (or the last cycle's jobs, without groups) stored.
            before = self._stored(old for key, old in stored.items() if key not in same)
            for new in moved:
                _by_job(new.items(), before, out)
        return Compared(out, {}, kept)


def _by_job(now: Iterable[tuple[str, Reason]], stored: Mapping[str, Reason], out: Changes) -> None:
    """Each job whose reason differs from the stored one (or has none stored), one by one."""
    get = stored.get
    for jid, reason in now:
        if get(jid) != reason:
            out[reason].append(jid)


def _by_label(old: _Kept, new: _Kept, out: Changes) -> None:
    """The same jobs as last cycle: those whose label now names another (reason, message) than stored."""
    at = {r: i for i, r in enumerate(new.table)}
    # Old label -> the new label of the same reason (-2: none); an old -1 (it was placed) picks the last: -3.
    remap = np.array([at.get(r, -2) for r in old.table] + [-3], dtype=np.int32)
    labels = new.labels
    idx = np.flatnonzero((labels >= 0) & (labels != remap[old.labels]))
    if not len(idx):
        return
    labs = labels[idx]
    order = np.argsort(labs, kind="stable")
    idx, labs = idx[order], labs[order]
    cuts = [0, *(np.flatnonzero(np.diff(labs)) + 1).tolist(), len(idx)]
    ids, table = new.ids, new.table
    for lo, hi in itertools.pairwise(cuts):
        pick = idx[lo:hi].tolist()
        got = itemgetter(*pick)(ids) if len(pick) > 1 else (ids[pick[0]],)
        out[table[int(labs[lo])]].extend(got)
