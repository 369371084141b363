"""What a heartbeat needs about its host, kept in memory: node records, assignments and verified node tokens.

Without it every beat costs three read transactions and a token check. Node records and assignments are
read for every host at once (two queries) and kept until this process changes something (the loop places,
preempts, requeues or loses a node; a route cancels; the gateway moves a job: each calls ``invalidate``) or
until ``ttl_s`` passes, which bounds how stale a replica that did not make the change can be (a standby
taking heartbeats sees the leader's placements within ``ttl_s``). A node token's check is kept per host for
``token_ttl_s`` and dropped when the host registers here again; the token is 256-bit random, so remembering
that it matched is as safe as checking it again. After ``token_ttl_s`` the check is renewed by reading the
stored hash (one indexed read): unchanged means the same token is still the host's (a re-registration, even
on another replica, writes a new hash), so the token is hashed once per token, not once per beat or per TTL. The
snapshot also holds every host's hash, so while it is current that renewal costs no read at all.

A change this process made to some jobs' ranks (a placement, a rank's report, a release) names those jobs
(``invalidate(jobs)``): the next read re-reads only their allocation rows (one query) and patches the snapshot,
rather than reading every host's nodes and assignments again. At a thousand placements and reports a second,
whole reloads after each (tens of milliseconds each at a thousand hosts) were most of the server's CPU.
The snapshot's age is kept, so a whole reload still comes every ``ttl_s``.

``watch`` lets the commands push (``push``) follow it: each invalidation is reported, and each reload names
the hosts whose agents may have a new command (a rank placed or gone, a stored checkpoint signal changed)
since the previous snapshot, so the agents waiting on them are woken (``_hosts_to_wake``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import threading
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, TypeVar

from gpupool.domain.states import JobState
from gpupool.store import Store
from gpupool.store.admin import NodeTuple, node_of
from gpupool.store.commands import AgentCommand
from gpupool.store.records import NodeRecord
from gpupool.store.server_ops import Assignment, AssignmentRow, ServerOps, assignment_of

_PATCH_CHUNK = 500  # job ids per query of a patch (SQLite's bound parameters are limited)
_R = TypeVar("_R")
# Records made from rows, by each row's key: the row they were made from and the record (``_reused``).
_Made = dict[Hashable, tuple[tuple[Any, ...], _R]]
_rank_key = itemgetter(0, 1, 2)  # an assignment row's job, assignment number and rank: its allocation's key


@dataclass(frozen=True, slots=True)
class _Snapshot:
    generation: int
    loaded_at: float
    nodes: dict[str, NodeRecord]
    assignments: dict[str, tuple[Assignment, ...]]
    token_hashes: dict[str, str]  # host -> its current node token's stored hash
    commands: dict[str, tuple[AgentCommand, ...]]  # host -> its stored commands (signals) not yet carried out


class HostCache:
    def __init__(
        self, store: Store, ops: ServerOps, ttl_s: float, token_ttl_s: float, clock: Callable[[], float]
    ) -> None:
        self._store, self._ops, self._ttl_s, self._token_ttl_s, self._clock = store, ops, ttl_s, token_ttl_s, clock
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()  # one reload at a time: a burst of beats after a change reads once
        self._generation = 0
        self._dirty: set[str] = set()  # jobs whose ranks changed here since the snapshot (see ``invalidate``)
        self._snap: _Snapshot | None = None
        self._made: _Made[Assignment] = {}  # the ranks read since the last reload (``_assignments``)
        self._made_nodes: _Made[NodeRecord] = {}  # the last reload's nodes (``_nodes``)
        # job -> the host its assignments are on, or the hosts (a gang across hosts): what a patch re-reads. A host
        # name, not a set, for the many jobs on one host: a reload makes no container per job.
        self._job_hosts: dict[str, str | frozenset[str]] = {}
        # host -> (SHA-256 of its token, the stored hash it matched, trusted until)
        self._tokens: dict[str, tuple[bytes, str, float]] = {}
        self.loads = 0  # whole reloads so far: lets tests see that a beat was served from memory
        self.patches = 0  # reads of some jobs' assignments only (``invalidate(jobs)``)
        self._on_invalidate: Callable[[], None] = _nothing
        self._on_changed: Callable[[Iterable[str]], None] = _nothing_changed

    def watch(self, on_invalidate: Callable[[], None], on_changed: Callable[[Iterable[str]], None]) -> None:
        """Call ``on_invalidate`` after each invalidation, ``on_changed(hosts)`` after each reload with the hosts
        whose agents may have a new command (``_hosts_to_wake``; every host of the first load)."""
        self._on_invalidate, self._on_changed = on_invalidate, on_changed

    # -- invalidation ------------------------------------------------------------------------------------------
    def invalidate(self, jobs: Iterable[str] | None = None) -> None:
        """Something durable changed here: the next read reloads (a reload already running is not trusted).
        ``jobs``: only these jobs' ranks changed; the next read re-reads just their assignments."""
        with self._lock:
            if jobs is None:
                self._generation += 1
            else:
                self._dirty.update(jobs)
        self._on_invalidate()

    def refresh(self) -> None:
        """Reload now if something changed here or the snapshot is older than ``ttl_s``."""
        self._current()

    def forget_token(self, host: str) -> None:
        with self._lock:
            self._tokens.pop(host, None)

    # -- reads -------------------------------------------------------------------------------------------------
    def node(self, host: str) -> NodeRecord:
        snap = self._current()
        found = snap.nodes.get(host)
        if found is None:  # registered after the snapshot (or by another replica): one read, then kept
            found = self._store.get_node(host)
            self.put_node(found)
        return found

    def assignments(self, host: str) -> tuple[Assignment, ...]:
        return self._current().assignments.get(host, ())

    def commands(self, host: str) -> tuple[AgentCommand, ...]:
        return self._current().commands.get(host, ())

    def nodes(self) -> list[NodeRecord]:
        """Every node by name, from the snapshot: the scheduling loop's per-cycle read (an ORM read of every node
        each cycle cost it more than ``schedule()`` at a thousand hosts)."""
        return sorted(self._current().nodes.values(), key=lambda n: n.name)

    def count(self) -> int:
        """How many nodes are registered, from the snapshot (the beat pace's fleet size)."""
        return len(self._current().nodes)

    def everything(self) -> tuple[list[NodeRecord], list[Assignment]]:
        """Every node and every rank on a host, from the snapshot: the dashboard's fabric page polls these, and
        reading them from the store each time cost ~0.3 s at 1,000 hosts."""
        snap = self._current()
        return list(snap.nodes.values()), [a for ranks in snap.assignments.values() for a in ranks]

    def put_node(self, node: NodeRecord) -> None:
        """This process just wrote ``node``: keep the written record (a newer version wins)."""
        with self._lock:
            snap = self._snap
            if snap is not None:
                old = snap.nodes.get(node.name)
                if old is None or old.version <= node.version:
                    snap.nodes[node.name] = node

    def _held(self) -> tuple[_Snapshot | None, int, bool]:
        """The snapshot, the generation it must have to be trusted, and whether some jobs' ranks wait to be patched."""
        with self._lock:
            return self._snap, self._generation, bool(self._dirty)

    def _unread(self) -> _Snapshot | None:
        """The snapshot when ``_current`` would answer its nodes' token hashes without reading the store: younger
        than ``ttl_s`` and nothing changed here since but some jobs' ranks (a patch reads only those: the hashes
        and the age it keeps are these). None when a whole reload is due."""
        now = self._clock()
        snap, generation, _ = self._held()
        if snap is not None and snap.generation == generation and now - snap.loaded_at < self._ttl_s:
            return snap
        return None

    def _current(self) -> _Snapshot:
        now = self._clock()
        snap, generation, dirty = self._held()
        if snap is not None and snap.generation == generation and now - snap.loaded_at < self._ttl_s and not dirty:
            return snap
        if snap is not None and snap.generation == generation and not dirty:
            # Only its age is past: while another thread reloads, this one keeps the snapshot (nothing this process
            # changed is missing from it) rather than wait for that read, which takes a third of a second at a
            # thousand hosts on a starved process, and every beat and poll queued behind it.
            if not self._load_lock.acquire(blocking=False):
                return snap
            self._load_lock.release()
        with self._load_lock:
            with self._lock:
                snap, generation = self._snap, self._generation
                # Taken before reading: a job changed during the read is marked again and patched next time.
                jobs, self._dirty = self._dirty, set()
            fresh_enough = snap is not None and snap.generation == generation and now - snap.loaded_at < self._ttl_s
            if fresh_enough and not jobs:
                assert snap is not None
                return snap  # another thread reloaded while this one waited
            touched: set[str] | None = None  # a patch can change only the hosts of the jobs it read again
            if fresh_enough:
                assert snap is not None
                fresh, touched = self._patch(snap, jobs)
            else:
                fresh = self._load(generation, now)
            with self._lock:
                old, self._snap = self._snap, fresh
                if fresh_enough:
                    self.patches += 1
                else:
                    self.loads += 1
            self._on_changed(_hosts_to_wake(old, fresh, touched))
            return fresh

    def _load(self, generation: int, now: float) -> _Snapshot:
        # The generation is taken before reading: a change committed during the read bumps it, so the
        # snapshot is reloaded again on the next beat rather than trusted.
        nodes = self._nodes(self._store.node_rows())
        by_host: dict[str, list[Assignment]] = {}
        job_hosts: dict[str, str | frozenset[str]] = {}
        made, self._made = self._made, {}
        for a in self._assignments(self._ops.assignment_rows(), made):
            by_host.setdefault(a.host, []).append(a)
            _add_host(job_hosts, a.job_id, a.host)
        hashes = self._ops.node_token_hashes()
        commands = self._store.agent_commands()
        assignments = {h: tuple(v) for h, v in by_host.items()}
        self._job_hosts = job_hosts
        return _Snapshot(generation, now, nodes, assignments, hashes, commands)

    def _nodes(self, rows: Iterable[NodeTuple]) -> dict[str, NodeRecord]:
        """Each row's ``NodeRecord`` by name: the one the last reload made, when its row is unchanged (most are
        between two flushes of the beats' times), as ``_assignments`` keeps ranks. Compared by name, then column
        by column: no hash of a node's stored JSON per reload."""
        made, self._made_nodes = self._made_nodes, {}
        return {n.name: n for n in _reused(rows, made, self._made_nodes, itemgetter(0), node_of)}

    def _assignments(self, rows: Iterable[AssignmentRow], made: _Made[Assignment]) -> list[Assignment]:
        """The ``Assignment`` of each row: the one made for the same row before if any (a whole reload at a
        thousand hosts finds nearly every row unchanged), so unchanged hosts' tuples hold the very same objects
        and compare at once (``_hosts_to_wake``). Kept in ``_made`` for the next read (a reload starts it anew)."""
        return _reused(rows, made, self._made, _rank_key, assignment_of)

    def _patch(self, snap: _Snapshot, jobs: set[str]) -> tuple[_Snapshot, set[str]]:
        """``snap`` with the assignments of ``jobs`` read again (one query); the rest, and its age, kept. With the
        hosts those jobs were or are on: no other host's assignments or commands differ."""
        rows: dict[str, list[Assignment]] = {}
        ordered = sorted(jobs)
        for at in range(0, len(ordered), _PATCH_CHUNK):
            read = self._ops.assignment_rows(job_ids=ordered[at : at + _PATCH_CHUNK])
            for a in self._assignments(read, self._made):
                rows.setdefault(a.host, []).append(a)
        # Read first: a failed read leaves the jobs' hosts as they were. Kept in place (only a reload or a patch,
        # one at a time under ``_load_lock``, reads or writes them): no copy of every job's entry per patch.
        job_hosts = self._job_hosts
        touched = set(rows)
        for j in jobs:
            was = job_hosts.pop(j, None)
            if was is not None:
                touched.update((was,) if isinstance(was, str) else was)
        assignments = dict(snap.assignments)
        for host in touched:
            kept = [a for a in assignments.get(host, ()) if a.job_id not in jobs]
            merged = tuple(sorted([*kept, *rows.get(host, ())], key=lambda a: (a.job_id, a.rank)))
            if merged:
                assignments[host] = merged
            else:
                assignments.pop(host, None)
            for a in rows.get(host, ()):
                _add_host(job_hosts, a.job_id, host)
        return dataclasses.replace(snap, assignments=assignments), touched

    # -- node tokens -------------------------------------------------------------------------------------------
    def token_check(self, host: str, token: str, read: bool = True) -> tuple[bool, str | None]:
        """``(fresh, hash)``: fresh when ``token`` was verified for ``host`` within ``token_ttl_s`` (and the host
        did not register again here since); else the stored hash it was last verified against, if any, so the
        caller may renew the check with a cheap read of the current hash instead of hashing the token again.
        ``read=False``: answered from memory only, for the event loop; not fresh when the snapshot would have to
        be read again first (``_unread``), so the caller renews the check as for a stale one."""
        digest = hashlib.sha256(token.encode()).digest()
        with self._lock:
            hit = self._tokens.get(host)
        if hit is None or not hmac.compare_digest(hit[0], digest):
            return False, None
        snap = self._current() if read else self._unread()
        if snap is None:
            return False, hit[1]
        # The snapshot (at most ttl_s old) still holds the hash this token matched: still the host's token.
        # A different hash there: the host registered again (on any replica), so the TTL is not trusted.
        stored = snap.token_hashes.get(host)
        if stored is not None:
            return stored == hit[1], hit[1]
        return hit[2] > self._clock(), hit[1]

    def token_verified(self, host: str, token: str, stored_hash: str) -> None:
        digest = hashlib.sha256(token.encode()).digest()
        with self._lock:
            self._tokens[host] = (digest, stored_hash, self._clock() + self._token_ttl_s)


