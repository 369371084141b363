"""Microsoft ITP 2021 traces: the raw job list and ElasticFlow's version of it with deadlines.

Both give times in seconds relative to the collection start; the loaders shift them so the first submission
is at 0 s (``Trace.origin_s`` keeps the original offset). Neither says how a job's GPUs split over hosts, so
every job is one task holding all its GPUs; the scheduler decides the split.
"""

from __future__ import annotations

from pathlib import Path

from gpupool.domain.elastic import Elastic
from gpupool.domain.model_curves import MODEL_CURVES, elasticflow_max_gpus
from gpupool.sim.traces import rows
from gpupool.sim.traces.records import DeadlineKind, Trace, TraceJob
from gpupool.sim.traces.rows import Columns, RowParser


def _elastic(model: str, batch_size: int, gpus: int) -> Elastic | None:
    curve = MODEL_CURVES.get(f"{model}@{batch_size}")
    if curve is None or not curve.has(gpus):
        return None
    return Elastic(1, elasticflow_max_gpus(model, batch_size), curve)


def _job_id(j: TraceJob) -> str:
    return j.job_id


def load_itp(path: str | Path, *, skip_bad_rows: bool = False, limit: int | None = None) -> Trace:
    """Load ``raw/clusterNN.csv``: ``job_id,submission_time,duration,num_gpu``.

    job_id -> job_id; submission_time (s) -> submit_s; duration (s) -> duration_s; num_gpu -> gpus (whole,
    >= 0). Everything else keeps its default: one task, tenant "default", kind "training", no deadline.
    """
    p = rows.check_path(path)

    def make(c: Columns) -> RowParser[TraceJob]:
        i, s, d, g = c["job_id"], c["submission_time"], c["duration"], c["num_gpu"]

        def parse(r: list[str], line: int) -> TraceJob:
            return TraceJob(
                job_id=rows.text(r, i),
                submit_s=rows.number(r, s, "submission_time"),
                duration_s=rows.number(r, d, "duration"),
                gpus=rows.integer(r, g, "num_gpu"),
            )

        return parse

    jobs, bad = rows.collect(
        p,
        required=("job_id", "submission_time", "duration", "num_gpu"),
        make_parser=make,
        key=_job_id,
        skip_bad_rows=skip_bad_rows,
        limit=limit,
    )
    return rows.make_trace(p.stem, "itp", jobs, bad)


def load_elasticflow(path: str | Path, *, skip_bad_rows: bool = False, limit: int | None = None) -> Trace:
    """Load ``elasticflow/clusterNN.csv``: the ITP jobs plus ElasticFlow's generated deadlines.

    Columns used: job_id -> job_id; submission_time (s) -> submit_s; duration (s) -> duration_s; num_gpu -> gpus;
    deadline (absolute, same clock as submission_time) -> deadline_s with deadline_kind STRICT (ElasticFlow
    drops a job it cannot finish in time, so a late finish is worth nothing); model_name -> model_name.
    model_name and batch_size -> elastic: the job may run at 1..ElasticFlow's cap for its model and batch size
    GPUs (``domain/model_curves.py``, the artifact's A100 caps), at the sizes its model's measured curve has
    (``<model>@<batch_size>``; the trace's durations are ``num_iteration / rate(num_gpu)`` of those curves), as
    in ElasticFlow's own runs; a job whose curve is not known or lacks its GPU count stays rigid. num_iteration
    is not used (the duration at num_gpu carries the same work). A deadline before the submission is a bad
    row; one shorter than the duration is kept (ElasticFlow generates some infeasible deadlines on purpose).
    """
    p = rows.check_path(path)

    def make(c: Columns) -> RowParser[TraceJob]:
        i, s, d, g, dl, m = (
            c["job_id"],
            c["submission_time"],
            c["duration"],
            c["num_gpu"],
            c["deadline"],
            c["model_name"],
        )

        b = c.get("batch_size")

        def parse(r: list[str], line: int) -> TraceJob:
            gpus = rows.integer(r, g, "num_gpu")
            model = rows.text(r, m)
            return TraceJob(
                job_id=rows.text(r, i),
                submit_s=rows.number(r, s, "submission_time"),
                duration_s=rows.number(r, d, "duration"),
                gpus=gpus,
                deadline_s=rows.number(r, dl, "deadline"),
                deadline_kind=DeadlineKind.STRICT,
                model_name=model or None,
                elastic=None if b is None else _elastic(model, rows.integer(r, b, "batch_size"), gpus),
            )

        return parse

    jobs, bad = rows.collect(
        p,
        required=("job_id", "submission_time", "duration", "num_gpu", "deadline", "model_name"),
        optional=("batch_size",),
        make_parser=make,
        key=_job_id,
        skip_bad_rows=skip_bad_rows,
        limit=limit,
    )
    return rows.make_trace(p.stem, "elasticflow", jobs, bad)
