"""Job files: YAML read against the API's job model, each problem named by its field path and its line.

The line comes from the YAML node tree (``yaml.compose``), so a bad ``retry.on[1]`` or an unknown key deep in
``topology`` points at its own line, not at the top-level key that holds it. ``job_schema`` is the published
JSON Schema of the same model (``gpupool spec schema``), for editors to validate job files with.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from gpupool.client.textfile import read_text
from gpupool.domain.dependencies import dependency_order
from gpupool.domain.errors import InputError, ParseError
from gpupool.schemas import api

SCHEMA_ID = "https://gpupool.dev/schemas/job-v1.json"


class JobFileLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML has no type hints here
    """YAML 1.2's booleans: only true and false. PyYAML's 1.1 reading makes ``on``, ``off``, ``yes``, ``no``
    booleans, so ``retry: {on: [failure]}`` became the key True, and ``name: no`` the value False."""


JobFileLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
JobFileLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def job_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a job file: what ``api.JobSubmit`` reads, unknown fields refused."""
    schema = _standard(api.JobSubmit.model_json_schema(mode="validation"))
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}


# pydantic leaves a field's own bounds under its names (gt, le) beside a type whose schema was given whole
# (the human units' number-or-text); they are no JSON Schema keywords, and the parsers check the bounds.
_NOT_KEYWORDS = frozenset({"gt", "ge", "lt", "le"})


def _standard(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _standard(v) for k, v in node.items() if k not in _NOT_KEYWORDS}
    if isinstance(node, list):
        return [_standard(v) for v in node]
    return node


def read_job_file(path: str | Path) -> api.JobSubmit:
    """A YAML job file checked against the API's job model; a bad field is a ParseError naming file and line."""
    return parse_job_text(read_text(path, "job file"), str(path))


def read_jobs_file(path: str | Path) -> list[tuple[str, api.JobSubmit]]:
    """A job file or a pipeline file (``jobs:``), as ``parse_jobs_text`` reads it."""
    return parse_jobs_text(read_text(path, "job file"), str(path))


def _load(text: str, source: str) -> tuple[Any, yaml.Node | None]:
    try:
        data = yaml.load(text, Loader=JobFileLoader)  # JobFileLoader is a SafeLoader
        tree = yaml.compose(text, Loader=JobFileLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ParseError(
            f"not YAML: {getattr(e, 'problem', e)}", source=source, line=None if mark is None else mark.line + 1
        ) from None
    return data, tree


def _job(data: object, tree: yaml.Node | None, at: tuple[str, ...], source: str) -> api.JobSubmit:
    """``data`` (the mapping at ``at`` in the file) as a job; a problem named by its full path and line."""
    if not isinstance(data, dict):
        what = "a job file is a mapping of job fields (command:, gpus_per_task:, ...)"
        raise ParseError(f"{dotted(at)}: {what}" if at else what, source=source, line=line_of(tree, at) or 1)
    try:
        return api.JobSubmit.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = (*at, *err["loc"])
        raise ParseError(describe(err, loc), source=source, line=line_of(tree, loc)) from None


def parse_job_text(text: str, source: str) -> api.JobSubmit:
    data, tree = _load(text, source)
    return _job(data, tree, (), source)


def parse_jobs_text(text: str, source: str) -> list[tuple[str, api.JobSubmit]]:
    """One job (named "") or a pipeline: ``jobs:`` maps names to jobs, and a job's ``after`` may name the
    pipeline's other jobs (any other name is a stored job's id). Returned in an order that submits every job
    after those it names; a cycle is a ParseError naming it (a -> b -> a), at the ``after`` line of its first job."""
    data, tree = _load(text, source)
    if not (isinstance(data, dict) and "jobs" in data):
        return [("", _job(data, tree, (), source))]
    for key in data:
        if key not in ("version", "jobs"):
            raise ParseError(
                f"{key}: unknown field (a pipeline has version: and jobs:)", source=source, line=line_of(tree, (key,))
            )
    version = data.get("version", api.SPEC_VERSION)
    if version != api.SPEC_VERSION:
        raise ParseError(
            f"version: job spec version {version!r} is not supported (this gpupool reads version {api.SPEC_VERSION})",
            source=source,
            line=line_of(tree, ("version",)),
        )
    jobs = data["jobs"]
    if not isinstance(jobs, dict) or not jobs:
        raise ParseError("jobs: a mapping of job names to jobs", source=source, line=line_of(tree, ("jobs",)))
    parsed = {
        str(n): _job(j if not isinstance(j, dict) else {"version": version, **j}, tree, ("jobs", str(n)), source)
        for n, j in jobs.items()
    }
    named = {n: [i for d in job.after for i in d.jobs if i in parsed] for n, job in parsed.items()}
    try:
        order = dependency_order(named)
    except InputError as e:
        raise ParseError(e.reason, source=source, line=line_of(tree, ("jobs", e.source, "after"))) from None
    return [(n, parsed[n]) for n in order]


def describe(err: ErrorDetails, loc: Sequence[int | str] | None = None) -> str:
    """One validation error as a sentence that starts with the field's path (``loc``, else the error's)."""
    path = dotted(err["loc"] if loc is None else loc)
    if err["type"] == "extra_forbidden":
        return f"{path}: unknown field (see `gpupool spec schema` for the fields a job file has)"
    if err["type"] == "missing":
        return f"{path}: required field missing"
    return f"{path}: {err['msg'].removeprefix('Value error, ')} (got {err.get('input')!r})"


def dotted(loc: Sequence[int | str]) -> str:
    """``('retry', 'on', 1)`` as ``retry.on[1]``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def line_of(tree: yaml.Node | None, loc: Sequence[int | str]) -> int | None:
    """The 1-based line of the node at ``loc`` (its key's line for a mapping entry); the nearest enclosing
    node's when the path goes where the file has nothing (a missing field)."""
    node, line = tree, None if tree is None else tree.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            hit = next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == str(part)), None)
            if hit is None:
                return line
            line, node = hit[0].start_mark.line + 1, hit[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line
