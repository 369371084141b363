"""gpupool: a GPU pool manager and compute scheduler for InfiniBand GPU data centres.

May import: its own subpackages only (each subpackage states its own rules).
Must not: hold module-level state; every process builds one settings object in its entry point.
"""

# A release is a commit on main that changes this line (pyproject.toml reads it). 0.2.0: extras per role,
# the tolerant agent protocol reader (tests/e2e/test_agent_compat.py runs the previous release's agent).
__version__ = "0.2.0"
