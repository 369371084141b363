"""The door's pure parts: the failure buckets and the key an address counts under."""

from __future__ import annotations

import pytest

from gpupool.server.door import FailureBuckets, address_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_allows_a_burst_then_refills_at_its_rate() -> None:
    clock = Clock()
    b = FailureBuckets(burst=3, per_s=2.0, clock=clock)
    for _ in range(3):
        assert b.wait_s(b"k") == 0
        b.charge(b"k")
    assert b.wait_s(b"k") == pytest.approx(0.5)  # one failure's worth comes back in 1/2 s
    assert b.wait_s(b"other") == 0  # keys are apart
    clock.now += 0.5
    assert b.wait_s(b"k") == 0
    clock.now += 100
    for _ in range(3):  # refilled to the burst, never past it
        b.charge(b"k")
    assert b.wait_s(b"k") > 0


def test_a_flood_digs_no_deeper_than_one_bursts_wait() -> None:
    clock = Clock()
    b = FailureBuckets(burst=4, per_s=1.0, clock=clock)
    for _ in range(1000):
        b.charge(b"k")
    assert b.wait_s(b"k") == pytest.approx(5.0)


def test_the_least_recently_charged_keys_go_first() -> None:
    clock = Clock()
    b = FailureBuckets(burst=1, per_s=1.0, clock=clock, max_keys=2)
    for key in (b"a", b"b", b"c"):
        b.charge(key)
    assert b.wait_s(b"a") == 0  # forgotten: a full bucket again
    assert b.wait_s(b"b") > 0 and b.wait_s(b"c") > 0


@pytest.mark.parametrize(
    ("client", "key"),
    [
        (("10.1.2.3", 5), b"a:10.1.2.3"),
        (("2001:db8:1:2:3:4:5:6", 5), b"a:2001:db8:1:2::/64"),
        (("::ffff:10.1.2.3", 5), b"a:10.1.2.3"),
        (("testclient", 5), b"a:testclient"),
        (None, b"a:-"),
    ],
)
def test_an_address_counts_as_itself_or_its_ipv6_64(client: tuple[str, int] | None, key: bytes) -> None:
    assert address_key(client) == key


def test_a_failure_given_back_restores_the_allowance_up_to_the_burst() -> None:
    clock = Clock()
    b = FailureBuckets(burst=1, per_s=0.01, clock=clock)
    b.charge(b"k")
    assert b.wait_s(b"k") > 0
    b.charge(b"k", -1.0)
    assert b.wait_s(b"k") == 0
    b.charge(b"k", -5.0)  # never past the burst
    b.charge(b"k")
    assert b.wait_s(b"k") > 0
    assert not b.full(b"k") and b.full(b"fresh")
