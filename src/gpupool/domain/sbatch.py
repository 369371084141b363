"""Slurm batch scripts: the ``#SBATCH`` lines of a script and sbatch's command-line options, read as sbatch
reads them, into the options gpupool supports. Pure: text in, values out; ``gpupool sbatch`` (cli/sbatch.py)
turns them into a job.

As sbatch does, options are read from the ``#SBATCH`` lines before the first line that is neither a comment
nor blank; later ``#SBATCH`` lines are plain comments. Options given on the command line win over the
script's. An option gpupool does not support is an error naming it and its line, never silently ignored.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from gpupool.domain.dependencies import parse_dependency
from gpupool.domain.errors import InputError
from gpupool.domain.units import parse_memory_mib, parse_slurm_time

# The checkpoint signal gpupool sends (the agent's SIGUSR1); --signal may name it, no other.
CHECKPOINT_SIGNALS = ("USR1", "SIGUSR1", "10")
PRIORITIES = ("best_effort", "batch", "normal", "high", "realtime")


@dataclass(frozen=True, slots=True)
class SbatchOptions:
    """What the supported options say; None where nothing said it. ``lines``: option field -> where it was
    given (``script.sh:3`` or ``command line``), for errors the server finds later (an array too large)."""

    job_name: str | None = None
    nodes: int | None = None
    ntasks_per_node: int | None = None
    ntasks: int | None = None
    gpus_per_node: int | None = None
    gpus_per_task: int | None = None
    gpu_type: str | None = None
    cpus_per_task: int | None = None
    mem_mib: int | None = None  # per node, as Slurm's --mem
    time_s: float | None = None
    array: str | None = None
    dependency: tuple[tuple[str, tuple[str, ...]], ...] | None = None  # (kind, ids) items, all must be met
    output: str | None = None
    error: str | None = None
    partition: str | None = None
    qos: str | None = None
    signal_lead_s: float | None = None
    lines: tuple[tuple[str, str], ...] = field(default=())

    def where(self, name: str) -> str:
        return dict(self.lines).get(name, "")

    def over(self, base: SbatchOptions) -> SbatchOptions:
        """These options over ``base``: each one given here wins, as sbatch's command line over the script."""
        given = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "lines"}
        kept = {k: v for k, v in given.items() if v is not None}
        return replace(base, **kept, lines=tuple({**dict(base.lines), **dict(self.lines)}.items()))


@dataclass(frozen=True, slots=True)
class BatchScript:
    """A batch script: its text, the interpreter its ``#!`` line names (argv), and its options."""

    text: str
    interpreter: tuple[str, ...]
    options: SbatchOptions


def _positive(name: str) -> Callable[[str, str], int]:
    def read(value: str, where: str) -> int:
        if not value.isdigit() or int(value) < 1:
            raise InputError(f"{name} must be a whole number >= 1, got {value!r}", source=where)
        return int(value)

    return read


def _nodes(value: str, where: str) -> int:
    if "-" in value or "," in value:
        raise InputError(f"--nodes={value}: a range of node counts is not supported; give one number", source=where)
    return _positive("--nodes")(value, where)


def _gpus(value: str, where: str, option: str) -> tuple[str | None, int]:
    """``[gpu:][TYPE:]N`` (``--gres``) or ``[TYPE:]N`` (``--gpus-per-node``) as (type, count)."""
    parts = value.split(":")
    if option == "--gres":
        if parts[0] != "gpu" or len(parts) not in (2, 3) or "," in value:
            raise InputError(f"--gres={value}: only gpu:N or gpu:TYPE:N is supported", source=where)
        parts = parts[1:]
    if len(parts) > 2:
        raise InputError(f"{option}={value} is not [TYPE:]N", source=where)
    return (parts[0] if len(parts) == 2 else None), _positive(option)(parts[-1], where)


def _signal(value: str, where: str) -> float:
    """``[{R|B}:]SIG[@seconds]`` as the checkpoint signal's lead; only SIGUSR1 (what gpupool sends)."""
    m = re.fullmatch(r"(?:([RB]{1,2}):)?([A-Za-z0-9]+)(?:@(\d+))?", value)
    if m is None:
        raise InputError(f"--signal={value} is not [{{R|B}}:]SIG[@seconds]", source=where)
    if m.group(2).upper() not in CHECKPOINT_SIGNALS:
        raise InputError(f"--signal={value}: gpupool sends SIGUSR1 before the time limit; only USR1", source=where)
    return float(m.group(3) or 60)  # Slurm's default lead is 60 s


def _qos(value: str, where: str) -> str:
    if value not in PRIORITIES:
        raise InputError(f"--qos={value}: a QOS is one of gpupool's priorities: {', '.join(PRIORITIES)}", source=where)
    return value


