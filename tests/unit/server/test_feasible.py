"""The submit check's pure rule (``server.feasible.never_runs``): which jobs can never run on the registered
nodes and defined pools, and why; nothing is refused before a node has registered."""

from __future__ import annotations

from gpupool.domain.events import HealthGrade
from gpupool.domain.jobs import GpuShare, JobSpec, Scaling
from gpupool.domain.states import NodeState
from gpupool.server.feasible import facts, never_runs
from gpupool.store.records import NodeRecord


def node(name: str, gpus: int, model: str = "H100", **labels: str) -> NodeRecord:
    return NodeRecord(name, NodeState.LOST, model, gpus, tuple(labels.items()), (HealthGrade.OK,) * gpus, None, 1)


NODES = [node("a", 8, zone="x"), node("b", 8, zone="y"), node("c", 4, "A100", zone="x")]


def why(job: JobSpec, nodes: list[NodeRecord] = NODES, pools: tuple[str, ...] = ()) -> str | None:
    err = never_runs(job, facts(nodes, pools))
    return None if err is None else f"{err.code}: {err}"


def test_nothing_is_refused_before_a_node_registers_unless_it_asks_for_labels() -> None:
    assert why(JobSpec("j", tasks=99, gpus_per_task=8), []) is None
    assert (why(JobSpec("j", node_selector=(("zone", "x"),)), []) or "").startswith("NO_MATCHING_NODES")


def test_gpus_are_counted_over_every_registered_node_whatever_its_state() -> None:
    assert why(JobSpec("j", tasks=2, gpus_per_task=8)) is None  # a and b, though lost
    assert "room for 2 such task(s)" in (why(JobSpec("j", tasks=3, gpus_per_task=8)) or "")
    assert "the largest registered node has 8" in (why(JobSpec("j", gpus_per_task=16)) or "")
    assert why(JobSpec("j", tasks=5, gpus_per_task=4)) is None  # 2 + 2 + 1 tasks of 4
    elastic = JobSpec("j", tasks=6, gpus_per_task=8, min_tasks=2, scaling=Scaling.LINEAR)
    assert why(elastic) is None
    assert why(JobSpec("j", tasks=64, share=GpuShare(250, 0))) is None


def test_models_and_labels_narrow_the_nodes_counted() -> None:
    assert "the 1 registered node(s) with the requested" in (
        why(JobSpec("j", tasks=2, gpus_per_task=4, gpu_models=("A100",))) or ""
    )
    refused = why(JobSpec("j", gpu_models=("B200",))) or ""
    assert refused.startswith("NO_MATCHING_NODES") and "GPU models on nodes: A100, H100" in refused
    assert why(JobSpec("j", tasks=2, gpus_per_task=8, node_selector=(("zone", "x"),))) is not None
    assert why(JobSpec("j", tasks=1, gpus_per_task=8, node_selector=(("zone", "x"),))) is None
    assert (why(JobSpec("j", node_selector=(("zone", "z"),))) or "").startswith("NO_MATCHING_NODES")


def test_a_pool_must_be_defined_once_pools_are_in_use() -> None:
    assert why(JobSpec("j", pool="anything")) is None
    refused = why(JobSpec("j", pool="anything"), pools=("training", "inference")) or ""
    assert refused == "UNKNOWN_POOL: pool 'anything' is not defined; the defined pools: inference, training"
    assert why(JobSpec("j", pool="training"), pools=("training",)) is None
