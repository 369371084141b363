"""Philly-derived deadline traces from the Chronus artifact (``trace_job_Philly_{MIX1,MIX2,SLO}.csv``).

Times are already relative (seconds, re-based and compressed by Chronus); the loader still shifts them so the
first submission is at 0 s. Deadlines in the file are relative to the submission.
"""

from __future__ import annotations

from pathlib import Path

from gpupool.sim.traces import rows
from gpupool.sim.traces.records import DeadlineKind, Trace, TraceJob
from gpupool.sim.traces.rows import Columns, RowError, RowParser

_KINDS = {"strict": DeadlineKind.STRICT, "soft": DeadlineKind.SOFT, "best": DeadlineKind.BEST_EFFORT}


def _first_deadline_s(raw: str) -> float:
    """The earliest of a '-'-separated list of relative deadlines (a strict job has exactly one)."""
    parts = [p.strip() for p in raw.strip().split("-")]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise RowError(f"expect_time_list is not a '-'-separated list of seconds: {raw.strip()!r}") from None
    if not values or any(v < 0 for v in values):
        raise RowError(f"expect_time_list has a negative or missing deadline: {raw.strip()!r}")
    return min(values)


def load_chronus(path: str | Path, *, skip_bad_rows: bool = False, limit: int | None = None) -> Trace:
    """Load a Chronus trace: ``job_id,user,num_gpu,submit_time,iterations,model_name,duration,interval,...``.

    job_id -> job_id; user (``vc_<hash>``) -> tenant; num_gpu -> gpus (205 MIX1 jobs ask for 0, kept as 0);
    submit_time (s) -> submit_s; duration (s) -> duration_s; model_name -> model_name; job_type -> deadline_kind
    (strict -> STRICT, soft -> SOFT, best -> BEST_EFFORT, anything else is a bad row). For strict and soft jobs
    deadline_s = submit_time + the earliest entry of expect_time_list (relative seconds); a soft job's later
    steps and expect_value_list (its step utility) are not kept. Best-effort jobs have no deadline_s.
    iterations, interval and best_effort (redundant with job_type) are not used.
    """
    p = rows.check_path(path)

    def make(c: Columns) -> RowParser[TraceJob]:
        i, u, g, s, d, m, e, k = (
            c["job_id"],
            c["user"],
            c["num_gpu"],
            c["submit_time"],
            c["duration"],
            c["model_name"],
            c["expect_time_list"],
            c["job_type"],
        )

        def parse(r: list[str], line: int) -> TraceJob:
            kind_name = rows.text(r, k)
            kind = _KINDS.get(kind_name)
            if kind is None:
                raise RowError(f"job_type {kind_name!r} is not one of {', '.join(_KINDS)}")
            submit = rows.number(r, s, "submit_time")
            deadline = None if kind is DeadlineKind.BEST_EFFORT else submit + _first_deadline_s(r[e])
            return TraceJob(
                job_id=rows.text(r, i),
                submit_s=submit,
                duration_s=rows.number(r, d, "duration"),
                gpus=rows.integer(r, g, "num_gpu"),
                tenant=rows.text(r, u) or "default",
                deadline_s=deadline,
                deadline_kind=kind,
                model_name=rows.text(r, m) or None,
            )

        return parse

    jobs, bad = rows.collect(
        p,
        required=("job_id", "user", "num_gpu", "submit_time", "duration", "model_name", "expect_time_list", "job_type"),
        make_parser=make,
        key=lambda j: j.job_id,
        skip_bad_rows=skip_bad_rows,
        limit=limit,
    )
    return rows.make_trace(p.stem, "chronus", jobs, bad)
