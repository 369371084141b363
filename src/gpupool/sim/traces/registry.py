"""The one place that maps a trace format's name to its loader."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from gpupool.domain.errors import InputError
from gpupool.sim.traces import rows
from gpupool.sim.traces.chronus import load_chronus
from gpupool.sim.traces.dlrm import load_dlrm
from gpupool.sim.traces.itp import load_elasticflow, load_itp
from gpupool.sim.traces.openb import load_openb
from gpupool.sim.traces.philly import load_philly
from gpupool.sim.traces.records import Trace
from gpupool.sim.traces.synthetic import load_synthetic
from gpupool.sim.traces.tiresias import load_tiresias


class Loader(Protocol):
    def __call__(self, path: str | Path, *, skip_bad_rows: bool = ..., limit: int | None = ...) -> Trace: ...


LOADERS: MappingProxyType[str, Loader] = MappingProxyType(
    {
        "itp": load_itp,
        "elasticflow": load_elasticflow,
        "philly": load_philly,
        "chronus": load_chronus,
        "openb": load_openb,
        "dlrm": load_dlrm,
        "tiresias": load_tiresias,
        "synthetic": load_synthetic,
    }
)


def load_trace(path: str | Path, fmt: str, *, skip_bad_rows: bool = False, limit: int | None = None) -> Trace:
    """Load the trace at ``path`` in format ``fmt`` (a key of ``LOADERS``).

    A bad row raises ParseError naming the file and line; with ``skip_bad_rows`` it lands in ``Trace.bad_rows``
    instead. ``limit`` keeps only the first that many good rows of the file. An unknown format or a missing
    file raises InputError.
    """
    loader = LOADERS.get(fmt)
    if loader is None:
        raise InputError(f"unknown trace format {fmt!r}; known formats: {', '.join(sorted(LOADERS))}", source=str(path))
    if limit is not None and limit < 0:
        raise InputError(f"limit must be 0 or more, not {limit}", source=str(path))
    rows.check_path(path)
    return loader(path, skip_bad_rows=skip_bad_rows, limit=limit)
