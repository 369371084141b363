"""Alibaba openb loader: pod lists (fractional GPUs, GPU model constraints, CPU, memory) and node lists."""

from pathlib import Path

import pytest

from gpupool.domain.errors import InputError, ParseError
from gpupool.sim.traces import TraceNode, load_trace
from gpupool.sim.traces.openb import load_openb

GPU_NODES = """sn,cpu_milli,memory_mib,gpu,model
node-0,64000,262144,2,P100
node-1,96000,786432,8,G2
"""
ALL_NODES = GPU_NODES + "node-2,32000,131072,0,\n"
PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
pod-0,12000,16384,1,1000,,LS,Running,100,5000,100
pod-1,6000,12288,1,460,V100M16|V100M32,BE,Succeeded,400,900,500
pod-2,8000,30517,0,0,,Burstable,Running,300,310,301
pod-3,88000,327680,8,1000,G2,BE,Pending,200,260,
"""


def folder(tmp_path: Path, pods: str = PODS, nodes: str | None = GPU_NODES, all_nodes: str | None = ALL_NODES) -> Path:
    if nodes is not None:
        (tmp_path / "openb_node_list_gpu_node.csv").write_text(nodes, encoding="utf-8")
    if all_nodes is not None:
        (tmp_path / "openb_node_list_all_node.csv").write_text(all_nodes, encoding="utf-8")
    p = tmp_path / "openb_pod_list_default.csv"
    p.write_text(pods, encoding="utf-8")
    return p


def test_openb_maps_every_used_column(tmp_path: Path) -> None:
    trace = load_trace(folder(tmp_path), "openb")
    assert trace.nodes == (TraceNode("node-0", 2, "P100", 64000, 262144), TraceNode("node-1", 8, "G2", 96000, 786432))
    pods = {j.job_id: j for j in trace.jobs}
    assert [j.job_id for j in trace.jobs] == ["pod-0", "pod-3", "pod-2", "pod-1"]
    p0, p1, p2, p3 = (pods[f"pod-{i}"] for i in range(4))
    assert (p0.submit_s, p0.duration_s, p0.gpus, p0.gpu_milli, p0.cpu_milli, p0.memory_mib) == (
        0.0,
        4900.0,
        1,
        1000,
        12000,
        16384,
    )
    assert (p0.kind, p0.status, p0.gpu_model) == ("inference", "Running", None)
    assert (p1.submit_s, p1.duration_s, p1.gpus, p1.gpu_milli, p1.gpu_model, p1.kind) == (
        300.0,
        400.0,
        1,
        460,
        "V100M16|V100M32",
        "batch",
    )
    assert (p2.gpus, p2.gpu_milli, p2.gpus_per_task, p2.kind, p2.duration_s) == (0, 0, 0, "training", 9.0)
    assert (p3.gpus, p3.gpus_per_task, p3.status, p3.duration_s, p3.gpu_model) == (8, 8, "Pending", 0.0, "G2")
    assert trace.origin_s == 100.0


def test_openb_falls_back_to_all_nodes_and_accepts_an_explicit_list(tmp_path: Path) -> None:
    pods = folder(tmp_path, nodes=None)
    assert [n.name for n in load_trace(pods, "openb").nodes] == ["node-0", "node-1", "node-2"]
    assert load_trace(pods, "openb").nodes[2].gpu_model is None
    other = tmp_path / "mine.csv"
    other.write_text(GPU_NODES.splitlines()[0] + "\nx,1000,1024,4,A10\n", encoding="utf-8")
    assert [n.name for n in load_openb(pods, nodes=other).nodes] == ["x"]


def test_openb_without_node_list_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no openb node list"):
        load_trace(folder(tmp_path, nodes=None, all_nodes=None), "openb")


def test_openb_untimed_variant_arrives_at_zero(tmp_path: Path) -> None:
    pods = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\npod-0,1000,1024,1,250\npod-1,1000,1024,4,1000\n"
    trace = load_trace(folder(tmp_path, pods=pods), "openb")
    assert [(j.submit_s, j.duration_s, j.gpu_milli, j.gpus) for j in trace.jobs] == [
        (0.0, 0.0, 250, 1),
        (0.0, 0.0, 1000, 4),
    ]


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("pod-9,1000,1024,2,500,,LS,Running,0,10,0", "fractional"),
        ("pod-9,1000,1024,1,1500,,LS,Running,0,10,0", "outside 0..1000"),
        ("pod-9,1000,1024,1,1000,,LS,Running,0,10,20", "deletion_time 10 is before scheduled_time 20"),
        ("pod-9,-1,1024,1,1000,,LS,Running,0,10,0", "negative CPU"),
        ("pod-9,1000,1024,1,1000,,LS,Running,0,,0", "empty deletion_time"),
    ],
)
def test_openb_bad_pod_rows(tmp_path: Path, row: str, reason: str) -> None:
    path = folder(tmp_path, pods=PODS + row + "\n")
    with pytest.raises(ParseError) as err:
        load_trace(path, "openb")
    assert (err.value.line, err.value.source) == (6, str(path))
    assert reason in err.value.reason
    trace = load_trace(path, "openb", skip_bad_rows=True)
    assert len(trace.jobs) == 4 and [b.line for b in trace.bad_rows] == [6]


def test_openb_bad_node_row_names_the_node_file(tmp_path: Path) -> None:
    pods = folder(tmp_path, nodes=GPU_NODES + "node-9,64000,262144,-2,T4\n")
    with pytest.raises(ParseError) as err:
        load_trace(pods, "openb")
    assert err.value.source == str(tmp_path / "openb_node_list_gpu_node.csv") and err.value.line == 4
    trace = load_trace(pods, "openb", skip_bad_rows=True)
    assert len(trace.nodes) == 2 and [(b.source.endswith("gpu_node.csv"), b.line) for b in trace.bad_rows] == [
        (True, 4)
    ]
