"""The job-by-job join of Chronus' artifact and gpupool (benchmarks/chronus_join.py, sim_chronus --jobs-out)."""

from __future__ import annotations

import csv
import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from gpupool.sim.traces import DeadlineKind
from gpupool.sim.world import JobRecord

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"

ARTIFACT_HEADER = (
    "job_id,pending_time,total_executed_time,progress,submit_time,end_time,preempt,resume,num_gpu,expect_time,"
    "expect_time_list,expect_value_list,miss_ddl,gt_miss_ddl,gt_expect_time,best_effort,duration,queue_priority\n"
)


@functools.cache
def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _artifact_row(job_id: int, submit: int, end: float, deadline: int, miss: float, best: int = 0) -> str:
    return f"{job_id},0,0,0,{submit},{end},0,0,1,{deadline},{deadline},10,{miss},{miss},{deadline},{best},10,0\n"


def _record(job_id: str, start: float | None, end: float | None, deadline: float | None) -> JobRecord:
    kind = DeadlineKind.STRICT if deadline is not None else DeadlineKind.BEST_EFFORT
    return JobRecord(job_id, "t", "batch", 0.0, start, end, 10.0, 1.0, 1, 1, 0, 0.0, 1.0, deadline, kind)


def test_join_counts_each_disagreement_both_ways(tmp_path: Path) -> None:
    join = _load("chronus_join")
    chronus = _load("sim_chronus")
    artifact = tmp_path / "time-aware-with-lease.csv"
    artifact.write_text(
        ARTIFACT_HEADER
        + _artifact_row(1, 10, 30.0, 20, 0)  # met (end 30 <= 10 + 20)
        + _artifact_row(2, 10, 30.5, 20, 1)  # missed by half a second
        + _artifact_row(3, 10, 25.0, 20, 0)  # met
        + _artifact_row(4, 10, 25.0, 20, 0)  # met
        + _artifact_row(5, 10, 99.0, 20, 0, best=1)  # best effort: no outcome
        + _artifact_row(6, 10, 20.0, 20, 0),  # met, not in gpupool's file
        encoding="utf-8",
    )
    records = (
        _record("1", None, None, 29.0),  # refused where Chronus met it
        _record("2", 9.0, 19.0, 29.0),  # met where Chronus missed it
        _record("3", 20.0, 30.0, 29.0),  # missed by one second where Chronus met it
        _record("4", 9.0, 19.0, 29.0),  # both met
        _record("5", 9.0, 19.0, None),
    )
    out = tmp_path / "default.csv"
    chronus.write_jobs(SimpleNamespace(records=records), out)  # it reads the records only
    with out.open(newline="") as f:
        assert [r["outcome"] for r in csv.DictReader(f)] == ["refused", "met", "missed", "met", ""]

    got = join.join(join.artifact_outcomes(artifact), join.gpupool_outcomes(out))
    assert got["strict_jobs"] == 4 and got["only_in_artifact"] == 1 and got["only_in_gpupool"] == 0
    assert (got["artifact_met"], got["gpupool_met"]) == (3, 2)
    assert got["pairs"] == {"met/met": 1, "met/missed": 1, "met/refused": 1, "missed/met": 1}
    assert got["ids_artifact_met_gpupool_refused"] == ["1"]
    assert got["ids_artifact_met_gpupool_missed"] == ["3"]
    assert got["ids_gpupool_met_artifact_missed"] == ["2"]


def test_artifact_file_whose_miss_flag_disagrees_with_its_times_is_refused(tmp_path: Path) -> None:
    join = _load("chronus_join")
    artifact = tmp_path / "a.csv"
    artifact.write_text(ARTIFACT_HEADER + _artifact_row(1, 10, 31.0, 20, 0), encoding="utf-8")
    with pytest.raises(ValueError, match="disagrees with miss_ddl"):
        join.artifact_outcomes(artifact)
