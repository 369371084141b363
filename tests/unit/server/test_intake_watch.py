"""The heartbeat intake's watch: the time its ticks came late is a stall, counted over any window asked about,
the open one included; jitter up to a tick is not a stall; old stalls are forgotten."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.server.liveness import IntakeWatch


class Hand:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def ticking(w: IntakeWatch, clock: Hand, seconds: float, every_s: float) -> None:
    for _ in range(round(seconds / every_s)):
        clock.t += every_s
        w.tick()


def test_nothing_is_discounted_before_the_first_tick_nor_while_ticks_come_on_time() -> None:
    clock = Hand()
    w = IntakeWatch(0.25, 120.0, clock)
    assert w.stalled_s(900.0, 1100.0) == 0.0  # never ticked: nothing known
    w.tick()
    ticking(w, clock, 30.0, 0.25)
    ticking(w, clock, 30.0, 0.5)  # a tick's worth of lateness each time: jitter, not a stall
    assert w.stalled_s(1000.0, clock.t) == 0.0


def test_a_pause_is_a_stall_while_it_lasts_and_after_the_next_tick() -> None:
    clock = Hand()
    w = IntakeWatch(0.25, 120.0, clock)
    w.tick()
    ticking(w, clock, 10.0, 0.25)
    paused_at = clock.t
    clock.t += 25.0  # SIGSTOP: no tick; the loop may look before the intake runs again
    assert w.stalled_s(paused_at - 5, clock.t) == pytest.approx(25.0 - 0.5)
    w.tick()
    ticking(w, clock, 5.0, 0.25)
    assert w.stalled_s(paused_at - 5, clock.t) == pytest.approx(24.5)
    # Only the part inside the window asked about counts.
    assert w.stalled_s(paused_at + 10.5, clock.t) == pytest.approx(14.5)
    assert w.stalled_s(paused_at + 30, clock.t) == 0.0


def test_stalls_older_than_keep_are_forgotten() -> None:
    clock = Hand()
    w = IntakeWatch(0.25, 60.0, clock)
    w.tick()
    clock.t += 10.0
    w.tick()
    start = clock.t - 10.0
    assert w.stalled_s(start, clock.t) == pytest.approx(9.5)
    ticking(w, clock, 61.0, 0.25)
    assert w.stalled_s(start, clock.t) == 0.0


@given(
    gaps=st.lists(st.floats(0.01, 5.0), min_size=1, max_size=60),
    since=st.floats(990.0, 1400.0),
    ahead=st.floats(-3.0, 10.0),
)
def test_stalled_s_is_the_stalled_part_of_the_window_whatever_it_asks_and_in_any_order(
    gaps: list[float], since: float, ahead: float
) -> None:
    """Every tick late by more than a tick's jitter is a stall from its due time; the window's part of each stall
    (clipped to ``now``; the open one counted), asked many times with one ``now``, as the loop does per node."""
    clock = Hand()
    w = IntakeWatch(0.25, 1e9, clock)
    w.tick()
    spans = []
    for gap in gaps:
        due = clock.t + 0.5
        clock.t += gap
        if clock.t > due:
            spans.append((due, clock.t))
        w.tick()
    now = clock.t + ahead
    if now > clock.t + 0.5:
        spans.append((clock.t + 0.5, now))
    expected = sum(max(0.0, min(end, now) - max(start, since)) for start, end in spans)
    assert w.stalled_s(since, now) == pytest.approx(expected, abs=1e-6)
    assert w.stalled_s(since + 1.0, now) == pytest.approx(
        sum(max(0.0, min(end, now) - max(start, since + 1.0)) for start, end in spans), abs=1e-6
    )
    assert w.stalled_s(since, now) == pytest.approx(expected, abs=1e-6)  # the same answer again, from the memo
