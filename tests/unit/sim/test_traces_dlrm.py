"""Alibaba DLRM inference 2025: services with arrival and departure, censored at both ends."""

from pathlib import Path

import pytest

from gpupool.domain.errors import ParseError
from gpupool.sim.traces import load_trace
from gpupool.sim.traces.dlrm import HORIZON_S, RUNNING_AT_END

HEADER = (
    "instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,rdma_limit,memory_request,"
    "memory_limit,disk_request,disk_limit,max_instance_per_node,creation_time,scheduled_time,deletion_time\n"
)
ROWS = """instance_0,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,
instance_1,CN,app_22,64,64,0,0,1,1,320.0,320.0,544.0,640.0,-1,475.5,623.0,
instance_2,CN,app_88,8,8,0,0,1,1,40.0,320.0,255.0,300.0,-1,610.0,683.0,91730.0
instance_3,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,nan,nan,5000.0
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "disaggregated_DLRM_trace.csv"
    p.write_text(HEADER + text, encoding="utf-8")
    return p


def test_dlrm_maps_services_and_censoring(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, ROWS), "dlrm")
    got = {j.job_id: j for j in trace.jobs}
    i0, i1, i2, i3 = (got[f"instance_{i}"] for i in range(4))
    assert (i0.submit_s, i0.duration_s, i0.status) == (0.0, HORIZON_S, RUNNING_AT_END)
    assert (i0.gpus, i0.cpu_milli, i0.memory_mib, i0.tenant, i0.kind) == (1, 12000, 120 * 1024, "app_0", "inference")
    assert (i1.submit_s, i1.duration_s, i1.gpus, i1.gpu_milli) == (475.5, HORIZON_S - 475.5, 0, 0)
    assert (i2.submit_s, i2.duration_s, i2.status, i2.memory_mib) == (610.0, 91120.0, None, 40 * 1024)
    assert (i3.submit_s, i3.duration_s, i3.status) == (0.0, 5000.0, None)  # existed before the trace started
    assert trace.origin_s == 0.0


def test_dlrm_horizon_grows_with_a_later_event(tmp_path: Path) -> None:
    late = HORIZON_S + 100
    trace = load_trace(write(tmp_path, ROWS + f"instance_9,CN,app_1,8,8,0,0,1,1,40,40,1,1,-1,10,10,{late}\n"), "dlrm")
    assert {j.job_id: j.duration_s for j in trace.jobs}["instance_0"] == late


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("instance_9,CN,app_1,8,8,0,0,1,1,40,40,1,1,-1,100,100,50", "deletion_time 50 is before creation_time 100"),
        ("instance_9,CN,app_1,8,8,x,0,1,1,40,40,1,1,-1,100,100,150", "gpu_request is not a number"),
        ("instance_9,CN,app_1,8,8,0,0,1,1,40,40,1,1,-1,100,100", "missing column 'deletion_time'"),
    ],
)
def test_dlrm_bad_rows(tmp_path: Path, row: str, reason: str) -> None:
    path = write(tmp_path, ROWS + row + "\n")
    with pytest.raises(ParseError) as err:
        load_trace(path, "dlrm")
    assert (err.value.line, reason in err.value.reason) == (6, True)
    assert [b.line for b in load_trace(path, "dlrm", skip_bad_rows=True).bad_rows] == [6]
