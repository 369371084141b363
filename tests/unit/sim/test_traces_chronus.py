"""Chronus deadline traces: strict, soft and best-effort jobs with relative deadlines."""

from pathlib import Path

import pytest

from gpupool.domain.errors import ParseError
from gpupool.sim.traces import DeadlineKind, load_trace

HEADER = "job_id,user,num_gpu,submit_time,iterations,model_name,duration,interval,expect_time_list,expect_value_list,best_effort,job_type\n"
ROWS = """0,vc_6214e9,1,8555,5049,vgg16,747,14,1105,10,0,strict
1,vc_ed69ec,4,832,296,mobilenet_v2,98,8,128,10,0,strict
2,vc_ee9e8c,0,14341,3621,alexnet,30,17,14341,10,1,best
3,vc_ee9e8c,2,900,10,resnet50,100,1,189-159-229,8-10-5,0,soft
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "trace_job_Philly_MIX1.csv"
    p.write_text(HEADER + text, encoding="utf-8")
    return p


def test_chronus_maps_kinds_and_relative_deadlines(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, ROWS), "chronus")
    assert trace.origin_s == 832.0
    got = {j.job_id: j for j in trace.jobs}
    j0 = got["0"]
    assert (j0.tenant, j0.gpus, j0.submit_s, j0.duration_s, j0.model_name) == ("vc_6214e9", 1, 7723.0, 747.0, "vgg16")
    assert (j0.deadline_kind, j0.deadline_s) == (DeadlineKind.STRICT, 7723.0 + 1105)
    assert (got["1"].gpus, got["1"].submit_s, got["1"].deadline_s) == (4, 0.0, 128.0)
    assert (got["2"].deadline_kind, got["2"].deadline_s, got["2"].gpus) == (DeadlineKind.BEST_EFFORT, None, 0)
    # A soft job's deadline is its earliest step.
    assert (got["3"].deadline_kind, got["3"].deadline_s) == (DeadlineKind.SOFT, 68.0 + 159)
    assert [j.job_id for j in trace.jobs] == ["1", "3", "0", "2"]


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("9,vc_x,1,10,1,m,5,1,20,10,0,urgent", "job_type 'urgent'"),
        ("9,vc_x,1,10,1,m,5,1,soon,10,0,strict", "expect_time_list"),
        ("9,vc_x,1,10,1,m,,1,20,10,0,strict", "empty duration"),
        ("9,vc_x,-4,10,1,m,5,1,20,10,0,strict", "negative GPU count"),
    ],
)
def test_chronus_bad_rows(tmp_path: Path, row: str, reason: str) -> None:
    path = write(tmp_path, ROWS + row + "\n")
    with pytest.raises(ParseError) as err:
        load_trace(path, "chronus")
    assert err.value.line == 6 and reason in err.value.reason
    trace = load_trace(path, "chronus", skip_bad_rows=True)
    assert len(trace.jobs) == 4 and [b.line for b in trace.bad_rows] == [6]
