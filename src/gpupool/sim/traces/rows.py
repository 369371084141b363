"""Shared CSV reading for the trace loaders: header check, row line numbers, field conversion, bad-row policy.

Each loader names its columns and turns one row (a list of strings) into a record; everything about files,
encodings, line numbers, skipping and time normalisation lives here once.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from gpupool.domain.errors import InputError, JobSpecError, ParseError
from gpupool.sim.traces.records import BadRow, Trace, TraceJob, TraceNode

T = TypeVar("T", TraceJob, TraceNode)
Columns = Mapping[str, int]  # column name -> index in the row; optional columns absent from the header are absent
RowParser = Callable[[list[str], int], T]  # (fields, 1-based line) -> record


class RowError(Exception):
    """One row that cannot be used; ``collect`` turns it into a ParseError or a BadRow with the row's line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def text(row: list[str], col: int) -> str:
    return row[col].strip()


def number(row: list[str], col: int, name: str) -> float:
    raw = row[col].strip()
    if not raw:
        raise RowError(f"empty {name}")
    try:
        value = float(raw)
    except ValueError:
        raise RowError(f"{name} is not a number: {raw!r}") from None
    if not math.isfinite(value):
        raise RowError(f"{name} is not a finite number: {raw!r}")
    return value


def optional_number(row: list[str], col: int, name: str) -> float | None:
    """Empty or NaN means 'not recorded' (pandas writes missing values either way)."""
    raw = row[col].strip()
    if not raw or raw.lower() == "nan":
        return None
    return number(row, col, name)


def integer(row: list[str], col: int, name: str) -> int:
    value = number(row, col, name)
    if not value.is_integer():
        raise RowError(f"{name} is not a whole number: {row[col].strip()!r}")
    return int(value)


def check_path(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_file():
        raise InputError("no such trace file" if not p.exists() else "not a regular file", source=str(p))
    return p


def _rows(path: Path) -> Iterator[tuple[int, list[str], str]]:
    """(1-based line, fields, problem) for every non-blank line; the header is line 1, problem is "" if none."""
    # surrogateescape keeps reading past bytes that are not UTF-8, so one bad row is reported at its own line
    # instead of the whole file failing at some buffer boundary; _encoding_problem finds them.
    with path.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
        reader = csv.reader(f)
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as e:  # the reader carries on with the next line after this
                yield reader.line_num, [], f"not CSV: {e}"
                continue
            if row:
                yield reader.line_num, row, _encoding_problem(row)


def _encoding_problem(row: list[str]) -> str:
    for field in row:
        if not field.isascii():
            try:
                field.encode("utf-8")
            except UnicodeEncodeError:
                return "bad encoding: the row is not UTF-8"
    return ""


def collect(
    path: Path,
    *,
    required: Sequence[str],
    optional: Sequence[str] = (),
    make_parser: Callable[[Columns], RowParser[T]],
    key: Callable[[T], str],
    skip_bad_rows: bool,
    limit: int | None,
) -> tuple[list[T], list[BadRow]]:
    """Parse every data row of ``path``; a bad row raises ParseError at its line, or is recorded when skipping.

    ``key`` names a record for the duplicate check (a second row with the same id is a bad row).
    ``limit`` stops after that many good records.
    """
    source = str(path)
    rows = _rows(path)
    first = next(rows, None)
    if first is None:
        raise ParseError("empty file: expected a header line", source=source, line=1)
    header_line, header, problem = first
    if problem:
        raise ParseError(problem, source=source, line=header_line)
    names = [h.strip() for h in header]
    missing = [c for c in required if c not in names]
    if missing:
        raise ParseError(
            f"header lacks column(s) {', '.join(missing)}; it has {', '.join(names)}", source=source, line=header_line
        )
    columns = {n: names.index(n) for n in (*required, *optional) if n in names}
    parse = make_parser(columns)
    width = len(names)
    records: list[T] = []
    bad: list[BadRow] = []
    seen: set[str] = set()
    if limit is not None and limit <= 0:
        return records, bad
    for line, row, problem in rows:
        try:
            if problem:
                raise RowError(problem)
            if len(row) != width:
                what = f"missing column {names[len(row)]!r}" if len(row) < width else "more fields than the header"
                raise RowError(f"{len(row)} fields where the header has {width}: {what}")
            record = parse(row, line)
            name = key(record)
            if name in seen:
                raise RowError(f"duplicate id {name!r}")
            seen.add(name)
        except (RowError, JobSpecError) as e:
            reason = e.reason if isinstance(e, RowError) else e.message
            if not skip_bad_rows:
                raise ParseError(reason, source=source, line=line) from None
            bad.append(BadRow(source, line, reason))
            continue
        records.append(record)
        if limit is not None and len(records) >= limit:
            break
    return records, bad


def make_trace(
    name: str,
    fmt: str,
    jobs: list[TraceJob],
    bad: Sequence[BadRow],
    nodes: Sequence[TraceNode] = (),
) -> Trace:
    """Shift times so the first submission is at 0 s and sort by submission, keeping file order among ties."""
    origin = min((j.submit_s for j in jobs), default=0.0)
    if origin != 0.0:
        jobs = [j.shifted(origin) for j in jobs]
    jobs.sort(key=lambda j: j.submit_s)
    return Trace(name=name, format=fmt, jobs=tuple(jobs), nodes=tuple(nodes), bad_rows=tuple(bad), origin_s=origin)
