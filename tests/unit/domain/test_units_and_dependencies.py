"""Human units (durations, memory, points in time), Slurm's array and dependency syntax, dependency verdicts
and the cycle check of a set of named jobs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpupool.domain.dependencies import (
    Verdict,
    dependency_order,
    dependency_verdict,
    format_array,
    parse_array,
    parse_dependency,
)
from gpupool.domain.errors import InputError
from gpupool.domain.jobs import Dependency, DependencyKind
from gpupool.domain.states import JobState
from gpupool.domain.units import (
    format_duration,
    month_window,
    parse_duration,
    parse_memory_mib,
    parse_slurm_time,
    parse_when,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("4h", 14400.0), ("90s", 90.0), ("30m", 1800.0), ("1h30m", 5400.0), ("2d", 172800.0), ("1.5h", 5400.0)],
)
def test_durations_in_human_units(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_a_bare_number_is_seconds_and_bad_durations_name_the_problem() -> None:
    assert parse_duration(600) == 600.0 and parse_duration("600") == 600.0
    with pytest.raises(InputError, match=r"unknown unit 'x' in duration '4x' \(known: s, m, h, d, w\)"):
        parse_duration("4x", "time_limit")
    with pytest.raises(InputError, match="is not a duration"):
        parse_duration("h4")
    with pytest.raises(InputError, match="must be positive"):
        parse_duration(0)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 1800), ("30:15", 1815), ("4:00:00", 14400), ("1-02", 93600), ("1-02:30", 95400), ("2-00:00:01", 172801)],
)
def test_slurm_time_forms(text: str, seconds: int) -> None:
    assert parse_slurm_time(text) == seconds


def test_bad_slurm_times_are_refused() -> None:
    for bad in ("4h", "1:2:3:4", "x-1", "unlimited", "0"):
        with pytest.raises(InputError):
            parse_slurm_time(bad)


def test_memory_units() -> None:
    assert parse_memory_mib("64Gi") == 65536
    assert parse_memory_mib("64G") == 65536  # Slurm's G is GiB
    assert parse_memory_mib("512Mi") == 512 and parse_memory_mib("512") == 512 and parse_memory_mib(512) == 512
    assert parse_memory_mib("1Ti") == 1 << 20
    assert parse_memory_mib("16GB") == round(16e9 / (1 << 20))
    with pytest.raises(InputError, match="unknown unit 'Qi'"):
        parse_memory_mib("4Qi")


def test_points_in_time_and_months() -> None:
    now = 1_800_000_000.0
    assert parse_when("now", now) == now
    assert parse_when("now-7days", now) == now - 7 * 86400
    assert parse_when("now-3hours", now) == now - 3 * 3600
    assert parse_when("2026-11-01", now) == datetime(2026, 11, 1, tzinfo=UTC).timestamp()
    assert parse_when("2026-11-01T12:00+01:00", now) == datetime(2026, 11, 1, 11, tzinfo=UTC).timestamp()
    with pytest.raises(InputError, match="unknown unit 'fortnights'"):
        parse_when("now-2fortnights", now)
    with pytest.raises(InputError, match="is not a time"):
        parse_when("yesterday", now)
    start, end = month_window("2026-02")
    assert (end - start) / 86400 == 28
    with pytest.raises(InputError, match="is not a month"):
        month_window("2026-13")
    assert format_duration(3725) == "01:02:05" and format_duration(90061) == "1-01:01:01"


def test_arrays_in_slurm_syntax() -> None:
    a = parse_array("0-199%16", 1000)
    assert a.indices == tuple(range(200)) and a.cap == 16
    assert parse_array("0-198:2", 1000).indices == tuple(range(0, 199, 2))
    assert parse_array("1,3,5-7", 1000).indices == (1, 3, 5, 6, 7)
    assert format_array(parse_array("0-3,7,9-10%2", 100)) == "0-3,7,9-10%2"
    with pytest.raises(InputError, match="more than the 100 elements"):
        parse_array("0-100", 100)
    for bad, needle in (
        ("3-1", "is empty"),
        ("a-b", "is not an index"),
        ("0-9%0", "must be a whole number"),
        ("", "is not an index"),
    ):
        with pytest.raises(InputError, match=needle):
            parse_array(bad, 100)


def test_dependency_syntax() -> None:
    assert parse_dependency("afterok:1:2,afterany:3") == (
        (DependencyKind.AFTEROK, ("1", "2")),
        (DependencyKind.AFTERANY, ("3",)),
    )
    with pytest.raises(InputError, match="'singleton' is not supported"):
        parse_dependency("singleton:1")
    with pytest.raises(InputError, match="'aftercorr' is not supported"):
        parse_dependency("aftercorr:1")
    with pytest.raises(InputError, match=r"'\?' \(any one of the dependencies\) is not supported"):
        parse_dependency("afterok:1?afterok:2")
    with pytest.raises(InputError, match=r"a delay \(\+minutes\) is not supported"):
        parse_dependency("after:1+5")
    with pytest.raises(InputError, match="is not KIND:JOB"):
        parse_dependency("afterok")


def test_dependency_verdicts_follow_slurm() -> None:
    S = JobState
    cases = {
        DependencyKind.AFTER: {S.PENDING: Verdict.WAIT, S.RUNNING: Verdict.MET, S.CANCELLED: Verdict.MET},
        DependencyKind.AFTEROK: {S.RUNNING: Verdict.WAIT, S.FINISHED: Verdict.MET, S.TIMEOUT: Verdict.NEVER},
        DependencyKind.AFTERNOTOK: {S.FINISHED: Verdict.NEVER, S.FAILED: Verdict.MET, S.CANCELLED: Verdict.MET},
        DependencyKind.AFTERANY: {S.PLACED: Verdict.WAIT, S.FAILED: Verdict.MET, S.FINISHED: Verdict.MET},
    }
    for kind, by_state in cases.items():
        for state, want in by_state.items():
            assert dependency_verdict(Dependency(kind, ("x",)), {"x": state})[0] is want, (kind, state)
    verdict, why = dependency_verdict(Dependency(DependencyKind.AFTEROK, ("a", "b")), {"a": S.FINISHED, "b": S.FAILED})
    assert verdict is Verdict.NEVER and why == "afterok: job b ended failed"


def test_dependency_order_and_cycles() -> None:
    order = dependency_order({"train": ["prep"], "prep": [], "eval": ["train", "j-outside"]})
    assert order.index("prep") < order.index("train") < order.index("eval")
    with pytest.raises(InputError, match="dependency cycle: a -> b -> c -> a"):
        dependency_order({"a": ["b"], "b": ["c"], "c": ["a"]})
    with pytest.raises(InputError, match="dependency cycle: a -> a"):
        dependency_order({"a": ["a"]})
