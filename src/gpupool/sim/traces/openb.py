"""Alibaba cluster-trace-gpu-v2023 ("openb", the FGD paper's trace): a node list and pod lists.

Convention: ``load_openb`` takes the path of a pod list (``openb_pod_list_<variant>.csv``) and reads the
nodes from ``openb_node_list_gpu_node.csv`` in the same folder (the 1,213 GPU nodes, 6,212 GPUs, that the
FGD simulator uses), or from ``openb_node_list_all_node.csv`` (which adds 310 CPU-only nodes) when only that
one is there. Pass ``nodes=`` to choose another node list (``gpupool sim pack --nodes``).
"""

from __future__ import annotations

from pathlib import Path

from gpupool.domain.errors import InputError
from gpupool.sim.traces import rows
from gpupool.sim.traces.records import BadRow, Trace, TraceJob, TraceNode
from gpupool.sim.traces.rows import Columns, RowError, RowParser

NODE_LISTS = ("openb_node_list_gpu_node.csv", "openb_node_list_all_node.csv")  # tried in this order
_TIME_COLUMNS = ("creation_time", "deletion_time", "scheduled_time")
# Alibaba's own service classes: latency-sensitive pods are long-running services, best-effort ones batch work.
_KIND_BY_QOS = {"LS": "inference", "BE": "batch"}


def default_nodes_path(pods_path: str | Path) -> Path:
    """The node list that belongs to a pod list, by the convention in this module's docstring."""
    folder = Path(pods_path).parent
    for name in NODE_LISTS:
        if (folder / name).is_file():
            return folder / name
    raise InputError(f"no openb node list ({' or '.join(NODE_LISTS)}) beside the pod list", source=str(pods_path))


def load_openb_nodes(
    path: str | Path, *, skip_bad_rows: bool = False
) -> tuple[tuple[TraceNode, ...], tuple[BadRow, ...]]:
    """Load ``sn,cpu_milli,memory_mib,gpu,model``: sn -> name; gpu -> gpus; model -> gpu_model (empty: None,
    a CPU-only node); cpu_milli and memory_mib as they are."""
    p = rows.check_path(path)

    def make(c: Columns) -> RowParser[TraceNode]:
        n, cpu, mem, g, m = c["sn"], c["cpu_milli"], c["memory_mib"], c["gpu"], c["model"]

        def parse(r: list[str], line: int) -> TraceNode:
            return TraceNode(
                name=rows.text(r, n),
                gpus=rows.integer(r, g, "gpu"),
                gpu_model=rows.text(r, m) or None,
                cpu_milli=rows.integer(r, cpu, "cpu_milli"),
                memory_mib=rows.integer(r, mem, "memory_mib"),
            )

        return parse

    nodes, bad = rows.collect(
        p,
        required=("sn", "cpu_milli", "memory_mib", "gpu", "model"),
        make_parser=make,
        key=lambda node: node.name,
        skip_bad_rows=skip_bad_rows,
        limit=None,
    )
    return tuple(nodes), tuple(bad)


def load_openb(
    path: str | Path,
    *,
    skip_bad_rows: bool = False,
    limit: int | None = None,
    nodes: str | Path | None = None,
) -> Trace:
    """Load a pod list (``name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,creation_time,
    deletion_time,scheduled_time]``) and its node list (see the module docstring).

    name -> job_id; cpu_milli, memory_mib as they are; num_gpu -> gpus; gpu_milli -> gpu_milli, the share of
    each GPU (a fractional pod has num_gpu 1 and gpu_milli < 1000; a pod without GPUs gets gpu_milli 0);
    gpu_spec (e.g. ``V100M16|V100M32``) -> gpu_model, empty: any; qos -> kind (LS -> inference, BE -> batch,
    Guaranteed and Burstable -> training); pod_phase -> status; creation_time (s) -> submit_s;
    deletion_time - scheduled_time -> duration_s (0 for a pod that was never scheduled, its status says
    Pending). The ``multigpu`` variants have only the first five columns (FGD packs without times): their pods
    all arrive at 0 s with duration 0. A deletion before the scheduling is a bad row.
    """
    p = rows.check_path(path)
    node_path = Path(nodes) if nodes is not None else default_nodes_path(p)
    trace_nodes, node_bad = load_openb_nodes(node_path, skip_bad_rows=skip_bad_rows)

    def make(c: Columns) -> RowParser[TraceJob]:
        n, cpu, mem, g, milli = c["name"], c["cpu_milli"], c["memory_mib"], c["num_gpu"], c["gpu_milli"]
        spec, qos, phase = c.get("gpu_spec"), c.get("qos"), c.get("pod_phase")
        timed = all(t in c for t in _TIME_COLUMNS)
        created, deleted, scheduled = (c[t] if timed else -1 for t in _TIME_COLUMNS)

        def parse(r: list[str], line: int) -> TraceJob:
            gpus = rows.integer(r, g, "num_gpu")
            share = rows.integer(r, milli, "gpu_milli") if gpus > 0 else 0
            submit, duration = 0.0, 0.0
            if timed:
                submit = rows.number(r, created, "creation_time")
                start = rows.optional_number(r, scheduled, "scheduled_time")
                if start is not None:
                    end = rows.number(r, deleted, "deletion_time")
                    if end < start:
                        raise RowError(f"deletion_time {end:g} is before scheduled_time {start:g}")
                    duration = end - start
            return TraceJob(
                job_id=rows.text(r, n),
                submit_s=submit,
                duration_s=duration,
                gpus=gpus,
                gpu_milli=share,
                cpu_milli=rows.integer(r, cpu, "cpu_milli"),
                memory_mib=rows.integer(r, mem, "memory_mib"),
                gpu_model=(rows.text(r, spec) or None) if spec is not None else None,
                kind=_KIND_BY_QOS.get(rows.text(r, qos), "training") if qos is not None else "training",
                status=(rows.text(r, phase) or None) if phase is not None else None,
            )

        return parse

    jobs, bad = rows.collect(
        p,
        required=("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"),
        optional=("gpu_spec", "qos", "pod_phase", *_TIME_COLUMNS),
        make_parser=make,
        key=lambda j: j.job_id,
        skip_bad_rows=skip_bad_rows,
        limit=limit,
    )
    return rows.make_trace(p.stem, "openb", jobs, [*node_bad, *bad], trace_nodes)
