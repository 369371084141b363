"""Live state fed by events: each heartbeat becomes domain events that reach the scheduling loop after commit.

The gateway turns a beat into the events the simulator's world produces (``gpupool.domain.events``):
``TelemetryReported`` (every GPU's temperature and utilisation), ``GpuHealthChanged`` when the agent's grade of
a GPU changes (with the agent's reasons: an XID's name, a temperature), ``PortCountersReported`` per leaf
switch, and ``LinkHealthChanged`` when a leaf's ports change state. It puts them in the loop's ``LiveInbox``
once what they depend on is committed (a grade after the node's row); the loop drains the inbox at the start
of a cycle and folds the events into its ``ClusterState``, the reducer the simulator uses, before it takes
the snapshot. So a congested leaf, a hot GPU or a port that went down changes the next placement on the
server as it does in ``gpupool sim``.

Port counters. An agent reports, per HCA port, rates over its last sample interval (``xmit_wait_per_s``,
``errors_per_s``); the state, like ``perfquery`` on a switch, wants one cumulative counter per leaf. A leaf's
counter here grows, whenever a host under it beats, by the sum of the latest rates of the ports under it
(ports silent for longer than ``stale_s`` count as zero) times the time since the leaf's last report. The
sum is kept as ports report (a port's new rate replaces its old one), so a beat's cost does not grow with
the hosts under its leaf. So
between two reports the counter grew by exactly that sum times the time between them, and the reducer's
congestion score is the leaf's current summed ``PortXmitWait`` rate against the saturation rate, as in the
simulator, whose leaf counters grow with the traffic under them.

Link state. A leaf is DOWN when every port under it that reported is down, DEGRADED when some are down or
degraded, else UP.

Telemetry is not durable and not shared between replicas: on a rebuild the loop re-applies
``LiveInbox.restart()`` (the last sample of every host, the last two counter reports of every leaf, every
leaf's link state), which also empties what was pending, so no event reaches the new state twice. Grades and labels are durable: a rebuild reads them from the store, and each cycle also
folds in those another replica stored.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpupool.cluster import ClusterState
from gpupool.cluster.snapshot import ClusterSnapshot
from gpupool.domain.errors import GpupoolError
from gpupool.domain.events import (
    Event,
    GpuHealthChanged,
    HealthGrade,
    LinkHealthChanged,
    LinkState,
    NodeLabelled,
    PortCountersReported,
    TelemetryReported,
)
from gpupool.fabric.fabric import Fabric
from gpupool.schemas.agent import GpuSample, PortSample, RegisterRequest
from gpupool.server.topology import fabric_hcas, synthetic_leaves
from gpupool.store.records import NodeRecord

_LINK = {"up": LinkState.UP, "degraded": LinkState.DEGRADED, "down": LinkState.DOWN}
# Events that can change a decision at once: the loop is woken for them. Samples and counters wait for the
# next cycle (at most ``schedule_period_s``), so a thousand beats a second do not run a thousand cycles.
_WAKING = (GpuHealthChanged, LinkHealthChanged, NodeLabelled)


def wakes(events: Iterable[Event]) -> bool:
    return any(isinstance(e, _WAKING) for e in events)


def _key(e: Event) -> tuple[tuple[str, ...], int]:
    """The state an event sets and how many of its kind the reducer needs: later ones replace earlier ones."""
    match e:
        case TelemetryReported(host=host):
            return ("telemetry", host), 1
        case PortCountersReported(switch=switch):
            return ("ports", switch), 2  # congestion is the growth between the last two reports
        case LinkHealthChanged(switch=switch):
            return ("link", switch), 1
        case GpuHealthChanged(host=host, gpu=gpu):
            return ("grade", host, str(gpu)), 1
        case NodeLabelled(host=host):
            return ("labels", host), 1
        case _:
            raise TypeError(f"{type(e).__name__} is not a live event")


class LiveInbox:
    """The hand-off from the gateway's request threads to the loop's thread (thread-safe).

    Bounded by hosts and switches, not by time: a standby, whose loop never drains, keeps only the latest
    events per host, leaf and GPU. ``restart()`` is what a rebuild re-applies.
    """

    def __init__(self, wake: Callable[[], None] | None = None) -> None:
        self._wake = wake
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, ...], list[Event]] = {}
        self._latest: dict[tuple[str, ...], list[Event]] = {}
        self._reasons: dict[tuple[str, int], str] = {}

    def put(self, events: Sequence[Event]) -> None:
        """Events whose writes are committed; the loop is woken for those that can change a decision now."""
        with self._lock:
            for e in events:
                key, keep = _key(e)
                for book in (self._pending, self._latest):
                    got = book.setdefault(key, [])
                    got.append(e)
                    del got[:-keep]
        if self._wake is not None and wakes(events):
            self._wake()

    def drain(self) -> list[Event]:
        """Every event put since the last drain (the newest per key), in the order their keys first came."""
        with self._lock:
            pending, self._pending = self._pending, {}
        return [e for got in pending.values() for e in got]

    def restart(self) -> list[Event]:
        """The telemetry a new ``ClusterState`` needs (samples, counters, link states), and nothing pending:
        one step under the lock, so an event put while the loop rebuilds is either in this answer or in the
        next ``drain``, never both (a counter report applied twice reads as "no growth": congestion 0).
        Durable facts (grades, labels) come from the store instead, which may hold newer ones written by
        another replica."""
        with self._lock:
            self._pending = {}
            return [
                e for (kind, *_), got in self._latest.items() if kind in ("telemetry", "ports", "link") for e in got
            ]

    def note_reasons(self, host: str, reasons: Mapping[int, str]) -> None:
        """The agent's reasons for each GPU's grade, kept before the grade is stored, so that whichever way the
        loop learns a GPU turned bad (this replica's event or the store), it can say why."""
        with self._lock:
            for gpu, why in reasons.items():
                self._reasons[(host, gpu)] = why

    def reason(self, host: str, gpu: int) -> str:
        with self._lock:
            return self._reasons.get((host, gpu), "")


# -- a heartbeat -> events ---------------------------------------------------------------------------------------
def gpu_events(
    host: str,
    samples: Sequence[GpuSample],
    before: Sequence[HealthGrade],
    after: Sequence[HealthGrade] | None,
    at_s: float,
) -> list[Event]:
    """A beat's GPU samples: one ``TelemetryReported`` and a ``GpuHealthChanged`` per grade that changed
    (``after`` None: the beat's grades were not taken, as for a partial sample)."""
    if not samples:
        return []
    ordered = sorted(samples, key=lambda g: g.index)
    n = ordered[-1].index + 1
    temps, utils = [math.nan] * n, [math.nan] * n
    for g in ordered:
        temps[g.index] = math.nan if g.temperature_c is None else g.temperature_c
        utils[g.index] = math.nan if g.utilization_pct is None else g.utilization_pct
    out: list[Event] = [TelemetryReported(host, tuple(temps), at_s, tuple(utils))]
    why = {g.index: "; ".join(g.reasons) for g in ordered}
    for gpu, grade in enumerate(after or ()):
        old = before[gpu] if gpu < len(before) else HealthGrade.OK
        if grade is not old:
            out.append(GpuHealthChanged(host, gpu, grade, at_s, why.get(gpu, "")))
    return out


def reasons(samples: Sequence[GpuSample]) -> dict[int, str]:
    return {g.index: "; ".join(g.reasons) for g in samples if g.reasons}


_MILLI = 1000  # rates are summed in thousandths of a tick (or error) per second: integers, exact under +/-


@dataclass(frozen=True, slots=True)
class _Port:
    leaf: str
    wait: int  # PortXmitWait ticks per second, in thousandths
    errors: int  # errors per second, in thousandths
    state: LinkState
    at_s: float


@dataclass(slots=True)
class _Leaf:
    """One leaf's counters, and the sums over its fresh ports kept as they report (never recomputed)."""

    wait: float = 0.0  # cumulative PortXmitWait ticks of the ports under the leaf
    errors: float = 0.0  # cumulative symbol (and other) errors
    at_s: float | None = None
    state: LinkState = LinkState.UP
    # The fresh ports, least recently reported first, and their sums: a report replaces its port's old rate
    # (subtract the old, add the new) and moves it to the end; a port silent for ``stale_s`` leaves from the
    # front. So a beat costs its own ports, not every port under the leaf.
    ports: OrderedDict[tuple[str, str, int], _Port] = field(default_factory=OrderedDict)
    wait_rate: int = 0
    error_rate: int = 0
    down: int = 0
    not_up: int = 0

    def add(self, key: tuple[str, str, int], p: _Port) -> None:
        self.drop(key)
        self.ports[key] = p
        self.wait_rate += p.wait
        self.error_rate += p.errors
        self.down += p.state is LinkState.DOWN
        self.not_up += p.state is not LinkState.UP

    def drop(self, key: tuple[str, str, int]) -> None:
        p = self.ports.pop(key, None)
        if p is not None:
            self.wait_rate -= p.wait
            self.error_rate -= p.errors
            self.down -= p.state is LinkState.DOWN
            self.not_up -= p.state is not LinkState.UP

    def expire(self, before_s: float) -> None:
        """Forget the ports whose last report is older than ``before_s`` (reports arrive in time order, up to
        the few milliseconds between two request threads taking the clock and the lock)."""
        while self.ports:
            key, p = next(iter(self.ports.items()))
            if p.at_s >= before_s:
                return
            self.drop(key)

    def link_state(self) -> LinkState:
        if self.ports and self.down == len(self.ports):
            return LinkState.DOWN
        return LinkState.DEGRADED if self.not_up else LinkState.UP


class PortCounters:
    """Per-leaf cumulative counters and link states from the per-port rates of every host's beats.

    Thread-safe: request threads of many hosts call ``events`` at once; each leaf's counter must advance in
    time order, so one lock covers the update and the event it yields. A beat costs O(its ports): the sums
    over a leaf's fresh ports are kept incrementally (at 1,000 hosts under the synthetic fabric's one leaf,
    recomputing them walked 8,000 ports per beat).
    """

    def __init__(self, stale_s: float | Callable[[], float]) -> None:
        self._lock = threading.Lock()
        # Fixed, or asked at each report (the server's: its node-lost timeout, which grows with the fleet).
        self._stale_s = stale_s if callable(stale_s) else lambda: stale_s
        self._leaf_of: dict[tuple[str, str, int], str] = {}  # each port's leaf, as its last report placed it
        self._leaves: dict[str, _Leaf] = {}

    def events(self, host: str, ports: Sequence[PortSample], leaf_of: Mapping[str, str], at_s: float) -> list[Event]:
        """The counter report and any link-state change of every leaf ``host``'s ``ports`` are cabled to."""
        touched: set[str] = set()
        out: list[Event] = []
        with self._lock:
            for p in ports:
                leaf = leaf_of.get(p.hca)
                if leaf is None:
                    continue  # not an InfiniBand port of the fabric (Ethernet, or an HCA the fabric lacks)
                key = (host, p.hca, p.port)
                old = self._leaf_of.get(key)
                if old is not None and old != leaf:
                    self._leaves[old].drop(key)  # the fabric moved it: it counts under its new leaf only
                self._leaf_of[key] = leaf
                wait, errors = _milli(p.xmit_wait_per_s), _milli(p.errors_per_s)
                self._leaves.setdefault(leaf, _Leaf()).add(key, _Port(leaf, wait, errors, _LINK[p.state], at_s))
                touched.add(leaf)
            for leaf in sorted(touched):
                out.extend(self._advance(leaf, at_s))
        return out

    def _advance(self, leaf: str, at_s: float) -> list[Event]:
        st = self._leaves[leaf]
        st.expire(at_s - self._stale_s())
        out: list[Event] = []
        # A report no later than the leaf's last one would read as "no growth in no time" (congestion 0): the
        # rates it brought count from the next report on.
        if st.at_s is None or at_s > st.at_s:
            if st.at_s is not None:
                dt = at_s - st.at_s
                st.wait += st.wait_rate / _MILLI * dt
                st.errors += st.error_rate / _MILLI * dt
            st.at_s = at_s
            out.append(PortCountersReported(leaf, round(st.wait), round(st.errors), at_s))
        state = st.link_state()
        if state is not st.state:
            st.state = state
            out.append(LinkHealthChanged(leaf, state, at_s))
        return out


def _milli(rate: float | None) -> int:
    return round((rate or 0.0) * _MILLI)


def hca_leaves(fabric: Fabric, host: str, hcas: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Device name -> the leaf switch it is cabled to, for the ``(name, GUID)`` pairs ``host`` registered. By
    GUID in an imported fabric, else by name (an HCA the import named but the agent reports another GUID)."""
    mine = {fabric.hcas[fabric.hca_index(g)].name: fabric.hca_index(g) for g in fabric.host(host).hcas}
    out: dict[str, str] = {}
    for name, guid in hcas:
        try:
            i = fabric.hca_index(guid.lower())
        except KeyError:
            i = mine.get(name, -1)
        leaf = int(fabric.hca_leaf[i]) if i >= 0 else -1
        if leaf >= 0:
            out[name] = fabric.switches[leaf].name
    return out


class LeafMap:
    """Each host's HCA -> leaf map, kept until the imported fabric's version changes or the host registers again.

    With an imported fabric it is ``hca_leaves`` of the host's registered HCAs; without one, every InfiniBand
    HCA sits under the synthetic fabric's one leaf (``topology.synthetic_leaves``), so no beat builds a fabric.
    The fabric's version is read at most once per ``ttl_s`` (a store read), so beats cost no read at all.
    """

    def __init__(
        self,
        imported: Callable[[], tuple[Fabric | None, int | None]],
        inventory: Callable[[str], RegisterRequest],
        ttl_s: float,
        clock: Callable[[], float],
    ) -> None:
        self._imported, self._inventory, self._ttl_s, self._clock = imported, inventory, ttl_s, clock
        self._lock = threading.Lock()
        self._current: tuple[Fabric | None, int | None, float] | None = None
        self._hosts: dict[str, tuple[int | None, dict[str, str]]] = {}

    def forget(self, host: str) -> None:
        with self._lock:
            self._hosts.pop(host, None)

    def of(self, host: str) -> dict[str, str]:
        now = self._clock()
        with self._lock:
            cur = self._current
        if cur is None or now - cur[2] >= self._ttl_s:
            fabric, version = self._imported()
            cur = (fabric, version, now)
            with self._lock:
                self._current = cur
        fabric, version, _ = cur
        with self._lock:
            got = self._hosts.get(host)
        if got is not None and got[0] == version:
            return got[1]
        inv = self._inventory(host)
        if fabric is None:
            leaves = synthetic_leaves(inv)
        elif fabric.has_host(host):
            leaves = hca_leaves(fabric, host, [(h.name, h.guid) for h in fabric_hcas(inv)])
        else:
            leaves = {}
        with self._lock:
            self._hosts[host] = (version, leaves)
        return leaves


# -- the loop's side ---------------------------------------------------------------------------------------------
def jobs_on(snapshot: ClusterSnapshot, gpus: Iterable[tuple[str, int]]) -> list[tuple[str, str, int]]:
    """``(job, host, gpu)`` for every placed or running job holding one of ``gpus`` (its first such GPU)."""
    wanted = set(gpus)
    out: list[tuple[str, str, int]] = []
    if not wanted:
        return out
    for job_id, r in snapshot.running.items():
        hit = sorted((t.host, g) for t in r.allocation.tasks for g in t.gpus if (t.host, g) in wanted)
        if hit:
            out.append((job_id, *hit[0]))
    return sorted(out)


def requeue_reason(host: str, gpu: int, why: str) -> str:
    return (
        f"GPU {gpu} of {host} turned bad ({why or 'graded bad by its agent'}): checkpoint signal sent, requeued whole"
    )


class HeldFacts:
    """The durable facts (GPU grades, labels) the loop's state holds, per host: each cycle's read of the store
    folds in only what differs (another replica's writes), and a GPU that turned BAD is noticed once.
    Owned by the loop's thread.

    A node record is immutable, and the loop's read of the nodes (the host cache's snapshot) hands back the
    same record object until the node is written again: a record already folded in is skipped by identity, so
    a cycle costs the nodes whose records changed, not a comparison per host (a thousand per cycle)."""

    def __init__(self) -> None:
        self._health: dict[str, tuple[HealthGrade, ...]] = {}
        self._labels: dict[str, tuple[tuple[str, str], ...]] = {}
        self._bad: set[tuple[str, int]] = set()  # (host, GPU) graded BAD whose jobs were requeued
        self._synced: dict[str, NodeRecord] = {}  # host -> the record last folded in (see the class)

    def fold(self, state: ClusterState, events: Sequence[Event]) -> None:
        """Apply heartbeats' events; those of hosts or switches the fabric lacks are dropped."""
        for e in events:
            try:
                state.apply(e)
            except GpupoolError:
                continue
            if isinstance(e, GpuHealthChanged):
                grades = list(self._health.get(e.host, ()))
                grades += [HealthGrade.OK] * (e.gpu + 1 - len(grades))
                grades[e.gpu] = e.grade
                self._health[e.host] = tuple(grades)  # the store holds it too: the per-cycle diff stays quiet
                self._synced.pop(e.host, None)  # its record is compared again, as if it were new
            elif isinstance(e, NodeLabelled):
                self._labels[e.host] = e.labels
                self._synced.pop(e.host, None)

    def sync(self, state: ClusterState, nodes: Sequence[NodeRecord], now: float) -> list[NodeRecord]:
        """Fold in the grades and labels stored (by the gateway from heartbeats, an admin, another replica);
        the records not folded in before (``nodes``' others are skipped: see the class)."""
        fabric, max_gpus = state.index.fabric, state.index.max_gpus
        synced = self._synced
        fresh = [n for n in nodes if synced.get(n.name) is not n]
        for n in fresh:
            synced[n.name] = n
            if not fabric.has_host(n.name):
                continue
            if self._health.get(n.name) != n.health:
                old = self._health.get(n.name, ())
                for gpu, grade in enumerate(n.health[:max_gpus]):
                    if gpu >= len(old) or old[gpu] is not grade:
                        state.apply(GpuHealthChanged(n.name, gpu, grade, now))
                self._health[n.name] = n.health
            if self._labels.get(n.name, ()) != n.labels:
                state.apply(NodeLabelled(n.name, n.labels, now))
                self._labels[n.name] = n.labels
        return fresh

    def newly_bad(self) -> set[tuple[str, int]]:
        """The GPUs graded BAD since the last call (all of them, the first time)."""
        bad = {(h, g) for h, grades in self._health.items() for g, x in enumerate(grades) if x is HealthGrade.BAD}
        new, self._bad = bad - self._bad, bad
        return new
