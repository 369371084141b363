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

How it is written (``ServerOps.write_reasons``): in a cycle with groups, the jobs of one shape and expected
runtime that wait for the same reason point at one stored class (``WaitClassRow``) holding it; a job with a
reason of its own (a deadline it cannot meet, a visit, a placement limit) stores that instead. When the EASY
reservation comes, goes or moves, whole shapes change reason at once: that is one class row each, not a row
per job (48,000 rows of a 50,000-job backlog). What is compared per job is then what is stored for it (a
class, or its own reason), and the classes' reasons apart.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from operator import itemgetter
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from gpupool.scheduler.types import GroupWaits, Waiting, Waits
from gpupool.store.fencing import Fence
from gpupool.store.records import WaitWrites
from gpupool.store.server_ops import ServerOps

Reason = tuple[str, str]  # (reason code, message), as stored


class Joined(NamedTuple):
    """What is stored for a job that points at a shared reason (``WaitClassRow``)."""

    class_id: str


Stored = Reason | Joined  # what is stored for a job: its own reason, or the class it points at
Changes = dict[Stored, list[str]]  # the jobs whose stored reason to write, by what to store


class _Kept:
    """One group's reasons as stored after a cycle."""

    __slots__ = ("ids", "key", "labels", "table")

    def __init__(
        self, key: tuple[object, ...], ids: tuple[str, ...], labels: npt.NDArray[np.int32], table: tuple[Stored, ...]
    ) -> None:
        self.key, self.ids, self.labels, self.table = key, ids, labels, table

    def items(self) -> Iterable[tuple[str, Stored]]:
        table = self.table
        return ((jid, table[lab]) for jid, lab in zip(self.ids, self.labels.tolist(), strict=True) if lab >= 0)


class Compared(NamedTuple):
    """One cycle's reasons compared with the stored ones: ``changes`` to write per job and the ``classes``
    whose reason to write (``dropped``: to delete), then what is stored after: per job, per group, per class."""

    changes: Changes
    jobs: dict[str, Stored]
    groups: dict[tuple[object, ...], _Kept]
    classes: dict[str, Reason]
    class_changes: dict[str, Reason]
    dropped: tuple[str, ...]
    prune: bool = False  # the first write of a book with groups: every waiting job is written, every class

    def writes(self) -> WaitWrites:
        """What ``ServerOps.write_reasons`` stores."""
        joined = {k.class_id: v for k, v in self.changes.items() if isinstance(k, Joined)}
        own = {k: v for k, v in self.changes.items() if not isinstance(k, Joined)}
        return WaitWrites(self.class_changes, joined, own, self.dropped, self.prune)

    @property
    def written(self) -> int:
        """How many jobs' stored reason is written."""
        return sum(len(jobs) for jobs in self.changes.values())


class StoredReasons:
    """The reasons the loop stored last cycle, per group when the cycle had groups, else per job."""

    __slots__ = ("_classes", "_groups", "_jobs", "_split")

    def __init__(self) -> None:
        self._jobs: dict[str, Stored] = {}  # after a cycle without groups
        self._groups: dict[tuple[object, ...], _Kept] = {}  # after one with groups, by shape
        self._classes: dict[str, Reason] = {}  # the shared reasons stored, by class id
        self._split: dict[tuple[object, ...], _Split] = {}  # each group's jobs by class, while its members stay

    def compare(self, waiting: Sequence[Waiting]) -> Compared:
        """What to write for this cycle's ``waiting`` (all of the cycle's waiting jobs); ``keep`` it once written."""
        groups = waiting.by_group() if isinstance(waiting, Waits) else None
        if groups is None:
            return self._without_groups(waiting)
        return self._with_groups(groups)

    def store(self, waiting: Sequence[Waiting], ops: ServerOps, fence: Fence | None) -> Compared:
        """The scheduling loop's step: compare, write what changed (under ``fence``), keep what was written."""
        compared = self.compare(waiting)
        ops.write_reasons(compared.writes(), fence=fence)
        self.keep(compared)
        return compared

    def keep(self, compared: Compared) -> None:
        """The compared reasons are stored: the next cycle compares with them."""
        self._jobs, self._groups, self._classes = compared.jobs, compared.groups, compared.classes

    def _without_groups(self, waiting: Sequence[Waiting]) -> Compared:
        """Job by job: a job whose reason is what is stored for it (its own, or its class's) keeps it; the
        others store their own. The classes stay as they are: jobs may still point at them."""
        stored, classes = self._stored(self._groups.values()), self._classes
        out: Changes = defaultdict(list)
        now: dict[str, Stored] = {}
        get = stored.get
        for w in waiting:
            reason, was = (w.reason.value, w.message), get(w.job_id)
            same = was is not None and (classes.get(was.class_id) if isinstance(was, Joined) else was) == reason
            if same:
                now[w.job_id] = was  # type: ignore[assignment]
            else:
                now[w.job_id] = reason
                out[reason].append(w.job_id)
        return Compared(out, now, {}, classes, {}, ())

    def _stored(self, groups: Iterable[_Kept]) -> Mapping[str, Stored]:
        """What is stored for the jobs of ``groups`` (for every job, after a cycle without groups)."""
        if not self._groups:
            return self._jobs
        return {jid: r for g in groups for jid, r in g.items()}

    def _with_groups(self, groups: Sequence[GroupWaits]) -> Compared:
        out: Changes = defaultdict(list)
        kept: dict[tuple[object, ...], _Kept] = {}
        classes: dict[str, Reason] = {}
        split: dict[tuple[object, ...], _Split] = {}
        stored, moved = self._groups, []
        for g in groups:
            sp = self._split.get(g.key)
            if sp is None or sp.ids is not g.ids:
                sp = _Split(g)
            split[g.key] = sp
            labels, table = sp.stored(g, classes, self._classes)
            new = kept[g.key] = _Kept(g.key, g.ids, labels, table)
            old = stored.get(g.key)
            if old is not None and (old.ids is g.ids or old.ids == g.ids):
                _emit(new, np.flatnonzero(_changed(old, new, None)), out)
            else:
                moved.append(new)
        if moved:
            where = _Where(self._jobs, {k: old for k, old in stored.items() if k not in kept or kept[k] in moved})
            for new in moved:
                where.compare(new, out)
        self._split = split
        was = self._classes
        changed = {cid: r for cid, r in classes.items() if was.get(cid) != r}
        # A class of last cycle that no job points at now: every job waiting now was compared above.
        dropped = tuple(cid for cid in was if cid not in classes)
        # Nothing kept yet (a new loop, maybe a new leader): every waiting job is written above and every class
        # is new to this book, so the classes stored before, by another process, can all go.
        fresh = not (was or self._jobs or stored)
        return Compared(out, {}, kept, classes, changed, dropped, fresh)


