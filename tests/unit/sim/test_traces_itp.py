"""ITP raw and ElasticFlow loaders on small self-made samples (same columns as the public files)."""

from pathlib import Path

import pytest

from gpupool.domain.errors import ParseError
from gpupool.sim.traces import DeadlineKind, load_trace

RAW = """job_id,submission_time,duration,num_gpu
a,1000,600,1
b,1500,3600.5,8
c,1200,700,0
"""

ELASTIC = """job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration
a,1000,42613,vgg16,2500,128,1,1200
b,1100,50266,gpt2,9000,32,4,5000
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_itp_maps_columns_and_shifts_first_submission_to_zero(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, "cluster99.csv", RAW), "itp")
    assert (trace.name, trace.format, trace.origin_s) == ("cluster99", "itp", 1000.0)
    assert [(j.job_id, j.submit_s, j.duration_s, j.gpus) for j in trace.jobs] == [
        ("a", 0.0, 600.0, 1),
        ("c", 200.0, 700.0, 0),  # sorted by submission, not file order
        ("b", 500.0, 3600.5, 8),
    ]
    b = trace.jobs[2]
    assert (b.tasks, b.gpus_per_task, b.gpu_milli, b.kind, b.deadline_kind) == (
        1,
        8,
        1000,
        "training",
        DeadlineKind.NONE,
    )
    assert trace.bad_rows == ()


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("d,1300,abc,1", "duration is not a number"),
        ("d,1300,60,-2", "negative GPU count"),
        ("d,1300,60,1.5", "num_gpu is not a whole number"),
        ("d,1300,-5,1", "negative or not finite"),
        ("d,1300,60", "missing column 'num_gpu'"),
        ("d,1300,60,1,extra", "more fields than the header"),
        ("d,,60,1", "empty submission_time"),
        ("d,1300,inf,1", "not a finite number"),
        ("a,1300,60,1", "duplicate id 'a'"),
    ],
)
def test_itp_bad_row_raises_with_its_line(tmp_path: Path, row: str, reason: str) -> None:
    path = write(tmp_path, "c.csv", RAW + row + "\n")
    with pytest.raises(ParseError) as err:
        load_trace(path, "itp")
    assert err.value.line == 5
    assert err.value.source == str(path)
    assert reason in err.value.reason
    assert f"{path}:5" in str(err.value)


def test_itp_skip_mode_records_bad_rows_and_keeps_loading(tmp_path: Path) -> None:
    text = RAW + "d,1300,abc,1\n\ne,1400,60,2\nf,1400,60,-1\n"
    trace = load_trace(write(tmp_path, "c.csv", text), "itp", skip_bad_rows=True)
    assert [j.job_id for j in trace.jobs] == ["a", "c", "e", "b"]
    assert [(b.line, "not a number" in b.reason or "negative" in b.reason) for b in trace.bad_rows] == [
        (5, True),
        (8, True),  # line 6 is blank and skipped silently; numbering still counts it
    ]


def test_itp_limit_keeps_first_good_rows(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, "c.csv", RAW), "itp", limit=2)
    assert sorted(j.job_id for j in trace.jobs) == ["a", "b"]
    assert trace.jobs[0].submit_s == 0.0


def test_elasticflow_deadline_is_absolute_and_shifted_with_submission(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, "cluster05.csv", ELASTIC), "elasticflow")
    a, b = trace.jobs
    assert (a.job_id, a.submit_s, a.duration_s, a.gpus, a.deadline_s) == ("a", 0.0, 1200.0, 1, 1500.0)
    assert (b.submit_s, b.duration_s, b.gpus, b.deadline_s, b.model_name) == (100.0, 5000.0, 4, 8000.0, "gpt2")
    assert a.deadline_kind is DeadlineKind.STRICT and a.model_name == "vgg16"


def test_elasticflow_deadline_before_submission_is_bad(tmp_path: Path) -> None:
    path = write(tmp_path, "c.csv", ELASTIC + "c,5000,1,bert,4000,8,1,60\n")
    with pytest.raises(ParseError, match="before submission") as err:
        load_trace(path, "elasticflow")
    assert err.value.line == 4
    skipped = load_trace(path, "elasticflow", skip_bad_rows=True)
    assert len(skipped.jobs) == 2 and [b.line for b in skipped.bad_rows] == [4]


def test_elasticflow_needs_its_deadline_column(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match=r"header lacks column.*deadline") as err:
        load_trace(write(tmp_path, "c.csv", RAW), "elasticflow")
    assert err.value.line == 1


def test_elasticflow_jobs_are_elastic_by_their_models_curve_and_cap(tmp_path: Path) -> None:
    """vgg16 at batch 128 may run at 1..64 GPUs (ElasticFlow's A100 cap); gpt2 at batch 32 has no curve in the
    artifact, so that job stays rigid; without a batch_size column every job is rigid."""
    a, b = load_trace(write(tmp_path, "cluster05.csv", ELASTIC), "elasticflow").jobs
    assert a.elastic is not None and a.elastic.curve.name == "vgg16@128"
    assert (a.elastic.min_gpus, a.elastic.max_gpus, a.elastic.sizes()) == (1, 64, (1, 2, 4, 8, 16, 32, 64))
    assert b.elastic is None
    no_batch = ELASTIC.replace(",batch_size,", ",batch,")
    assert all(j.elastic is None for j in load_trace(write(tmp_path, "c.csv", no_batch), "elasticflow").jobs)
