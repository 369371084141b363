"""gpupool: a GPU pool manager and compute scheduler for InfiniBand GPU data centres.

May import: its own subpackages only (each subpackage states its own rules).
Must not: hold module-level state; every process builds one settings object in its entry point.
"""

__version__ = "0.1.0"