class _Split:
    """One group's jobs by class (the same expected runtime), with each class's id: kept while the group
    keeps its members (the same ``ids``), since the runtimes are the jobs' own."""

    __slots__ = ("cls", "ids", "names")

    def __init__(self, g: GroupWaits) -> None:
        self.ids = g.ids
        if g.runtime is None or not len(g.runtime):
            self.cls = np.zeros(len(g.ids), dtype=np.int64)
            runtimes: list[float] = [float("nan")]
        else:
            values, inverse = np.unique(g.runtime, return_inverse=True)
            self.cls, runtimes = inverse.reshape(-1).astype(np.int64), values.tolist()
        self.names = [_class_id(g.key, rt) for rt in runtimes]

    def stored(
        self, g: GroupWaits, classes: dict[str, Reason], was: Mapping[str, Reason]
    ) -> tuple[npt.NDArray[np.int32], tuple[Stored, ...]]:
        """What to store per job (labels into the returned table): the class of its runtime when it waits for
        the reason most of that class waits for (the class then holds that reason, added to ``classes``; on a
        tie, the one it held, ``was``), else its own reason."""
        own = tuple((r.value, m) for r, m in g.table)
        n_cls, width = len(self.names), len(own) + 1
        labels = g.labels
        if not len(labels):
            return labels, own
        counts = np.bincount(self.cls * width + (labels + 1), minlength=n_cls * width).reshape(n_cls, width)
        counts[:, 0] = 0  # placed jobs pick nothing
        common = counts.argmax(axis=1) - 1  # per class, its most common label (-1: none waits)
        table: list[Stored] = list(own)
        to_class = np.full(n_cls, -1, dtype=np.int32)
        at = {r: i for i, r in enumerate(own)}
        for c in np.flatnonzero(common >= 0).tolist():
            cid = self.names[c]
            held = at.get(was.get(cid))  # type: ignore[arg-type]
            if held is not None and held != common[c] and counts[c, held + 1] == counts[c, common[c] + 1]:
                common[c] = held
            classes[cid] = own[int(common[c])]
            to_class[c] = len(table)
            table.append(Joined(cid))
        mine = common[self.cls]
        out = np.where((labels >= 0) & (labels == mine), to_class[self.cls], labels).astype(np.int32)
        return out, tuple(table)


def _class_id(key: tuple[object, ...], runtime: float) -> str:
    """A stable id for the jobs of shape ``key`` expected to run ``runtime`` seconds (NaN: any)."""
    return hashlib.blake2b(repr((key, runtime)).encode(), digest_size=12).hexdigest()


class _Where:
    """Where the jobs of the groups that did not keep their members were last cycle: in the group of their
    shape (most of them: found by position, a dict built in C), else in another such group or, after a cycle
    without groups, among its jobs. A job that entered a group came from outside the queue or from a group it
    left, so no other group can hold it."""

    __slots__ = ("_at", "_jobs", "_old")

    def __init__(self, jobs: Mapping[str, Stored], old: dict[tuple[object, ...], _Kept]) -> None:
        self._jobs, self._old = jobs, old
        self._at: dict[tuple[object, ...], dict[str, int]] = {}

    def _positions(self, key: tuple[object, ...]) -> dict[str, int]:
        at = self._at.get(key)
        if at is None:
            ids = self._old[key].ids
            at = self._at[key] = dict(zip(ids, range(len(ids)), strict=True))
        return at

    def _elsewhere(self, jid: str) -> Stored | None:
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
