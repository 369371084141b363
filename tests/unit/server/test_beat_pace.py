"""The beat pace: the interval told to agents grows with the fleet past the cap, a node is lost after three
intervals (or node_lost_after_s), and a shrinking fleet judges no node on an interval shorter than one it told."""

from __future__ import annotations

from gpupool.server.liveness import BeatPace


class Fleet:
    def __init__(self, nodes: int) -> None:
        self.nodes, self.t = nodes, 0.0


def pace(fleet: Fleet, max_per_s: float = 50.0) -> BeatPace:
    return BeatPace(5.0, max_per_s, 30.0, lambda: fleet.nodes, lambda: fleet.t)


def test_the_interval_follows_the_fleet_past_the_cap() -> None:
    fleet = Fleet(100)
    p = pace(fleet)
    assert (p.interval_s(), p.lost_after_s()) == (5.0, 30.0)  # 100 nodes / 5 s = 20 beats a second: under 50
    fleet.nodes = 250
    assert (p.interval_s(), p.lost_after_s()) == (5.0, 30.0)  # at the cap
    fleet.nodes = 1000
    assert (p.interval_s(), p.lost_after_s()) == (20.0, 60.0)  # 50 a second; three intervals past 30 s
    fleet.nodes = 3000
    assert (p.interval_s(), p.lost_after_s()) == (60.0, 180.0)


def test_no_cap_keeps_the_settings() -> None:
    fleet = Fleet(100_000)
    p = pace(fleet, max_per_s=0.0)
    assert (p.interval_s(), p.lost_after_s()) == (5.0, 30.0)


def test_a_shrinking_fleet_keeps_the_longest_interval_told_until_every_agent_had_a_reply_since() -> None:
    fleet = Fleet(3000)
    p = pace(fleet)
    assert p.interval_s() == 60.0  # told at t = 0: agents may beat every 60 s until their next reply
    fleet.nodes, fleet.t = 100, 10.0
    assert p.interval_s() == 5.0  # the new interval is told at once
    assert p.lost_after_s() == 180.0  # but silence is still judged on the 60 s some agents were told
    assert p.beating_s() == 60.0  # and so is a releasing rank's absence from beats (two of them)
    fleet.t = 119.0
    assert p.lost_after_s() == 180.0
    fleet.t = 121.0  # two of the old intervals since it was last told: every beating agent has been told 5 s
    assert (p.lost_after_s(), p.beating_s()) == (30.0, 5.0)


def test_silence_is_not_judged_on_an_interval_never_told() -> None:
    """A fleet that grew since the last reply: lost_after already follows the fleet (a longer wait is safe)."""
    fleet = Fleet(100)
    p = pace(fleet)
    assert p.interval_s() == 5.0
    fleet.nodes = 1500
    assert p.lost_after_s() == 90.0
