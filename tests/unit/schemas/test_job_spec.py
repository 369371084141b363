"""The job spec (issue 16): its version, human units, unknown fields refused with their path and line, and
the published JSON Schema agreeing with the model on what a job file may hold."""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import pytest

from gpupool.client.jobfile import dotted, job_schema, parse_job_text, parse_jobs_text
from gpupool.domain.errors import ParseError
from gpupool.schemas.api import JobSubmit


def test_human_units_and_numbers_read_the_same() -> None:
    human = JobSubmit.model_validate(
        {"command": ["a"], "memory": "64Gi", "time_limit": "1h30m", "signal_lead": "5m", "share": {"memory": "20Gi"}}
    )
    plain = JobSubmit.model_validate(
        {"command": ["a"], "memory_mib": 65536, "time_limit_s": 5400, "signal_lead_s": 300, "share": {"memory": 20480}}
    )
    assert human == plain
    assert (human.memory_mib, human.time_limit_s, human.signal_lead_s) == (65536, 5400.0, 300.0)
    assert JobSubmit.model_validate({"command": ["a"], "time_limit": 90}).time_limit_s == 90.0  # seconds


def test_a_job_without_a_version_is_version_1_and_another_is_refused() -> None:
    assert JobSubmit.model_validate({"command": ["a"]}).version == 1
    with pytest.raises(ParseError, match=r"^job\.yaml:1: version: job spec version 2 is not supported"):
        parse_job_text("version: 2\ncommand: [a]\n", "job.yaml")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("command: [a]\ncolour: red\n", "job.yaml:2: colour: unknown field"),
        ("command: [a]\ntopology:\n  scope: leaf\n  colour: red\n", "job.yaml:4: topology.colour: unknown field"),
        ("command: [a]\nretry:\n  count: 2\n  on:\n    - failure\n    - bogus\n", "job.yaml:6: retry.on[1]: Input"),
        ("command: [a]\n\ntime_limit: 4x\n", "job.yaml:3: time_limit: unknown unit 'x' in duration '4x'"),
        ("command: [a]\nmemory: 64Qi\n", "job.yaml:2: memory: unknown unit 'Qi' in '64Qi'"),
        ("name: x\n", "job.yaml:1: command: required field missing"),
        ("command: [a]\nshare:\n  memory: lots\n", "job.yaml:3: share.memory: 'lots' is not an amount of memory"),
    ],
)
def test_a_bad_field_is_named_by_its_path_and_line(text: str, where: str) -> None:
    with pytest.raises(ParseError) as e:
        parse_job_text(text, "job.yaml")
    assert str(e.value).startswith(where), str(e.value)


def test_yaml_1_1_booleans_are_words() -> None:
    """``on:`` is a key (retry.on), not True; ``name: no`` is the text 'no'."""
    job = parse_job_text("command: [a]\nname: no\nretry:\n  count: 1\n  on: [preemption]\n", "job.yaml")
    assert job.name == "no" and job.retry is not None and job.retry.on == ["preemption"]


def test_dotted_paths() -> None:
    assert dotted(("retry", "on", 1)) == "retry.on[1]"
    assert dotted(("command", 0)) == "command[0]"


GOOD: list[dict[str, Any]] = [
    {"command": ["a"]},
    {"version": 1, "command": ["a", "b"], "memory": "64Gi", "time_limit": "4h", "tasks": 2, "priority": "high"},
    {"command": ["a"], "memory": 512, "time_limit": 3600, "retry": {"count": 2, "on": ["failure"]}},
    {"command": ["a"], "array": "0-19%4", "after": [{"kind": "afterok", "jobs": ["j-1"]}], "share": {"milli_gpu": 500}},
]
BAD: list[dict[str, Any]] = [
    {},
    {"command": ["a"], "colour": "red"},
    {"command": ["a"], "version": 2},
    {"command": ["a"], "memory": -1},
    {"command": ["a"], "memory": "lots"},
    {"command": ["a"], "time_limit": "4x"},
    {"command": ["a"], "topology": {"scope": "rack"}},
    {"command": ["a"], "retry": {"count": 1, "on": ["bogus"]}},
]


@pytest.mark.parametrize("doc", GOOD)
def test_the_schema_accepts_what_the_model_accepts(doc: dict[str, Any]) -> None:
    JobSubmit.model_validate(doc)
    jsonschema_rs.validator_for(job_schema()).validate(doc)


@pytest.mark.parametrize("doc", BAD)
def test_the_schema_refuses_what_the_model_refuses(doc: dict[str, Any]) -> None:
    with pytest.raises(ValueError):  # pydantic's ValidationError is a ValueError
        JobSubmit.model_validate(doc)
    assert not jsonschema_rs.validator_for(job_schema()).is_valid(doc)


def test_the_schema_is_draft_2020_12_and_closed() -> None:
    s = job_schema()
    assert s["$schema"].endswith("2020-12/schema") and s["additionalProperties"] is False
    assert {"version", "memory", "time_limit", "command"} <= set(s["properties"])
    jsonschema_rs.Draft202012Validator(s)  # a valid schema


PIPELINE = """version: 1
jobs:
  train:
    command: [python, train.py]
    gpus_per_task: 8
    after:
      - {kind: afterok, jobs: [prep, j-stored]}
  prep:
    command: [python, prep.py]
  eval:
    command: [python, eval.py]
    after: [{kind: afterany, jobs: [train]}]
"""


def test_a_pipeline_is_read_in_an_order_that_submits_each_after_those_it_names() -> None:
    jobs = parse_jobs_text(PIPELINE, "p.yaml")
    assert [n for n, _ in jobs] == ["prep", "train", "eval"]
    assert jobs[1][1].after[0].jobs == ["prep", "j-stored"]  # the names; the CLI puts the ids in
    assert [n for n, _ in parse_jobs_text("command: [a]\n", "j.yaml")] == [""]  # one job: unnamed


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            PIPELINE.replace(
                "    command: [python, prep.py]", "    command: [a]\n    after: [{kind: after, jobs: [eval]}]"
            ),
            "p.yaml:6: dependency cycle: train -> prep -> eval -> train",
        ),
        (
            "jobs:\n  a:\n    command: [a]\n    after:\n      - {kind: afterok, jobs: [a]}\n",
            "p.yaml:4: dependency cycle: a -> a",
        ),
        ("jobs:\n  a:\n    command: [a]\n    memory: 4Qi\n", "p.yaml:4: jobs.a.memory: unknown unit 'Qi'"),
        (
            "jobs:\n  a:\n    command: [a]\nname: x\n",
            "p.yaml:4: name: unknown field (a pipeline has version: and jobs:)",
        ),
        ("version: 3\njobs:\n  a:\n    command: [a]\n", "p.yaml:1: version: job spec version 3 is not supported"),
        ("jobs:\n  a: [x]\n", "p.yaml:2: jobs.a: a job file is a mapping"),
    ],
)
def test_a_bad_pipeline_names_the_problem_and_its_line(text: str, where: str) -> None:
    with pytest.raises(ParseError) as e:
        parse_jobs_text(text, "p.yaml")
    assert str(e.value).startswith(where), str(e.value)
