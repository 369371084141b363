"""Heartbeats -> domain events (``gpupool.server.live``): per-leaf counters, link states, grades, the inbox."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.cluster import ClusterState
from gpupool.domain.events import (
    GpuHealthChanged,
    HealthGrade,
    LinkHealthChanged,
    LinkState,
    NodeLabelled,
    PortCountersReported,
    TelemetryReported,
)
from gpupool.domain.health import HealthRules
from gpupool.domain.states import NodeState
from gpupool.fabric.generators import leaf_spine
from gpupool.schemas.agent import GpuSample, PortSample
from gpupool.server.live import HeldFacts, LiveInbox, PortCounters, gpu_events, hca_leaves
from gpupool.store.records import NodeRecord

FABRIC = leaf_spine(2, 1, 2, gpus_per_host=2)
LEAVES = {"mlx5_0": "leaf-01"}


def port(wait: float = 0.0, state: str = "up", errors: float = 0.0) -> tuple[PortSample, ...]:
    return (PortSample(hca="mlx5_0", state=state, xmit_wait_per_s=wait, errors_per_s=errors),)


def congestion_after(events: list[PortCountersReported]) -> float:
    st = ClusterState(FABRIC)
    for e in events:
        st.apply(e)
    return float(st.snapshot().switch_congestion[st.index.switch_ix["leaf-01"]])


def test_a_leafs_counter_grows_by_the_sum_of_its_ports_latest_rates() -> None:
    pc = PortCounters(stale_s=30.0)
    out = pc.events("node001", port(wait=1e7), LEAVES, 10.0)
    assert out == [PortCountersReported("leaf-01", 0, 0, 10.0)]  # the first report is the baseline
    out += pc.events("node002", port(wait=2e7), LEAVES, 10.5)  # a second host under the same leaf
    assert out[-1] == PortCountersReported("leaf-01", round(3e7 * 0.5), 0, 10.5)
    out += pc.events("node001", port(wait=1e7), LEAVES, 11.0)
    assert out[-1].port_xmit_wait == round(3e7 * 1.0)
    # The reducer reads (delta / dt) / saturation: 3e7 / 5e7, staggered beats or not.
    assert congestion_after(out) == pytest.approx(3e7 / HealthRules().xmit_wait_saturated_per_s)


def test_a_silent_port_stops_counting_and_a_report_in_the_past_is_not_sent() -> None:
    pc = PortCounters(stale_s=5.0)
    pc.events("node001", port(wait=4e7), LEAVES, 0.0)
    pc.events("node002", port(), LEAVES, 1.0)
    assert pc.events("node002", port(), LEAVES, 0.5) == []  # older than the leaf's last report
    last = pc.events("node002", port(), LEAVES, 10.0)[-1]  # node001 has been silent for 10 s > 5 s
    assert isinstance(last, PortCountersReported)
    assert last.port_xmit_wait == round(4e7 * 1.0)  # it counted only while it was fresh


def test_a_leaf_is_down_when_all_its_ports_are_and_degraded_when_some_are() -> None:
    pc = PortCounters(stale_s=30.0)
    assert [e for e in pc.events("node001", port(state="down"), LEAVES, 1.0) if isinstance(e, LinkHealthChanged)] == [
        LinkHealthChanged("leaf-01", LinkState.DOWN, 1.0)
    ]
    links = [e for e in pc.events("node002", port(), LEAVES, 2.0) if isinstance(e, LinkHealthChanged)]
    assert links == [LinkHealthChanged("leaf-01", LinkState.DEGRADED, 2.0)]
    assert [e for e in pc.events("node002", port(), LEAVES, 3.0) if isinstance(e, LinkHealthChanged)] == []
    links = [e for e in pc.events("node001", port(), LEAVES, 4.0) if isinstance(e, LinkHealthChanged)]
    assert links == [LinkHealthChanged("leaf-01", LinkState.UP, 4.0)]


def test_errors_per_second_make_the_leaf_erroring() -> None:
    pc = PortCounters(stale_s=30.0)
    out = pc.events("node001", port(errors=0.0), LEAVES, 0.0) + pc.events("node001", port(errors=2.0), LEAVES, 1.0)
    st = ClusterState(FABRIC)
    for e in out:
        st.apply(e)
    assert bool(st.snapshot().switch_erroring[st.index.switch_ix["leaf-01"]])


def test_ports_the_fabric_does_not_know_give_no_events() -> None:
    assert PortCounters(30.0).events("node001", port(wait=1e9), {}, 1.0) == []


def test_gpu_events_carry_temperatures_utilisation_and_changed_grades_with_reasons() -> None:
    samples = (
        GpuSample(index=1, temperature_c=90.0, utilization_pct=50.0, health="degraded", reasons=("temperature 90 C",)),
        GpuSample(index=0, temperature_c=None, utilization_pct=None),
    )
    out = gpu_events("node001", samples, (HealthGrade.OK, HealthGrade.OK), (HealthGrade.OK, HealthGrade.DEGRADED), 5.0)
    tel = out[0]
    assert isinstance(tel, TelemetryReported) and math.isnan(tel.gpu_temperature_c[0])
    assert tel.gpu_temperature_c[1] == 90.0 and tel.gpu_utilization_pct[1] == 50.0
    assert out[1:] == [GpuHealthChanged("node001", 1, HealthGrade.DEGRADED, 5.0, "temperature 90 C")]
    # No grades taken (a partial sample): only the temperatures.
    assert len(gpu_events("node001", samples, (), None, 5.0)) == 1
    assert gpu_events("node001", (), (), None, 5.0) == []


def test_hca_leaves_by_guid_and_by_name() -> None:
    host = FABRIC.host("node003")
    guid = host.hcas[0]
    assert hca_leaves(FABRIC, "node003", [("mlx5_0", guid)]) == {"mlx5_0": "leaf-02"}
    name = FABRIC.hcas[FABRIC.hca_index(guid)].name
    assert hca_leaves(FABRIC, "node003", [(name, "not-a-guid")]) == {name: "leaf-02"}
    assert hca_leaves(FABRIC, "node003", [("mlx5_9", "")]) == {}


def test_the_inbox_keeps_the_newest_per_key_bounded_and_wakes_for_decisions() -> None:
    woken: list[int] = []
    inbox = LiveInbox(lambda: woken.append(1))
    for t in range(5):
        inbox.put(
            [TelemetryReported("node001", (40.0 + t,), float(t)), PortCountersReported("leaf-01", t, 0, float(t))]
        )
    assert woken == []  # samples wait for the next cycle
    got = inbox.drain()
    assert got == [
        TelemetryReported("node001", (44.0,), 4.0),
        PortCountersReported("leaf-01", 3, 0, 3.0),
        PortCountersReported("leaf-01", 4, 0, 4.0),
    ]
    assert inbox.drain() == []
    inbox.put([GpuHealthChanged("node001", 0, HealthGrade.BAD, 6.0), NodeLabelled("node001", (("a", "b"),), 6.0)])
    assert woken == [1]
    # A rebuild gets the telemetry (last two counter reports, for the reducer's delta) but not the durable facts,
    # and what was pending goes with it: those facts are in the store the rebuild reads.
    assert inbox.restart() == got
    assert inbox.drain() == []


def test_a_report_put_while_the_loop_rebuilds_reaches_the_new_state_once() -> None:
    """Invariant: every event reaches the loop's current state exactly once. A counter report applied twice
    reads as no growth in no time, which would clear a congested leaf until its next report."""
    inbox = LiveInbox()
    first, second, third = (PortCountersReported("leaf-01", round(1e8 * t), 0, float(t)) for t in range(3))
    inbox.put([first, second])
    assert inbox.drain() == [first, second]  # folded into the old state
    inbox.put([third])  # a beat while the loop starts a rebuild
    fresh = inbox.restart()
    assert fresh == [second, third]  # the new state gets both reports it needs for the delta
    inbox.put([])
    assert inbox.drain() == []  # and the next cycle does not apply ``third`` again
    state = ClusterState(FABRIC)
    for e in fresh + inbox.drain():
        state.apply(e)
    assert float(state.snapshot().switch_congestion[state.index.switch_ix["leaf-01"]]) == 1.0  # 1e8/s: 2x saturated


class _Reference:
    """The per-leaf sums recomputed from every port on each report: the definition the counters keep."""

    def __init__(self, stale_s: float) -> None:
        self.stale_s = stale_s
        self.ports: dict[tuple[str, str, int], tuple[str, float, float, str, float]] = {}
        self.leaves: dict[str, list[Any]] = {}  # leaf -> [wait, errors, at_s, state]

    def events(self, host: str, ports: tuple[PortSample, ...], leaf_of: dict[str, str], at: float) -> list[Any]:
        touched = set()
        for p in ports:
            if p.hca in leaf_of:
                rates = (p.xmit_wait_per_s or 0.0, p.errors_per_s or 0.0)
                self.ports[(host, p.hca, p.port)] = (leaf_of[p.hca], *rates, p.state, at)
                touched.add(leaf_of[p.hca])
        out: list[Any] = []
        for leaf in sorted(touched):
            fresh = [v for v in self.ports.values() if v[0] == leaf and at - v[4] <= self.stale_s]
            st = self.leaves.setdefault(leaf, [0.0, 0.0, None, LinkState.UP])
            if st[2] is None or at > st[2]:
                if st[2] is not None:
                    st[0] += sum(v[1] for v in fresh) * (at - st[2])
                    st[1] += sum(v[2] for v in fresh) * (at - st[2])
                st[2] = at
                out.append(PortCountersReported(leaf, round(st[0]), round(st[1]), at))
            states = [v[3] for v in fresh]
            state = (
                LinkState.DOWN
                if states and all(x == "down" for x in states)
                else (LinkState.DEGRADED if any(x != "up" for x in states) else LinkState.UP)
            )
            if state is not st[3]:
                st[3] = state
                out.append(LinkHealthChanged(leaf, state, at))
        return out


_BEAT = st.tuples(
    st.sampled_from(["h1", "h2", "h3", "h4"]),
    st.lists(
        st.tuples(
            st.sampled_from(["mlx5_0", "mlx5_1", "eth0"]),
            st.integers(0, 10**8),
            st.integers(0, 50),
            st.sampled_from(["up", "up", "down", "degraded"]),
        ),
        max_size=3,
    ),
    st.integers(0, 4),  # seconds since the previous beat (0: two beats in the same instant)
    st.booleans(),  # the host's mlx5_1 moved to the other leaf (a new fabric)
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(_BEAT, max_size=40))
def test_kept_sums_give_the_events_of_recomputing_every_port(beats: list[Any]) -> None:
    """Integer rates and times, so both sides are exact: the incremental sums are the recomputed ones."""
    kept, ref = PortCounters(stale_s=5.0), _Reference(stale_s=5.0)
    t = 0.0
    for host, ports, dt, moved in beats:
        t += dt
        leaf_of = {"mlx5_0": "leaf-01", "mlx5_1": "leaf-02" if moved else "leaf-01"}
        samples = tuple(
            PortSample(hca=h, state=state, xmit_wait_per_s=float(w), errors_per_s=float(e)) for h, w, e, state in ports
        )
        assert kept.events(host, samples, leaf_of, t) == ref.events(host, samples, leaf_of, t)


def record(host: str, grades: tuple[HealthGrade, ...], version: int = 1) -> NodeRecord:
    return NodeRecord(host, NodeState.UP, "H100", 2, (), grades, 1.0, version)


def test_held_facts_fold_each_node_record_once_and_compare_again_after_an_event() -> None:
    """A record already folded in is skipped (the loop reads the same objects every cycle); a new record of the
    host is folded, and so is the old one again once an event changed what is held, as when every record was
    compared each cycle: the state ends as the store's record says."""
    st = ClusterState(FABRIC)
    host = FABRIC.hosts[0].name
    facts = HeldFacts()
    ok, bad = record(host, (HealthGrade.OK, HealthGrade.OK)), record(host, (HealthGrade.BAD, HealthGrade.OK), 2)
    assert facts.sync(st, [ok], 0.0) == [ok]
    assert facts.sync(st, [ok], 1.0) == []
    assert facts.sync(st, [bad], 2.0) == [bad]
    assert facts.newly_bad() == {(host, 0)}
    facts.fold(st, [GpuHealthChanged(host, 0, HealthGrade.OK, 3.0)])  # this replica's beat, before the store's
    assert int(st.snapshot().gpu_grade[st.index.host_index(host), 0]) == int(HealthGrade.OK)
    assert facts.sync(st, [bad], 4.0) == [bad]  # the record read again, as the store holds it
    assert int(st.snapshot().gpu_grade[st.index.host_index(host), 0]) == int(HealthGrade.BAD)
