"""Chronus' artifact and gpupool job by job on the same trace: which strict jobs each met, missed or refused.

    python benchmarks/chronus_join.py ARTIFACT_CSV GPUPOOL_CSV [GPUPOOL_CSV ...]

ARTIFACT_CSV is the per-job file the Chronus artifact writes at the end of a run
(``<save_log_dir>/time-aware-with-lease.csv``: job_id, submit_time, end_time, expect_time_list, miss_ddl,
best_effort, ...); it is read by path, never fetched. Each GPUPOOL_CSV is a file that
``benchmarks/sim_chronus.py --jobs-out DIR`` wrote (one per arm). Prints one JSON line per gpupool file.

A strict job's outcome: ``met`` (it ended by submit + its deadline), ``missed`` (it ended later, or was still
running), ``refused`` (gpupool never started it: deadline admission found it could not finish in time).
Chronus never refuses: a job it cannot fit by its deadline runs at a lower priority (``UNACCEPTED_SLO``) and
ends late. Times are compared relative to each job's own submission: Chronus' clock starts at 0, gpupool's
at the trace's first submission (1 s); the deadline is the same ``expect_time`` in both.
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

MET, MISSED, REFUSED = "met", "missed", "refused"
SHOWN = 30  # job ids listed per disagreement


def artifact_outcomes(path: Path) -> dict[str, str]:
    """The artifact's strict jobs: job id -> met or missed. A job is met when it ended by its submission plus
    the first entry of its ``expect_time_list`` (the deadline it was submitted with); the file's own
    ``miss_ddl`` must agree (a disagreement is a misread file, so it raises)."""
    out: dict[str, str] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            if row["best_effort"].strip() == "1":
                continue
            deadline = float(row["submit_time"]) + float(row["expect_time_list"].split("-")[0])
            met = float(row["end_time"]) <= deadline
            if met != (float(row["miss_ddl"]) == 0.0):
                raise ValueError(
                    f"job {row['job_id']}: end {row['end_time']} vs deadline {deadline} disagrees with miss_ddl"
                )
            out[row["job_id"].strip()] = MET if met else MISSED
    return out


def gpupool_outcomes(path: Path) -> dict[str, str]:
    """gpupool's strict jobs from a ``--jobs-out`` file: job id -> met, missed or refused."""
    with path.open(newline="") as f:
        return {r["job_id"]: r["outcome"] for r in csv.DictReader(f) if r["kind"] == "strict"}


def join(chronus: Mapping[str, str], gpupool: Mapping[str, str]) -> dict[str, object]:
    """Counts of each (Chronus, gpupool) outcome pair over the strict jobs both ran, and the disagreements."""
    common = sorted(set(chronus) & set(gpupool), key=_key)
    pairs = Counter((chronus[j], gpupool[j]) for j in common)

    def ids(c: str, g: Iterable[str]) -> list[str]:
        return [j for j in common if chronus[j] == c and gpupool[j] in set(g)]

    worse = {g: ids(MET, [g]) for g in (REFUSED, MISSED)}
    better = ids(MISSED, [MET])
    n = len(common)
    return {
        "strict_jobs": n,
        "only_in_artifact": len(set(chronus) - set(gpupool)),
        "only_in_gpupool": len(set(gpupool) - set(chronus)),
        "artifact_met": sum(1 for j in common if chronus[j] == MET),
        "gpupool_met": sum(1 for j in common if gpupool[j] == MET),
        "artifact_met_ratio": round(sum(1 for j in common if chronus[j] == MET) / n, 4) if n else None,
        "gpupool_met_ratio": round(sum(1 for j in common if gpupool[j] == MET) / n, 4) if n else None,
        "pairs": {f"{c}/{g}": k for (c, g), k in sorted(pairs.items())},
        "artifact_met_gpupool_refused": len(worse[REFUSED]),
        "artifact_met_gpupool_missed": len(worse[MISSED]),
        "gpupool_met_artifact_missed": len(better),
        "ids_artifact_met_gpupool_refused": worse[REFUSED][:SHOWN],
        "ids_artifact_met_gpupool_missed": worse[MISSED][:SHOWN],
        "ids_gpupool_met_artifact_missed": better[:SHOWN],
    }


def _key(job_id: str) -> tuple[int, str]:
    return (int(job_id), "") if job_id.isdigit() else (1 << 62, job_id)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("artifact_csv", type=Path)
    ap.add_argument("gpupool_csv", type=Path, nargs="+")
    args = ap.parse_args(argv)
    chronus = artifact_outcomes(args.artifact_csv)
    for path in args.gpupool_csv:
        print(json.dumps({"gpupool": path.name, **join(chronus, gpupool_outcomes(path))}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
