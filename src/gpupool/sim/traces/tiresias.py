"""The Tiresias simulator's job list (``60_job.csv``): relative times, shifted so the first submission is at 0 s."""

from __future__ import annotations

from pathlib import Path

from gpupool.sim.traces import rows
from gpupool.sim.traces.records import Trace, TraceJob
from gpupool.sim.traces.rows import Columns, RowParser


def load_tiresias(path: str | Path, *, skip_bad_rows: bool = False, limit: int | None = None) -> Trace:
    """Load ``job_id,num_gpu,submit_time,iterations,model_name,duration,interval``.

    job_id -> job_id; num_gpu -> gpus; submit_time (s) -> submit_s; duration (s) -> duration_s;
    model_name -> model_name. iterations and interval are not used.
    """
    p = rows.check_path(path)

    def make(c: Columns) -> RowParser[TraceJob]:
        i, g, s, d, m = c["job_id"], c["num_gpu"], c["submit_time"], c["duration"], c["model_name"]

        def parse(r: list[str], line: int) -> TraceJob:
            return TraceJob(
                job_id=rows.text(r, i),
                submit_s=rows.number(r, s, "submit_time"),
                duration_s=rows.number(r, d, "duration"),
                gpus=rows.integer(r, g, "num_gpu"),
                model_name=rows.text(r, m) or None,
            )

        return parse

    jobs, bad = rows.collect(
        p,
        required=("job_id", "num_gpu", "submit_time", "duration", "model_name"),
        make_parser=make,
        key=lambda j: j.job_id,
        skip_bad_rows=skip_bad_rows,
        limit=limit,
    )
    return rows.make_trace(p.stem, "tiresias", jobs, bad)
