"""``gpupool spec``: the job file's published JSON Schema, and a check of job files against it offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gpupool.client import job_schema, read_jobs_file

app = typer.Typer(help="The job spec: its JSON Schema, and a check of job files.", no_args_is_help=True)


@app.command("schema")
def schema() -> None:
    """Print the job file's JSON Schema (draft 2020-12), for editors to validate job files with."""
    typer.echo(json.dumps(job_schema(), indent=2, sort_keys=True))


@app.command("check")
def check(files: Annotated[list[Path], typer.Argument(help="job files (YAML)")]) -> None:
    """Check job or pipeline files as ``gpupool submit -F`` would, without a server: the first problem, with its line."""
    for f in files:
        read_jobs_file(f)
        typer.echo(f"{f}: ok")
