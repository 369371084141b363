"""``gpupool sbatch`` against a real server: a script's options become the job's fields; bad input (a
malformed #SBATCH line, an unsupported option, an array over the server's maximum, a dependency on a job not
stored, a time in an unknown unit) is exit code 2 and one line naming the problem and its line, nothing stored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_server import cli_server, run, tenant_token

from gpupool.cli.sbatch import job_fields
from gpupool.domain.sbatch import parse_script

MAX_ARRAY = 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with cli_server(tmp_path_factory.mktemp("srv"), max_array_size=MAX_ARRAY) as url:
        yield url, tenant_token(url, "team-a")


def stored(url: str, token: str) -> list[dict[str, object]]:
    code, out, err = run(url, token, "jobs", "--all", "--format", "json")
    assert code == 0, err
    return list(json.loads(out))


def test_a_script_becomes_a_job_and_the_command_line_wins(server: tuple[str, str], tmp_path: Path) -> None:
    url, token = server
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N 2 --ntasks-per-node=2\n#SBATCH --gres=gpu:8 -t 2:00:00 --qos=high\n")
    code, out, err = run(url, token, "sbatch", "-J", "mine", "--time=30", str(script), cwd=tmp_path)
    assert code == 0, err
    assert out.startswith("Submitted batch job j-"), out
    code, out, err = run(url, token, "job", out.split()[-1], "--format", "json")
    job = json.loads(out)
    assert (job["name"], job["tasks"], job["gpus_per_task"], job["priority"]) == ("mine", 4, 4, "high")
    assert job["time_limit_s"] == 1800.0


@pytest.mark.parametrize(
    ("lines", "tasks", "gpus", "models"),
    [
        ("", 1, 1, None),
        ("#SBATCH -N 2 --ntasks-per-node=4 --gres=gpu:8\n", 8, 2, None),
        ("#SBATCH -n 4 --gpus-per-task=h100:2\n", 4, 2, ["h100"]),
        ("#SBATCH --nodes=3 --gpus-per-node=a100:8\n", 3, 8, ["a100"]),
    ],
)
def test_tasks_and_gpus_from_the_options(lines: str, tasks: int, gpus: int, models: list[str] | None) -> None:
    script = parse_script("#!/bin/sh\n" + lines, "job.sh")
    fields = job_fields(script, script.options, [], "job.sh", "/tmp")
    assert (fields["tasks"], fields["gpus_per_task"], fields.get("gpu_models")) == (tasks, gpus, models)


@pytest.mark.parametrize(
    ("lines", "args", "needle"),
    [
        ("#SBATCH --job-name='x\n", [], "job.sh:3: malformed #SBATCH line: No closing quotation"),
        ("#SBATCH --exclusive=user\n", [], "job.sh:3: sbatch option --exclusive is not supported"),
        (f"#SBATCH --array=0-{MAX_ARRAY}\n", [], f"job.sh:3: --array: array '0-{MAX_ARRAY}' has more than the"),
        ("#SBATCH -d afterok:j-nope\n", [], "job.sh:3: --dependency: job 'j-nope' is not stored"),
        ("#SBATCH --time=90\n", ["--time=4h"], "command line: --time=4h: '4h' is not a Slurm time"),
        ("#SBATCH --gres=gpu:3 --ntasks-per-node=2\n", [], "job.sh:3: 3 GPUs per node do not divide among 2"),
        ("#SBATCH --gpus-per-task=65\n", [], "job.sh:3: --gpus-per-task: Input should be less than or equal to 64"),
        ("#SBATCH --gpus-per-task=2 --gres=gpu:8\n", [], "job.sh:3: give --gpus-per-task or --gres"),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_stored(
    server: tuple[str, str], tmp_path: Path, lines: str, args: list[str], needle: str
) -> None:
    url, token = server
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -J bad\n" + lines + "echo hi\n")
    before = stored(url, token)
    code, out, err = run(url, token, "sbatch", *args, str(script), cwd=tmp_path)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (code, out, err)
    assert f"{script}:" in err or "command line" in err
    assert needle in err.replace(f"{tmp_path}/", ""), err
    assert stored(url, token) == before
