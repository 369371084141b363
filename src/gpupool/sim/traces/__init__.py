"""Trace loaders: public GPU-cluster traces and a seeded synthetic generator, as neutral typed records.
May import: gpupool.domain, the standard library, NumPy.
Must not import: gpupool.scheduler, gpupool.cluster, store, server, agent, HTTP.
"""

from gpupool.sim.traces.records import BadRow, DeadlineKind, Trace, TraceJob, TraceNode
from gpupool.sim.traces.registry import LOADERS, Loader, load_trace
from gpupool.sim.traces.synthetic import synthetic_trace

__all__ = [
    "LOADERS",
    "BadRow",
    "DeadlineKind",
    "Loader",
    "Trace",
    "TraceJob",
    "TraceNode",
    "load_trace",
    "synthetic_trace",
]
