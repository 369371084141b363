"""docs/jobs.md and docs/slurm.md say what the code does: every job file on the page is valid for the
published schema and for the server's model, the field table names every field the schema has, the rate
card parses, and the Slurm page's script reads as the job it describes."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema_rs
import pytest
import yaml

from gpupool.client.jobfile import JobFileLoader, job_schema, parse_jobs_text
from gpupool.domain.rates import parse_rate_card
from gpupool.domain.sbatch import parse_script

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.M | re.S)


def blocks(page: str, lang: str) -> list[str]:
    return [body for kind, body in BLOCK.findall((DOCS / page).read_text()) if kind == lang]


JOB_FILES = [b for b in blocks("jobs.md", "yaml") if not b.startswith("# rates.yaml")]


def test_the_page_has_job_files_and_a_pipeline() -> None:
    assert len(JOB_FILES) >= 5 and any(b.startswith("# pipeline.yaml") for b in JOB_FILES)


@pytest.mark.parametrize("text", JOB_FILES, ids=[t.splitlines()[0] for t in JOB_FILES])
def test_every_job_file_on_the_page_is_valid(text: str) -> None:
    doc = yaml.load(text, Loader=JobFileLoader)  # YAML 1.2, as editors read it
    validator = jsonschema_rs.validator_for(job_schema())
    for job in doc["jobs"].values() if "jobs" in doc else [doc]:  # a pipeline's jobs, or the one job
        validator.validate(job)
    assert parse_jobs_text(text, "docs/jobs.md")


def test_the_field_table_names_every_field() -> None:
    table = (DOCS / "jobs.md").read_text().split("## Fields", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"^\| `([a-z_]+)`(?:, `([a-z_]+)`)*", table, re.M))
    listed = {n for row in named for n in row if n} | set(re.findall(r"`([a-z_]+)`", table))
    assert set(job_schema()["properties"]) <= listed, set(job_schema()["properties"]) - listed


def test_the_rate_card_parses() -> None:
    (card,) = [b for b in blocks("jobs.md", "yaml") if b.startswith("# rates.yaml")]
    rates = parse_rate_card(yaml.safe_load(card), "docs/jobs.md")
    assert rates.price("H100", "research") == 2.0 and rates.price("A100", "spot") == 0.5


def test_the_slurm_page_script_reads_as_described() -> None:
    (script,) = [b for b in blocks("slurm.md", "bash") if b.startswith("#!")]
    o = parse_script(script, "docs/slurm.md").options
    assert (o.nodes, o.ntasks_per_node, o.gpus_per_node, o.time_s) == (2, 8, 8, 86400.0)
    assert (o.signal_lead_s, o.partition, o.qos, o.output) == (300.0, "research", "high", "logs/%x-%j.out")
