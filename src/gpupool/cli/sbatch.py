"""``gpupool sbatch [OPTIONS] script.sh [ARGS]``: a Slurm batch script submitted as a gpupool job.

The script's ``#SBATCH`` lines and the options before its name are read by ``domain.sbatch`` (the command
line wins). The job runs the script in every task, as ``srun`` would (there is no separate batch step), from
the submit directory when the node has it, with its output appended to Slurm's ``slurm-%j.out`` (or
``--output``/``--error``), and with the ``SLURM_*`` variables beside gpupool's own.

The script travels in the job's command: no shared file system is needed. On the node a small ``sh`` prelude
writes it to a temporary file, opens it, removes the file and runs the script's ``#!`` interpreter on the open
descriptor (``/dev/fd/3``), so nothing is left behind and the interpreter is the process the signals reach.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from gpupool.cli.client_cmds import _client
from gpupool.client import ApiError
from gpupool.client.textfile import read_text
from gpupool.domain.errors import InputError
from gpupool.domain.sbatch import BatchScript, SbatchOptions, output_path_shell, parse_options, parse_script
from gpupool.schemas.api import JobSubmit

PRELUDE = """s=$1; shift
f=$(mktemp) && printf '%s' "$s" >"$f" && exec 3<"$f" && rm -f "$f" || {
  echo 'gpupool sbatch: cannot stage the batch script in a temporary file' >&2; exit 1; }
unset s f
cd "$SLURM_SUBMIT_DIR" 2>/dev/null || cd "${TMPDIR:-/tmp}"
"""
# A job field -> the options that may set it (option field, flag), the first one given named when the API
# refuses the field's value, with its line.
_OPTION_OF_FIELD = {
    "array": [("array", "--array")],
    "after": [("dependency", "--dependency")],
    "pool": [("partition", "--partition")],
    "priority": [("qos", "--qos")],
    "name": [("job_name", "--job-name")],
    "tasks": [("ntasks", "--ntasks"), ("nodes", "--nodes"), ("ntasks_per_node", "--ntasks-per-node")],
    "gpus_per_task": [("gpus_per_task", "--gpus-per-task"), ("gpus_per_node", "--gres/--gpus-per-node")],
    "gpu_models": [("gpu_type", "--gres/--gpus-per-node")],
    "time_limit_s": [("time_s", "--time")],
    "time_limit": [("time_s", "--time")],
    "signal_lead_s": [("signal_lead_s", "--signal")],
    "memory_mib": [("mem_mib", "--mem")],
    "memory": [("mem_mib", "--mem")],
    "cpu_millicores": [("cpus_per_task", "--cpus-per-task")],
}


def split_command_line(argv: list[str]) -> tuple[list[str], str, list[str], bool]:
    """sbatch's line: its options, the script, the script's arguments, and whether ``--parsable`` was given.
    Every supported option takes a value: ``--x=v``/``-Xv`` is one word, ``--x v``/``-X v`` two."""
    options: list[str] = []
    parsable = False
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
        word = argv[i]
        if word == "--parsable":
            parsable = True
            i += 1
            continue
        whole = ("=" in word) if word.startswith("--") else len(word) > 2
        options += argv[i : i + (1 if whole else 2)]
        i += 1 if whole else 2
    if i >= len(argv):
        raise InputError("give the batch script to run: gpupool sbatch [OPTIONS] script.sh [ARGS]", source="sbatch")
    return options, argv[i], argv[i + 1 :], parsable


def read_script(path: Path) -> BatchScript:
    return parse_script(read_text(path, "batch script"), str(path))


def _redirects(o: SbatchOptions) -> str:
    """Where the script's output goes: Slurm's defaults (one file for both streams) unless given."""
    default = "slurm-%A_%a.out" if o.array else "slurm-%j.out"
    out = output_path_shell(o.output or default, o.where("output") or "--output")
    if o.error is None:
        return f"exec >>{out} 2>&1\n"
    return f"exec >>{out} 2>>{output_path_shell(o.error, o.where('error'))}\n"


def _layout(o: SbatchOptions) -> tuple[int, int, int]:
    """(tasks, GPUs per task, GPUs per node as asked) of the options: --ntasks or --nodes x
    --ntasks-per-node tasks; --gpus-per-task, or the node's GPUs (--gres, --gpus-per-node) shared out among
    its tasks (one each when nothing says)."""
    per_node = o.ntasks_per_node or 1
    tasks = o.ntasks if o.ntasks is not None else (o.nodes or 1) * per_node
    if o.gpus_per_task is not None:
        if o.gpus_per_node is not None:
            raise InputError(
                "give --gpus-per-task or --gres/--gpus-per-node, not both", source=o.where("gpus_per_task")
            )
        return tasks, o.gpus_per_task, o.gpus_per_task * per_node
    gpus = o.gpus_per_node if o.gpus_per_node is not None else per_node
    if gpus % per_node:
        raise InputError(
            f"{gpus} GPUs per node do not divide among {per_node} tasks per node (gpupool gives each task its own)",
            source=o.where("gpus_per_node") or o.where("ntasks_per_node"),
        )
    return tasks, max(1, gpus // per_node), gpus


def job_fields(script: BatchScript, o: SbatchOptions, args: list[str], name: str, submit_dir: str) -> dict[str, Any]:
    """The job a batch script and its options describe, as the API's job fields."""
    tasks, gpus_per_task, gpus = _layout(o)
    per_node = o.ntasks_per_node or 1
    env = {"SLURM_SUBMIT_DIR": submit_dir, "SLURM_SUBMIT_HOST": socket.gethostname(), "SLURM_GPUS_PER_NODE": str(gpus)}
    if o.cpus_per_task is not None:
        env["SLURM_CPUS_PER_TASK"] = str(o.cpus_per_task)
    prelude = PRELUDE + _redirects(o) + 'exec "$@"\n'
    fields: dict[str, Any] = {
        "command": ["/bin/sh", "-c", prelude, "gpupool-sbatch", script.text, *script.interpreter, "/dev/fd/3", *args],
        "env": env,
        "name": o.job_name or name,
        "tasks": tasks,
        "gpus_per_task": gpus_per_task,
        "slurm_env": True,
        "pool": o.partition,
        "priority": o.qos,
        "gpu_models": [o.gpu_type] if o.gpu_type else None,
        "cpu_millicores": None if o.cpus_per_task is None else 1000 * o.cpus_per_task,
        "memory_mib": None if o.mem_mib is None else o.mem_mib // per_node,
        "time_limit_s": o.time_s,
        "signal_lead_s": o.signal_lead_s,
        "array": o.array,
        "after": None if o.dependency is None else [{"kind": k, "jobs": list(ids)} for k, ids in o.dependency],
    }
    return {k: v for k, v in fields.items() if v is not None}


