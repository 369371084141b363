"""Microsoft Philly 2017 as shipped by the Pollux artifact (``philly.csv``): absolute submission timestamps.

The timestamps are wall-clock strings without a zone; they are read as UTC (only differences matter) and
shifted so the first submission is at 0 s, with ``Trace.origin_s`` the Unix time of that first submission.
The file is not sorted by time; the trace comes back sorted.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gpupool.sim.traces import rows
from gpupool.sim.traces.records import Trace, TraceJob
from gpupool.sim.traces.rows import Columns, RowError, RowParser


def _timestamp_s(raw: str) -> float:
    try:
        when = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise RowError(f"timestamp is not a date and time: {raw.strip()!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def load_philly(path: str | Path, *, skip_bad_rows: bool = False, limit: int | None = None) -> Trace:
    """Load ``philly.csv``: ``timestamp,duration,num_gpus,gpu_time,cluster``.

    timestamp (``YYYY-MM-DD HH:MM:SS``) -> submit_s; duration (s) -> duration_s; num_gpus -> gpus;
    cluster (the virtual cluster's hash) -> tenant. The file has no job id: job_id is ``philly-<line>``, the
    row's line in the file, so a job can be found again. gpu_time (= duration x num_gpus) is redundant and
    not used.
    """
    p = rows.check_path(path)

    def make(c: Columns) -> RowParser[TraceJob]:
        ts, d, g, vc = c["timestamp"], c["duration"], c["num_gpus"], c["cluster"]

        def parse(r: list[str], line: int) -> TraceJob:
            return TraceJob(
                job_id=f"philly-{line}",
                submit_s=_timestamp_s(r[ts]),
                duration_s=rows.number(r, d, "duration"),
                gpus=rows.integer(r, g, "num_gpus"),
                tenant=rows.text(r, vc) or "default",
            )

        return parse

    jobs, bad = rows.collect(
        p,
        required=("timestamp", "duration", "num_gpus", "cluster"),
        make_parser=make,
        key=lambda j: j.job_id,
        skip_bad_rows=skip_bad_rows,
        limit=limit,
    )
    return rows.make_trace(p.stem, "philly", jobs, bad)
