"""Job arrays and dependencies as Slurm writes them, and what a dependency says given its jobs' states.

Pure: ``parse_array("0-199%16")`` (indices and a concurrency cap), ``parse_dependency("afterok:1:2,afterany:3")``,
``dependency_verdict`` (met, not yet, or never: the scheduler's admit stage asks it every cycle) and
``dependency_order`` (a set of named jobs in an order that starts every job after those it names, or the cycle
that makes one impossible).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from gpupool.domain.errors import InputError
from gpupool.domain.jobs import Dependency, DependencyKind
from gpupool.domain.states import JobState

_ARRAY_PART = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")
TERMINAL = frozenset({JobState.FINISHED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT})
NOT_OK = frozenset({JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT})


@dataclass(frozen=True, slots=True)
class ArraySpec:
    indices: tuple[int, ...]  # ascending, distinct
    cap: int = 0  # at most this many placed or running at once (0: no cap)


def parse_array(text: str, max_size: int, where: str = "array") -> ArraySpec:
    """``0-199%16``, ``0-198:2``, ``1,3,5-7``, ``0-9%2``: Slurm's ``--array`` syntax; over ``max_size``
    elements (or an index past ``max_size * 100``) is refused, as is anything malformed."""
    body, _, cap_text = text.strip().partition("%")
    cap = 0
    if cap_text:
        if not cap_text.isdigit() or int(cap_text) < 1:
            raise InputError(f"array concurrency cap {cap_text!r} must be a whole number >= 1", source=where)
        cap = int(cap_text)
    indices: set[int] = set()
    for part in body.split(","):
        m = _ARRAY_PART.match(part.strip())
        if m is None:
            raise InputError(
                f"{part.strip()!r} is not an index, a range (0-9) or a stepped range (0-9:2)", source=where
            )
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        step = int(m.group(3)) if m.group(3) is not None else 1
        if hi < lo or step < 1:
            raise InputError(
                f"range {part.strip()!r} is empty (its end is before its start, or its step is 0)", source=where
            )
        if (hi - lo) // step + 1 + len(indices) > max_size:
            raise InputError(f"array {text!r} has more than the {max_size} elements an array may have", source=where)
        indices.update(range(lo, hi + 1, step))
    if not indices:
        raise InputError("an array needs at least one index", source=where)
    return ArraySpec(tuple(sorted(indices)), cap)


def format_array(spec: ArraySpec) -> str:
    """The indices as Slurm prints them (``0-3,7``), with the cap (``%2``)."""
    runs: list[str] = []
    idx = spec.indices
    i = 0
    while i < len(idx):
        j = i
        while j + 1 < len(idx) and idx[j + 1] == idx[j] + 1:
            j += 1
        runs.append(str(idx[i]) if i == j else f"{idx[i]}-{idx[j]}")
        i = j + 1
    return ",".join(runs) + (f"%{spec.cap}" if spec.cap else "")


def parse_dependency(text: str, where: str = "dependency") -> tuple[tuple[DependencyKind, tuple[str, ...]], ...]:
    """``afterok:ID[:ID...][,KIND:ID...]``: every item must be met (Slurm's ``,``); ``?`` (any of them) and
    Slurm's other kinds (``aftercorr``, ``singleton``, ``+time``) are refused by name. IDs are as given (a job
    id, an array id, or ``ARRAY_INDEX``); the server resolves them."""
    s = text.strip()
    if "?" in s:
        raise InputError("'?' (any one of the dependencies) is not supported: use ',' (all of them)", source=where)
    out: list[tuple[DependencyKind, tuple[str, ...]]] = []
    for item in s.split(","):
        kind_text, sep, ids_text = item.strip().partition(":")
        if not sep or not ids_text:
            raise InputError(
                f"{item.strip()!r} is not KIND:JOB[:JOB...] (kinds: after, afterok, afternotok, afterany)", source=where
            )
        try:
            kind = DependencyKind(kind_text.lower())
        except ValueError:
            known = ", ".join(k.value for k in DependencyKind)
            raise InputError(
                f"dependency kind {kind_text!r} is not supported (supported: {known})", source=where
            ) from None
        ids = tuple(x.strip() for x in ids_text.split(":"))
        bad = next((x for x in ids if not x or "+" in x), None)
        if bad is not None:
            what = "a delay (+minutes)" if bad and "+" in bad else "an empty job id"
            raise InputError(f"{item.strip()!r}: {what} is not supported", source=where)
        out.append((kind, ids))
    return tuple(out)


class Verdict(Enum):
    MET = "met"
    WAIT = "wait"
    NEVER = "never"


def dependency_verdict(dep: Dependency, states: Mapping[str, JobState]) -> tuple[Verdict, str]:
    """Whether ``dep`` is met given its jobs' ``states`` (a job missing from it is not known: never met),
    and, when it is not, a sentence saying which job it waits for or which one broke it."""
    waiting: str | None = None
    for job_id in dep.job_ids:
        st = states.get(job_id)
        if st is None:
            return Verdict.NEVER, f"{dep.kind.value}: job {job_id} is not known"
        kind = dep.kind
        if kind is DependencyKind.AFTER:
            ok, never = st is not JobState.PENDING, False
        elif kind is DependencyKind.AFTEROK:
            ok, never = st is JobState.FINISHED, st in NOT_OK
        elif kind is DependencyKind.AFTERNOTOK:
            ok, never = st in NOT_OK, st is JobState.FINISHED
        else:
            ok, never = st in TERMINAL, False
        if never:
            return Verdict.NEVER, f"{kind.value}: job {job_id} ended {st.value}"
        if not ok and waiting is None:
            waiting = f"{kind.value}: waits for job {job_id} ({st.value})"
    return (Verdict.MET, "") if waiting is None else (Verdict.WAIT, waiting)


def dependency_order(after: Mapping[str, Sequence[str]]) -> list[str]:
    """The names of ``after`` (name -> the names it depends on, among them) in an order where each comes after
    those it names; InputError naming the cycle (``a -> b -> a``) when there is none. Names not in ``after``
    are outside jobs (already stored) and impose nothing."""
    order: list[str] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            loop = [*path[path.index(name) :], name]
            raise InputError(f"dependency cycle: {' -> '.join(loop)}", source=loop[0])
        state[name] = 1
        for dep in after[name]:
            if dep in after:
                visit(dep, [*path, name])
        state[name] = 2
        order.append(name)

    for name in after:
        visit(name, [])
    return order
