"""Read a ``gpupool sim`` output folder (metrics.json, jobs.csv, report.md, PNG plots) for the report page.

Only reads files by their fixed names (plots by a checked bare file name), so a path given by an admin
cannot be used to wander outside the folder. Malformed files raise ParseError naming the file and line.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

from gpupool.domain.errors import ParseError

_PLOT = re.compile(r"^[A-Za-z0-9_.-]+\.png$")
_MAX_JOBS = 200_000  # jobs.csv rows read for the charts; a bigger run is summarised by its first rows


def _folder(path: str) -> Path:
    folder = Path(path).expanduser()
    try:  # a name the OS refuses (too long, bad bytes) raises here rather than answering False
        is_dir = folder.is_dir()
        has_metrics = is_dir and (folder / "metrics.json").is_file()
    except (OSError, ValueError) as e:
        raise ParseError(f"cannot open: {getattr(e, 'strerror', None) or e}", source=path[:200]) from None
    if not is_dir:
        raise ParseError("not a folder (give the output folder of `gpupool sim run`)", source=path)
    if not has_metrics:
        raise ParseError("no metrics.json here: not a simulator output folder", source=path)
    return folder


def read_report(path: str) -> dict[str, Any]:
    """The metrics, per-job waits and completion times (hours, for the charts) and the plots' names."""
    folder = _folder(path)
    source = str(folder / "metrics.json")
    try:
        text = (folder / "metrics.json").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ParseError(f"cannot read: {e}", source=source) from None
    try:
        metrics = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(f"not JSON: {e.msg}", source=source, line=e.lineno) from None
    if not isinstance(metrics, dict):
        raise ParseError("metrics.json must hold one object", source=source, line=1)
    waits: list[float] = []
    jcts: list[float] = []
    jobs = 0
    csv_path = folder / "jobs.csv"
    if csv_path.is_file():
        with csv_path.open(newline="", encoding="utf-8") as f:
            rows = csv.reader(f)
            header = next(rows, [])
            need = ("submit", "start", "end")
            missing = [c for c in need if c not in header]
            if missing:
                raise ParseError(f"jobs.csv lacks column {missing[0]!r}", source=str(csv_path), line=1)
            ix = [header.index(c) for c in need]
            for line, row in enumerate(rows, start=2):
                if line - 1 > _MAX_JOBS:
                    break
                jobs += 1
                try:
                    submit, start, end = (float(row[i]) if row[i] else None for i in ix)
                except (ValueError, IndexError):
                    raise ParseError(
                        "submit, start and end must be numbers or empty", source=str(csv_path), line=line
                    ) from None
                if submit is not None and start is not None:
                    waits.append(round((start - submit) / 3600.0, 4))
                if submit is not None and end is not None:
                    jcts.append(round((end - submit) / 3600.0, 4))
    report = folder / "report.md"
    return {
        "path": str(folder),
        "metrics": metrics,
        "jobs": jobs,
        "wait_h": sorted(waits),
        "jct_h": sorted(jcts),
        "plots": sorted(p.name for p in folder.glob("*.png") if _PLOT.match(p.name)),
        "report_md": report.read_text(encoding="utf-8") if report.is_file() else "",
    }


def plot_path(path: str, name: str) -> Path:
    """The file of plot ``name`` in the folder; a name that is not a bare ``*.png`` is refused."""
    if not _PLOT.match(name):
        raise ParseError(f"{name!r} is not a plot name (a bare *.png file name)", source=path)
    file = _folder(path) / name
    if not file.is_file():
        raise ParseError(f"no plot {name!r} in this folder", source=path)
    return file
