"""Load every public trace this project reads and time each load.

Prints one JSON line: ``traces`` (one row per file: format, file relative to the traces folder, jobs, nodes,
gpus, bad_rows, load_s), ``total_jobs``, ``total_bad_rows``, ``total_s`` and ``largest`` (the slowest file).
Bad rows are skipped and counted, never fatal. A file that is not there is listed with ``missing: true``.
Usage: python benchmarks/trace_load.py [TRACES_DIR]   (default ../shared/traces)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from gpupool.sim.traces import load_trace

# (format, glob under the traces folder): the files each loader is meant for.
FILES = (
    ("itp", "microsoft-itp-elasticflow/raw/cluster*.csv"),
    ("elasticflow", "microsoft-itp-elasticflow/elasticflow/cluster*.csv"),
    ("philly", "philly-pollux/philly.csv"),
    ("chronus", "philly-chronus-deadline/trace_job_Philly_*.csv"),
    ("openb", "alibaba-openb-v2023/csv/openb_pod_list_*.csv"),
    ("dlrm", "alibaba-dlrm-inference-v2025/disaggregated_DLRM_trace.csv"),
    ("tiresias", "tiresias-sample/60_job.csv"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("traces", nargs="?", default="../shared/traces", type=Path)
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for fmt, pattern in FILES:
        paths = sorted(args.traces.glob(pattern))
        if not paths:
            rows.append({"format": fmt, "file": pattern, "missing": True})
        for path in paths:
            t0 = time.perf_counter()
            trace = load_trace(path, fmt, skip_bad_rows=True)
            load_s = time.perf_counter() - t0
            rows.append(
                {
                    "format": fmt,
                    "file": str(path.relative_to(args.traces)),
                    "jobs": len(trace.jobs),
                    "nodes": len(trace.nodes),
                    "gpus": sum(j.gpus for j in trace.jobs),
                    "bad_rows": len(trace.bad_rows),
                    "load_s": round(load_s, 3),
                }
            )
    loaded = [r for r in rows if not r.get("missing")]
    largest = max(loaded, key=lambda r: r["load_s"], default=None)
    print(
        json.dumps(
            {
                "traces": rows,
                "total_jobs": sum(r["jobs"] for r in loaded),
                "total_bad_rows": sum(r["bad_rows"] for r in loaded),
                "total_s": round(sum(r["load_s"] for r in loaded), 3),
                "largest": None if largest is None else {k: largest[k] for k in ("file", "jobs", "load_s")},
            }
        )
    )


if __name__ == "__main__":
    main()
