"""Alibaba cluster-trace-gpu-v2025: GPU-disaggregated DLRM inference instances (NSDI'25).

Every instance is a long-running inference service: it arrives, holds its resources, and leaves. Times are
seconds from the trace start, which is also the normalised zero: instances that existed before the start
arrive at 0 s. Instances still alive at the end leave at the trace horizon: 31 days (the collection window)
or the latest time in the rows read, whichever is later.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpupool.sim.traces import rows
from gpupool.sim.traces.records import Trace, TraceJob
from gpupool.sim.traces.rows import Columns, RowError, RowParser

HORIZON_S = 31 * 86_400.0
MIB_PER_GIB = 1024
RUNNING_AT_END = "running_at_end"  # status of an instance without a deletion time: censored at the horizon


def load_dlrm(path: str | Path, *, skip_bad_rows: bool = False, limit: int | None = None) -> Trace:
    """Load ``disaggregated_DLRM_trace.csv``.

    instance_sn -> job_id; app_name -> tenant; kind is "inference" for both roles (HN instances hold GPUs,
    CN instances only CPUs; role is not used); gpu_request -> gpus (whole GPUs); cpu_request (cores) ->
    cpu_milli; memory_request (GiB) -> memory_mib; creation_time -> submit_s (empty or NaN: existed before
    the trace, 0 s); deletion_time - creation_time -> duration_s (empty or NaN deletion: still alive, leaves
    at the horizon, status ``running_at_end``; the trace has no status of its own). A deletion before the creation is a bad row. scheduled_time, the limits, rdma, disk and
    max_instance_per_node are not used.
    """
    p = rows.check_path(path)

    def make(c: Columns) -> RowParser[TraceJob]:
        sn, app, cpu, gpu = c["instance_sn"], c["app_name"], c["cpu_request"], c["gpu_request"]
        mem = c["memory_request"]
        created, deleted = c["creation_time"], c["deletion_time"]

        def parse(r: list[str], line: int) -> TraceJob:
            start = rows.optional_number(r, created, "creation_time")
            end = rows.optional_number(r, deleted, "deletion_time")
            start = 0.0 if start is None else start
            if end is not None and end < start:
                raise RowError(f"deletion_time {end:g} is before creation_time {start:g}")
            gpus = rows.integer(r, gpu, "gpu_request")
            return TraceJob(
                job_id=rows.text(r, sn),
                submit_s=start,
                duration_s=0.0 if end is None else end - start,
                gpus=gpus,
                gpu_milli=1000 if gpus else 0,
                cpu_milli=round(rows.number(r, cpu, "cpu_request") * 1000),
                memory_mib=round(rows.number(r, mem, "memory_request") * MIB_PER_GIB),
                tenant=rows.text(r, app) or "default",
                kind="inference",
                status=RUNNING_AT_END if end is None else None,
            )

        return parse

    jobs, bad = rows.collect(
        p,
        required=(
            "instance_sn",
            "app_name",
            "cpu_request",
            "gpu_request",
            "memory_request",
            "creation_time",
            "deletion_time",
        ),
        make_parser=make,
        key=lambda j: j.job_id,
        skip_bad_rows=skip_bad_rows,
        limit=limit,
    )
    # The departure of a still-alive instance is known only once every row has been read.
    horizon = max((j.submit_s + j.duration_s for j in jobs), default=HORIZON_S)
    horizon = max(horizon, HORIZON_S)
    jobs = [replace(j, duration_s=horizon - j.submit_s) if j.status == RUNNING_AT_END else j for j in jobs]
    return rows.make_trace(p.stem, "dlrm", jobs, bad)