def _refused(message: str, field: str, o: SbatchOptions) -> InputError:
    given = [(o.where(name), flag) for name, flag in _OPTION_OF_FIELD.get(field, []) if o.where(name)]
    where, flag = given[0] if given else ("sbatch", field)
    return InputError(f"{flag}: {message}", source=where)


def _check(fields: dict[str, Any], o: SbatchOptions) -> JobSubmit:
    try:
        return JobSubmit.model_validate(fields)
    except ValidationError as e:
        err = e.errors()[0]
        loc = [str(x) for x in err["loc"]]
        raise _refused(f"{err['msg']} (got {err.get('input')!r})", loc[0] if loc else "", o) from None


def sbatch(
    argv: Annotated[
        list[str] | None,
        typer.Argument(help="sbatch options, the script, its arguments (docs/slurm.md)", show_default=False),
    ] = None,
) -> None:
    """Submit a Slurm batch script: its #SBATCH lines (and sbatch options before it) as a gpupool job."""
    line_options, path, args, parsable = split_command_line(list(argv or []))
    script = read_script(Path(path))
    options = parse_options(line_options, "command line").over(script.options)
    job = _check(job_fields(script, options, args, Path(path).name, os.getcwd()), options)
    with _client() as c:
        try:
            out = c.submit(job, None)
        except ApiError as e:
            field, sep, rest = str(e).removeprefix(f"{e.status}: ").partition(": ")
            if e.status == 422 and sep and field.startswith("body."):
                raise _refused(rest, field.split(".")[1], options) from None
            raise
    job_id = out.array_id or out.job.id
    if parsable:
        typer.echo(job_id)
    elif out.array_id is not None:
        typer.echo(f"Submitted batch job {job_id} (an array of {out.jobs})")
    else:
        typer.echo(f"Submitted batch job {job_id}")