def _dependency(value: str, where: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((kind.value, ids) for kind, ids in parse_dependency(value, where))


def _text(value: str, where: str) -> str:
    if not value:
        raise InputError("an empty value", source=where)
    return value


def _gpus_field(option: str) -> Callable[[str, str], tuple[str | None, int]]:
    return lambda v, w: _gpus(v, w, option)


# long name -> (short letter, field, reader). sbatch also takes a unique prefix of a long name; gpupool takes
# the names written out.
_OPTIONS: dict[str, tuple[str, str, Callable[[str, str], Any]]] = {
    "job-name": ("J", "job_name", _text),
    "nodes": ("N", "nodes", _nodes),
    "ntasks-per-node": ("", "ntasks_per_node", _positive("--ntasks-per-node")),
    "ntasks": ("n", "ntasks", _positive("--ntasks")),
    "gpus-per-task": ("", "gpus_per_task", _gpus_field("--gpus-per-task")),
    "gres": ("", "gpus_per_node", _gpus_field("--gres")),
    "gpus-per-node": ("", "gpus_per_node", _gpus_field("--gpus-per-node")),
    "cpus-per-task": ("c", "cpus_per_task", _positive("--cpus-per-task")),
    "mem": ("", "mem_mib", lambda v, w: parse_memory_mib(v, w)),
    "time": ("t", "time_s", lambda v, w: parse_slurm_time(v, w)),
    "array": ("a", "array", _text),
    "dependency": ("d", "dependency", _dependency),
    "output": ("o", "output", _text),
    "error": ("e", "error", _text),
    "partition": ("p", "partition", _text),
    "qos": ("q", "qos", _qos),
    "signal": ("", "signal_lead_s", _signal),
}
_SHORT = {short: long for long, (short, _, _) in _OPTIONS.items() if short}


def _split(token: str, rest: list[str], where: str) -> tuple[str, str]:
    """One option token (and the next one when it holds its value) as (long name, value)."""
    if token.startswith("--"):
        name, eq, value = token[2:].partition("=")
        if name not in _OPTIONS:
            raise InputError(f"sbatch option --{name} is not supported by gpupool sbatch", source=where)
        if not eq:
            if not rest:
                raise InputError(f"--{name} needs a value", source=where)
            value = rest.pop(0)
        return name, value
    if token.startswith("-") and len(token) >= 2:
        long = _SHORT.get(token[1])
        if long is None:
            raise InputError(f"sbatch option {token[:2]} is not supported by gpupool sbatch", source=where)
        value = token[2:].removeprefix("=")
        if not value:
            if not rest:
                raise InputError(f"{token} needs a value", source=where)
            value = rest.pop(0)
        return long, value
    raise InputError(f"{token!r} is not an option (--name=value or -X value)", source=where)


def parse_options(tokens: Sequence[str], where: str) -> SbatchOptions:
    """sbatch options (already split into words) as SbatchOptions; ``where`` names them in errors."""
    rest = list(tokens)
    values: dict[str, Any] = {}
    lines: dict[str, str] = {}
    while rest:
        long, value = _split(rest.pop(0), rest, where)
        _, name, read = _OPTIONS[long]
        try:
            got = read(value, where)
        except InputError as e:
            if e.reason.startswith("--"):
                raise
            raise InputError(f"--{long}={value}: {e.reason}", source=where) from None
        if name in ("gpus_per_node", "gpus_per_task"):  # [TYPE:]N
            gpu_type, got = got
            if gpu_type is not None:
                values["gpu_type"], lines["gpu_type"] = gpu_type, where
        values[name] = got
        lines[name] = where
    return SbatchOptions(**values, lines=tuple(lines.items()))


def parse_script(text: str, source: str) -> BatchScript:
    """A batch script's ``#!`` interpreter and the options of its ``#SBATCH`` lines (those before the first
    line that is neither blank nor a comment). Errors name ``source`` and the line."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("#!") or not lines[0][2:].strip():
        raise InputError("a batch script starts with #! and its interpreter (#!/bin/bash)", source=source, line=1)
    interpreter = tuple(lines[0][2:].split())
    options = SbatchOptions()
    for n, raw in enumerate(lines[1:], start=2):
        line = raw.strip()
        if line and not line.startswith("#"):
            break  # sbatch stops reading options at the first command
        if not re.match(r"#SBATCH(\s|$)", line):
            if re.match(r"#\s*SBATCH", line, re.IGNORECASE):
                raise InputError(
                    f"{line!r} is not an #SBATCH line (write '#SBATCH --option=value')", source=source, line=n
                )
            continue
        where = f"{source}:{n}"
        try:
            tokens = shlex.split(line[len("#SBATCH") :], comments=True)
        except ValueError as e:
            raise InputError(f"malformed #SBATCH line: {e}", source=where) from None
        if not tokens:
            raise InputError("an #SBATCH line without an option", source=where)
        options = parse_options(tokens, where).over(options)
    return BatchScript(text, interpreter, options)


# Output file names: Slurm's replacement symbols, each as the shell variable that holds its value at launch.
_SYMBOLS = {
    "j": "${SLURM_JOB_ID}",
    "A": "${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}",
    "a": "${SLURM_ARRAY_TASK_ID:-4294967294}",  # Slurm's NO_VAL for a job that is not an array element
    "x": "${SLURM_JOB_NAME}",
    "u": "${USER:-$(id -un)}",
    "N": "$(hostname -s)",
    "n": "${SLURM_NODEID}",
    "t": "${SLURM_PROCID}",
}


def output_path_shell(pattern: str, where: str) -> str:
    """A POSIX shell word that expands to ``pattern`` with Slurm's ``%j %A %a %x %u %N %n %t %%`` replaced
    (zero-padding such as ``%4a`` is not supported); the literal parts are quoted."""
    out: list[str] = []
    literal = ""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c != "%":
            literal += c
            i += 1
            continue
        nxt = pattern[i + 1 : i + 2]
        if nxt == "%":
            literal += "%"
        elif nxt in _SYMBOLS:
            out += [shlex.quote(literal)] if literal else []
            out.append(f'"{_SYMBOLS[nxt]}"')
            literal = ""
        else:
            raise InputError(
                f"%{nxt} in {pattern!r} is not supported (supported: %j %A %a %x %u %N %n %t %%)", source=where
            )
        i += 2
    if literal:
        out.append(shlex.quote(literal))
    return "".join(out)
