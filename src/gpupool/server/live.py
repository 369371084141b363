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
(ports silent for longer than ``stale_s`` count as zero) times the time since the leaf's last report. So
between two reports the counter grew by exactly that sum times the time between them, and the reducer's
congestion score is the leaf's current summed ``PortXmitWait`` rate against the saturation rate, as in the
simulator, whose leaf counters grow with the traffic under them.

Link state. A leaf is DOWN when every port under it that reported is down, DEGRADED when some are down or
degraded, else UP.

Telemetry is not durable and not shared between replicas: on a rebuild the loop re-applies
``LiveInbox.latest()`` (the last sample of every host, the last two counter reports of every leaf, every
leaf's link state). Grades and labels are durable: a rebuild reads them from the store, and each cycle also
folds in those another replica stored.
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpupool.cluster.snapshot import ClusterSnapshot
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
from gpupool.schemas.agent import GpuSample, PortSample

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
    events per host, leaf and GPU. ``latest()`` is what a rebuild re-applies.
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

    def latest(self) -> list[Event]:
        """The telemetry a new ``ClusterState`` needs (samples, counters, link states); durable facts (grades,
        labels) come from the store instead, which may hold newer ones written by another replica."""
        with self._lock:
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


@dataclass(frozen=True, slots=True)
class _Port:
    leaf: str
    wait_per_s: float
    errors_per_s: float
    state: LinkState
    at_s: float


@dataclass(slots=True)
class _Leaf:
    wait: float = 0.0  # cumulative PortXmitWait ticks of the ports under the leaf
    errors: float = 0.0  # cumulative symbol (and other) errors
    at_s: float | None = None
    state: LinkState = LinkState.UP


class PortCounters:
    """Per-leaf cumulative counters and link states from the per-port rates of every host's beats.

    Thread-safe: request threads of many hosts call ``events`` at once; each leaf's counter must advance in
    time order, so one lock covers the update and the event it yields.
    """

    def __init__(self, stale_s: float) -> None:
        self._lock = threading.Lock()
        self._stale_s = stale_s
        self._ports: dict[tuple[str, str, int], _Port] = {}
        self._under: dict[str, set[tuple[str, str, int]]] = defaultdict(set)
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
                old = self._ports.get(key)
                if old is not None and old.leaf != leaf:
                    self._under[old.leaf].discard(key)
                self._ports[key] = _Port(leaf, p.xmit_wait_per_s or 0.0, p.errors_per_s or 0.0, _LINK[p.state], at_s)
                self._under[leaf].add(key)
                touched.add(leaf)
            for leaf in sorted(touched):
                out.extend(self._advance(leaf, at_s))
        return out

    def _advance(self, leaf: str, at_s: float) -> list[Event]:
        fresh = [p for k in self._under[leaf] if at_s - (p := self._ports[k]).at_s <= self._stale_s]
        st = self._leaves.setdefault(leaf, _Leaf())
        out: list[Event] = []
        # A report no later than the leaf's last one would read as "no growth in no time" (congestion 0): the
        # rates it brought count from the next report on.
        if st.at_s is None or at_s > st.at_s:
            if st.at_s is not None:
                dt = at_s - st.at_s
                st.wait += sum(p.wait_per_s for p in fresh) * dt
                st.errors += sum(p.errors_per_s for p in fresh) * dt
            st.at_s = at_s
            out.append(PortCountersReported(leaf, round(st.wait), round(st.errors), at_s))
        states = [p.state for p in fresh]
        if states and all(s is LinkState.DOWN for s in states):
            state = LinkState.DOWN
        elif any(s is not LinkState.UP for s in states):
            state = LinkState.DEGRADED
        else:
            state = LinkState.UP
        if state is not st.state:
            st.state = state
            out.append(LinkHealthChanged(leaf, state, at_s))
        return out


def hca_leaves(fabric: Fabric, host: str, hcas: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Device name -> the leaf switch it is cabled to, for the ``(name, GUID)`` pairs ``host`` registered. By
    GUID in an imported fabric; by name where the fabric was built from the agents' inventories."""
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
    """Each host's ``hca_leaves``, recomputed when the fabric changed or the host registered again.

    ``fabric`` is read at most once per ``ttl_s`` (it costs a store read), so beats cost no read at all.
    """

    def __init__(
        self,
        fabric: Callable[[], tuple[Fabric | None, tuple[object, ...]]],
        inventory: Callable[[str], Iterable[tuple[str, str]]],
        ttl_s: float,
        clock: Callable[[], float],
    ) -> None:
        self._fabric, self._inventory, self._ttl_s, self._clock = fabric, inventory, ttl_s, clock
        self._lock = threading.Lock()
        self._current: tuple[Fabric | None, tuple[object, ...], float] | None = None
        self._hosts: dict[str, tuple[tuple[object, ...], dict[str, str]]] = {}

    def forget(self, host: str) -> None:
        with self._lock:
            self._hosts.pop(host, None)

    def of(self, host: str) -> dict[str, str]:
        now = self._clock()
        with self._lock:
            cur = self._current
        if cur is None or now - cur[2] >= self._ttl_s:
            fabric, key = self._fabric()
            cur = (fabric, key, now)
            with self._lock:
                self._current = cur
        fabric, key, _ = cur
        if fabric is None or not fabric.has_host(host):
            return {}
        with self._lock:
            got = self._hosts.get(host)
        if got is not None and got[0] == key:
            return got[1]
        leaves = hca_leaves(fabric, host, self._inventory(host))
        with self._lock:
            self._hosts[host] = (key, leaves)
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