def _reused(
    rows: Iterable[tuple[Any, ...]],
    before: _Made[_R],
    after: _Made[_R],
    key: Callable[[tuple[Any, ...]], Hashable],
    make: Callable[[tuple[Any, ...]], _R],
) -> list[_R]:
    """Each row's record: the one made before from an equal row of the same key (compared column by column), else
    ``make(row)``; each kept in ``after`` (which may be ``before``) for the next read."""
    out = []
    for row in rows:
        k = key(row)
        was = before.get(k)
        record = was[1] if was is not None and was[0] == row else make(row)
        after[k] = (row, record)
        out.append(record)
    return out


def _add_host(job_hosts: dict[str, str | frozenset[str]], job_id: str, host: str) -> None:
    was = job_hosts.get(job_id)
    if was is None:
        job_hosts[job_id] = host
    elif was != host and (isinstance(was, str) or host not in was):
        job_hosts[job_id] = frozenset((was,) if isinstance(was, str) else was) | {host}


def _hosts_to_wake(old: _Snapshot | None, new: _Snapshot, among: set[str] | None = None) -> set[str]:
    """Hosts whose agents may have a command they had not (every host of ``new`` if no old): a rank placed there
    anew (a launch), a rank gone from their assignments or releasing (a stop, if the agent runs it), stored
    commands changed (a signal). A rank's reported launch, start or end, or its job moving from placed to running,
    gives its agent nothing new: its waiting poll is not woken for it (a pass of every poll of every host whose
    rank was acknowledged, each on a worker thread, to find nothing). ``among``: the only hosts that can differ
    (a patch's), so the others are not compared."""
    if old is None:
        return set(new.assignments) | set(new.commands)
    out = set()
    for h in old.commands.keys() | new.commands.keys() if among is None else among:
        if old.commands.get(h) != new.commands.get(h):
            out.add(h)
    for h in old.assignments.keys() | new.assignments.keys() if among is None else among:
        before, after = old.assignments.get(h, ()), new.assignments.get(h, ())
        if before == after:  # the very same ranks, after a whole reload, compare at once (``_assignments``)
            continue
        kept = {a.assignment_id for a in after if not a.releasing}
        placed = {a.assignment_id for a in before if not a.releasing and a.state is JobState.PLACED}
        if any(a.assignment_id not in kept for a in before if not a.releasing) or any(
            a.assignment_id not in placed for a in after if not a.releasing and a.state is JobState.PLACED
        ):
            out.add(h)
    return out


def _nothing() -> None:
    return None


def _nothing_changed(_hosts: Iterable[str]) -> None:
    return None
