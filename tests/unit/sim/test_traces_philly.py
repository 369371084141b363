"""Philly (Pollux's philly.csv) and Tiresias loaders on small self-made samples."""

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpupool.domain.errors import ParseError
from gpupool.sim.traces import load_trace

PHILLY = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,8,23608.0,6214e9
2017-10-10 06:13:03,10.0,2,20.0,6214e9
"""

TIRESIAS = """job_id,num_gpu,submit_time,iterations,model_name,duration,interval
0,1,30,606,vgg19,164,30
1,8,90,133,vgg11,147,23
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "philly.csv"
    p.write_text(text, encoding="utf-8")
    return p


def test_philly_absolute_timestamps_become_seconds_from_first_submission(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, PHILLY), "philly")
    assert trace.origin_s == datetime(2017, 10, 9, 6, 13, 3, tzinfo=UTC).timestamp()
    assert [(j.job_id, j.submit_s, j.duration_s, j.gpus, j.tenant) for j in trace.jobs] == [
        ("philly-3", 0.0, 2951.0, 8, "6214e9"),  # the id is the row's line in the file
        ("philly-2", 2932.0, 66.0, 1, "11cb48"),
        ("philly-4", 86400.0, 10.0, 2, "6214e9"),
    ]


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("2017-13-01 00:00:00,1.0,1,1.0,x", "not a date and time"),
        ("2017-10-01 00:00:00,one,1,1.0,x", "duration is not a number"),
        ("2017-10-01 00:00:00,1.0,-1,1.0,x", "negative GPU count"),
        ("2017-10-01 00:00:00,1.0,1,1.0", "missing column 'cluster'"),
    ],
)
def test_philly_bad_rows(tmp_path: Path, row: str, reason: str) -> None:
    path = write(tmp_path, PHILLY + row + "\n")
    with pytest.raises(ParseError) as err:
        load_trace(path, "philly")
    assert (err.value.line, reason in err.value.reason) == (5, True)
    trace = load_trace(path, "philly", skip_bad_rows=True)
    assert len(trace.jobs) == 3 and [b.line for b in trace.bad_rows] == [5]


def test_tiresias_maps_columns(tmp_path: Path) -> None:
    path = tmp_path / "60_job.csv"
    path.write_text(TIRESIAS + "2,x,100,1,alexnet,5,1\n", encoding="utf-8")
    with pytest.raises(ParseError, match="num_gpu is not a number") as err:
        load_trace(path, "tiresias")
    assert err.value.line == 4
    trace = load_trace(path, "tiresias", skip_bad_rows=True)
    assert [(j.job_id, j.submit_s, j.duration_s, j.gpus, j.model_name) for j in trace.jobs] == [
        ("0", 0.0, 164.0, 1, "vgg19"),
        ("1", 60.0, 147.0, 8, "vgg11"),
    ]
    assert trace.origin_s == 30.0 and len(trace.bad_rows) == 1
