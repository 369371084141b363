from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from gpupool.domain.calendar import parse_calendar
from gpupool.domain.errors import ParseError

SH = ZoneInfo("Asia/Shanghai")
TEXT = """\
timezone = "Asia/Shanghai"
default_pool = "training"

[[pool]]
name = "inference"
sus = [1, 2]
share = 0.7
share_outside = 0.2
windows = [{ days = "mon-sun", start = "08:00", end = "22:00" }]

[[pool]]
name = "batch"
hosts = ["dgx001"]
share = 1.0
"""


def at(y: int, mo: int, d: int, h: int, mi: int = 0) -> float:
    return datetime(y, mo, d, h, mi, tzinfo=SH).timestamp()


def test_inference_holds_seventy_percent_by_day_and_twenty_at_night() -> None:
    cal = parse_calendar(TEXT, "pools.toml")
    assert cal.pools == ("training", "inference", "batch")
    day = cal.shares_at(at(2024, 5, 6, 9, 30))
    assert (day[0].pool, day[0].sus, day[0].fraction) == ("inference", (1, 2), 0.7)
    assert day[0].since_s == at(2024, 5, 6, 8)
    night = cal.shares_at(at(2024, 5, 6, 23))
    assert night[0].fraction == 0.2 and night[0].since_s == at(2024, 5, 6, 22)
    early = cal.shares_at(at(2024, 5, 7, 3))
    assert early[0].fraction == 0.2 and early[0].since_s == at(2024, 5, 6, 22)
    assert day[1].fraction == 1.0 and day[1].since_s == -float("inf")
    assert cal.next_change_s(at(2024, 5, 6, 9)) == at(2024, 5, 6, 22)


def test_window_across_midnight_and_weekdays_only() -> None:
    cal = parse_calendar(
        'timezone = "UTC"\n[[pool]]\nname = "night"\nsus = [1]\nshare = 1\nshare_outside = 0\n'
        'windows = [{ days = "mon-fri", start = "22:00", end = "06:00" }]\n',
        "n.toml",
    )
    utc = ZoneInfo("UTC")
    fri_late = datetime(2024, 5, 10, 23, tzinfo=utc).timestamp()  # Friday
    sat_early = datetime(2024, 5, 11, 5, tzinfo=utc).timestamp()  # Saturday, still Friday's window
    sat_late = datetime(2024, 5, 11, 23, tzinfo=utc).timestamp()  # Saturday: no window
    assert cal.shares_at(fri_late)[0].fraction == 1.0
    assert cal.shares_at(sat_early)[0].fraction == 1.0
    assert cal.shares_at(sat_late)[0].fraction == 0.0
    assert cal.shares_at(sat_late)[0].since_s == datetime(2024, 5, 11, 6, tzinfo=utc).timestamp()


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('timezone = "Mars/Olympus"\n', 1, "unknown time zone"),
        ('timezone = "UTC"\n[[pool]]\nname = "x"\nsus = [1]\nshare = 1.5\n', 5, "from 0 to 1"),
        (
            'timezone = "UTC"\n[[pool]]\nname = "x"\nsus = [1]\nshare = 1\nshare_outside = 0\n'
            'windows = [{ days = "mon-fri", start = "25:00", end = "06:00" }]\n',
            7,
            "HH:MM",
        ),
        (
            '[[pool]]\nname = "x"\nsus = [1]\nshare = 1\nshare_outside = 0\n'
            'windows = [{ days = "mo-fr", start = "20:00", end = "06:00" }]\n',
            6,
            "unknown day",
        ),
        ('[[pool]]\nname = "x"\nshare = 1\n', 1, "sus or hosts"),
        (
            '[[pool]]\nname = "x"\nsus = [1]\nshare = 1\nwindows = [{ start = "08:00", end = "09:00" }]\n',
            1,
            "share_outside",
        ),
        ('timezone = "UTC"\nzone = 3\n', 2, "unknown key"),
        ('timezone = "UTC"\n[[pool]\n', 2, "not valid TOML"),
    ],
)
def test_malformed_calendars_name_file_and_line(text: str, line: int, words: str) -> None:
    with pytest.raises(ParseError, match=words) as e:
        parse_calendar(text, "pools.toml")
    assert e.value.source == "pools.toml" and e.value.line == line
