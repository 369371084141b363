"""What one agent is told (``AgentSettings``, built by ``gpupool agent`` from its flags) and what it counts
(``AgentStats``); the node's memory, for its registration.

May import the agent's parts below the loop (containers, isolation, reporter) and ``domain``; not the loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpupool.agent.containers import ContainerRuntime
from gpupool.agent.isolation import Isolation
from gpupool.agent.reporter import BackoffPolicy
from gpupool.domain.health import HealthRules


@dataclass(frozen=True, slots=True)
class AgentSettings:
    server_url: str
    join_token: str
    host: str
    state_dir: Path
    interval_s: float = 1.0  # until the server's reply names its own
    poll_s: float = 0.2  # how often children are checked between beats (exits reported, stops escalated)
    seed: int = 0
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    inherit_env: tuple[str, ...] = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "LOGNAME")
    stop_workloads_on_exit: bool = False  # the demo's choice; a real node keeps its jobs across agent restarts
    exit_grace_s: float = 2.0
    thresholds: HealthRules = field(default_factory=HealthRules)
    labels: Mapping[str, str] = field(default_factory=dict)  # registered with the node (--label, a labels file)
    isolation: Isolation = field(default_factory=Isolation)  # who workloads run as, and how they are held
    containers: ContainerRuntime | None = None  # runs the jobs that name an image (None: this node cannot)


def memory_mib() -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 0


@dataclass(slots=True)
class AgentStats:
    """Counters the loop bumps; read by tests and the log. Mutable on purpose, owned by one agent."""

    registrations: int = 0
    heartbeats: int = 0
    reports: int = 0
    launches: int = 0
    pushes: int = 0  # commands long-polls answered
    server_failures: int = 0
    retry_delays: list[float] = field(default_factory=list)
