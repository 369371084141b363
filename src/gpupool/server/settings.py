"""Server settings: built once in the entry point from an optional YAML file and ``GPUPOOL_*`` variables.

The environment wins over the file, so a deployment can keep one file and override per replica. The admin
token is a secret: it is compared, never stored or logged, and ``repr`` hides it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from gpupool.domain.errors import ParseError


def default_url(data_dir: str | Path) -> str:
    """The SQLite file in ``data_dir``: the same as ``gpupool.store.default_url`` (a test holds them equal).

    Not imported from the store: every client command loads this module, and importing the store pulls in
    SQLAlchemy and Alembic (~0.7 s per ``gpupool jobs``).
    """
    return f"sqlite:///{Path(data_dir) / 'gpupool.db'}"


@dataclass(frozen=True, slots=True)
class Settings:
    data_dir: str = "./gpupool-data"
    database_url: str = ""  # "" -> SQLite file in data_dir
    host: str = "127.0.0.1"
    port: int = 8765
    admin_token: str = field(default="", repr=False)
    heartbeat_interval_s: float = 5.0
    # An agent's commands long-poll is held open at most this long; a launch, stop or checkpoint signal answers
    # it as soon as it is committed. 0: no push, commands ride heartbeat replies only.
    command_wait_s: float = 20.0
    node_lost_after_s: float = 30.0
    schedule_period_s: float = 2.0  # the loop runs at least this often
    schedule_min_gap_s: float = 0.05  # and at most this often, however many events wake it
    schedule_max_busy: float = 0.25  # woken without pause, cycles take at most this share of a core
    leader_retry_s: float = 1.0  # how often a standby tries to take the leader lock
    auth_cache_s: float = 10.0  # a revoked token may be honoured this long after revocation
    # A replica that did not make a change (a standby taking beats) sends its launches/stops this much later.
    host_cache_s: float = 1.0
    socket_ifname: str = ""  # NCCL_SOCKET_IFNAME for workloads ("" = let NCCL choose)
    master_port_base: int = 29500
    preemption: bool = True  # quota reclaims, pool windows and priority may preempt (after a checkpoint signal)
    preemption_grace_s: float = 300.0  # between the checkpoint signal and the stop
    stop_grace_s: float = 30.0  # a stopped workload's SIGTERM -> SIGKILL delay (cancel, preemption, stale ranks)
    preemption_min_runtime_s: float = 300.0  # a job runs this long before a preemptor may take its GPUs
    require_quota: bool = False  # a tenant without a quota in a pool may not run there
    usage_half_life_s: float = 7 * 86400.0  # fair share forgets half of a tenant's usage this often
    policy: str = "priority"  # the queue policy (scheduler registry: fifo, priority, sjf, hrrn, las, gittins, edf, ...)
    placer: str = "topology"  # the placer (first-fit, best-fit, spread, topology, frag)
    log_level: str = "info"
    log_format: str = "text"  # or "json": one object per line, each with its request id
    access_log: bool = True  # one line per request (client, method, path, status, request id)
    tls_cert: str = ""  # PEM certificate (chain) file: the server speaks HTTPS; needs tls_key
    tls_key: str = ""  # its PEM private key file (keep it readable by the server's user only)
    # Backpressure (see server/submits.py): a tenant's pending jobs (0: no cap; 429 TENANT_PENDING_LIMIT past
    # it) and submissions waiting for their commit (503 SUBMIT_QUEUE_FULL past it).
    max_pending_per_tenant: int = 100_000
    submit_queue_max: int = 20_000
    # How long a submission waits through a database failover (or a lost connection) before its 503.
    store_retry_s: float = 10.0

    @property
    def url(self) -> str:
        return self.database_url or default_url(self.data_dir)


def _coerce(name: str, raw: Any, kind: type, source: str, line: int | None) -> Any:
    try:
        if kind is bool:
            return str(raw).lower() in ("1", "true", "yes")
        return kind(raw)
    except (TypeError, ValueError):
        raise ParseError(
            f"setting {name!r}: {raw!r} is not a valid {kind.__name__}", source=source, line=line
        ) from None


def load_settings(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Settings from ``path`` (YAML mapping, optional) then ``GPUPOOL_<NAME>`` variables of ``env``."""
    env = os.environ if env is None else env
    kinds = {f.name: type(getattr(Settings(), f.name)) for f in fields(Settings)}
    values: dict[str, Any] = {}
    if path is not None:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise ParseError(f"cannot read settings: {e.strerror}", source=source) from None
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            raise ParseError(f"not YAML: {e}", source=source, line=None if mark is None else mark.line + 1) from None
        if not isinstance(data, dict):
            raise ParseError("settings must be a mapping of names to values", source=source, line=1)
        lines = text.splitlines()
        for key, raw in data.items():
            line = next((i + 1 for i, t in enumerate(lines) if t.lstrip().startswith(f"{key}:")), None)
            if key not in kinds:
                raise ParseError(f"unknown setting {key!r}", source=source, line=line)
            values[key] = _coerce(key, raw, kinds[key], source, line)
    for name, kind in kinds.items():
        raw = env.get(f"GPUPOOL_{name.upper()}")
        if raw is not None:
            values[name] = _coerce(name, raw, kind, f"GPUPOOL_{name.upper()}", None)
            if name == "stop_grace_s" and values[name] < 0:
                raise ParseError(f"setting {name!r}: {raw!r} is negative", source=f"GPUPOOL_{name.upper()}")
    # The agent protocol refuses a negative grace, so one would fail every heartbeat that stops a workload.
    if values.get("stop_grace_s", 0.0) < 0:
        raise ParseError(f"setting 'stop_grace_s': {values['stop_grace_s']!r} is negative", source=str(path))
    return replace(Settings(), **values)
