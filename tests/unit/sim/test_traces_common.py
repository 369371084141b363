"""What every loader shares: the registry, missing files, encodings, broken CSV, records' own checks."""

from pathlib import Path

import pytest

from gpupool.domain.errors import InputError, JobSpecError, ParseError
from gpupool.sim.traces import LOADERS, DeadlineKind, TraceJob, load_trace


def test_registry_names_every_format() -> None:
    assert set(LOADERS) == {"itp", "elasticflow", "philly", "chronus", "openb", "dlrm", "tiresias", "synthetic"}


def test_unknown_format_is_an_input_error_listing_the_known_ones(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("job_id\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"unknown trace format 'gavel'.*chronus, dlrm") as err:
        load_trace(path, "gavel")
    assert not isinstance(err.value, ParseError)


@pytest.mark.parametrize("fmt", sorted(["itp", "elasticflow", "philly", "chronus", "openb", "dlrm", "tiresias"]))
def test_missing_file_is_an_input_error(tmp_path: Path, fmt: str) -> None:
    with pytest.raises(InputError, match="no such trace file") as err:
        load_trace(tmp_path / "nope.csv", fmt)
    assert err.value.source == str(tmp_path / "nope.csv")


def test_empty_file_names_line_one(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(b"")
    with pytest.raises(ParseError, match="empty file") as err:
        load_trace(path, "itp")
    assert err.value.line == 1


def test_bad_encoding_is_a_bad_row_at_its_own_line(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(b"job_id,submission_time,duration,num_gpu\na,0,60,1\nb\xff\xfe,1,60,1\nc,2,60,1\n")
    with pytest.raises(ParseError, match="not UTF-8") as err:
        load_trace(path, "itp")
    assert err.value.line == 3
    trace = load_trace(path, "itp", skip_bad_rows=True)
    assert [j.job_id for j in trace.jobs] == ["a", "c"]
    assert [(b.source, b.line) for b in trace.bad_rows] == [(str(path), 3)]


def test_row_the_csv_reader_refuses_is_a_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    huge = b"x" * 200_000  # over the csv module's field size limit
    path.write_bytes(b"job_id,submission_time,duration,num_gpu\na,0,60,1\nb," + huge + b",60,1\nc,2,60,1\n")
    with pytest.raises(ParseError, match="not CSV") as err:
        load_trace(path, "itp")
    assert err.value.line == 3
    assert [j.job_id for j in load_trace(path, "itp", skip_bad_rows=True).jobs] == ["a", "c"]


def test_utf8_bom_and_crlf_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes("\ufeffjob_id,submission_time,duration,num_gpu\r\nä,5,60,1\r\n".encode())
    trace = load_trace(path, "itp")
    assert [(j.job_id, j.submit_s) for j in trace.jobs] == [("ä", 0.0)]


def test_negative_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("job_id,submission_time,duration,num_gpu\na,0,60,1\n", encoding="utf-8")
    with pytest.raises(InputError, match="limit"):
        load_trace(path, "itp", limit=-1)
    assert load_trace(path, "itp", limit=0).jobs == ()


def test_trace_job_derives_gpus_per_task_and_checks_itself() -> None:
    assert TraceJob("j", 0.0, 1.0, gpus=16, tasks=2).gpus_per_task == 8
    with pytest.raises(JobSpecError, match="not 2 tasks"):
        TraceJob("j", 0.0, 1.0, gpus=16, tasks=2, gpus_per_task=4)
    with pytest.raises(JobSpecError, match="fractional"):
        TraceJob("j", 0.0, 1.0, gpus=2, gpu_milli=500)
    with pytest.raises(JobSpecError, match="kind"):
        TraceJob("j", 0.0, 1.0, gpus=1, kind="serving")
    with pytest.raises(JobSpecError, match="needs a deadline"):
        TraceJob("j", 0.0, 1.0, gpus=1, deadline_kind=DeadlineKind.STRICT)


def test_shifted_moves_times_and_keeps_every_other_field() -> None:
    job = TraceJob(
        "j",
        100.0,
        50.0,
        gpus=4,
        tasks=2,
        gpu_milli=1000,
        gpu_memory_mib=8192,
        cpu_milli=3000,
        memory_mib=2048,
        gpu_model="H100",
        tenant="t",
        kind="batch",
        deadline_s=400.0,
        deadline_kind=DeadlineKind.SOFT,
        status="done",
        model_name="bert",
    )
    assert job.shifted(0.0) == job
    moved = job.shifted(100.0)
    assert (moved.submit_s, moved.deadline_s) == (0.0, 300.0)
    assert moved == TraceJob(**{**{f: getattr(job, f) for f in job.__slots__}, "submit_s": 0.0, "deadline_s": 300.0})
