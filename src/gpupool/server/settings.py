"""Server settings: built once in the entry point from an optional YAML file and ``GPUPOOL_*`` variables.

The environment wins over the file, so a deployment can keep one file and override per replica. A nested
setting's variable joins the names with ``__``: ``scheduler.policy`` is ``GPUPOOL_SCHEDULER__POLICY``,
``scheduler.gittins.cohort_window_s`` is ``GPUPOOL_SCHEDULER__GITTINS__COHORT_WINDOW_S``; a value is read
as YAML (``true``, ``12.5``, ``[1, 2]``, ``null``), a list also as ``1,2``.

The ``scheduler`` section (``scheduler.settings.SchedulerSettings``) is what decides; ``gpupool sim run
--config FILE`` reads the same section of the same file. Values are checked by pydantic against the
dataclasses' types (not a second model of them), then by ``scheduler.settings.problems``; a bad value is
one ``ParseError`` naming the setting and the file line or the variable it came from.

The admin and metrics tokens are secrets: compared, never stored or logged, and ``repr`` and ``print_config``
hide them (and the password of the database URL).
"""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from gpupool.domain.errors import ParseError
from gpupool.scheduler.settings import SchedulerSettings, problems


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
    # A larger fleet is told a longer interval, so that the server takes at most this many beats a second (Nomad's
    # max_heartbeats_per_second); a node is then lost after three intervals if that is past node_lost_after_s
    # (server/liveness.py, BeatPace). 0: every fleet beats at heartbeat_interval_s.
    heartbeat_max_per_s: float = 50.0
    # An agent's commands long-poll is held open at most this long; a launch, stop or checkpoint signal answers
    # it as soon as it is committed. 0: no push, commands ride heartbeat replies only.
    command_wait_s: float = 20.0
    node_lost_after_s: float = 30.0  # of the server's own progress: a stall of its intake is not counted
    heartbeat_workers: int = 8  # threads for agents' beats and reports, apart from the API's (server/liveness.py)
    schedule_period_s: float = 2.0  # the loop runs at least this often
    schedule_min_gap_s: float = 0.05  # and at most this often, however many events wake it
    schedule_max_busy: float = 0.25  # woken without pause, cycles take at most this share of a core
    # Leadership (see server/leader.py): replicas sharing a database and this name elect one scheduling loop
    # through a lease on the database's clock; a standby tries to take it over every leader_retry_s once the
    # leader stopped renewing for lease_ttl_s (so it takes over within lease_ttl_s + leader_retry_s).
    cluster_name: str = "default"
    lease_ttl_s: float = 6.0
    lease_renew_s: float = 1.5  # the leader renews this often: a few chances before the lease runs out
    leader_retry_s: float = 1.0
    # A node token's check is trusted this long between reads of its stored hash (a re-registration ends it at
    # once on the replica that took it, within host_cache_s on the others). API tokens are never cached.
    auth_cache_s: float = 10.0
    # /metrics needs an admin token or this one (a secret, like admin_token), unless metrics_open.
    metrics_token: str = field(default="", repr=False)
    metrics_open: bool = False
    # A replica that did not make a change (a standby taking beats) sends its launches/stops this much later.
    host_cache_s: float = 1.0
    socket_ifname: str = ""  # NCCL_SOCKET_IFNAME for workloads ("" = let NCCL choose)
    master_port_base: int = 29500
    stop_grace_s: float = 30.0  # a stopped workload's SIGTERM -> SIGKILL delay (cancel, preemption, stale ranks)
    log_level: str = "info"
    log_format: str = "text"  # or "json": one object per line, each with its request id
    access_log: bool = True  # one line per request (client, method, path, status, request id)
    tls_cert: str = ""  # PEM certificate (chain) file: the server speaks HTTPS; needs tls_key
    tls_key: str = ""  # its PEM private key file (keep it readable by the server's user only)
    # Backpressure (see server/submits.py): a tenant's pending jobs (0: no cap; 429 TENANT_PENDING_LIMIT past
    # it) and submissions waiting for their commit (503 SUBMIT_QUEUE_FULL past it).
    max_pending_per_tenant: int = 100_000
    submit_queue_max: int = 20_000
    # The most elements one array may have (Slurm's MaxArraySize is 1001: indices 0-1000); more is a 422.
    max_array_size: int = 1001
    # The rate card (YAML: currency, default, rates of {gpu_model, pool, per_gpu_hour}) that prices monthly
    # statements (GET /v1/accounting/statement); read at each statement, so an edit needs no restart. "": none.
    rate_card_path: str = ""
    # How long a submission waits through a database failover (or a lost connection) before its 503.
    store_retry_s: float = 10.0
    # A file the scheduling loop appends its journal to (every event it applied, each cycle's inputs and
    # decisions; ``gpupool sim replay FILE`` checks them): "" = none. Grows with every heartbeat.
    journal_path: str = ""
    # -- the door (server/door.py, server/serve.py): what a connection or a request may cost ----------------------
    max_body_bytes: int = 1 << 20  # a request body past this is a 413 BODY_TOO_LARGE, refused before it is read
    max_admin_body_bytes: int = 64 << 20  # an admin token's body (a fabric import), the token checked first
    body_timeout_s: float = 30.0  # a body must arrive whole within this (408 BODY_TIMEOUT)
    header_timeout_s: float = 10.0  # a connection's next request line and headers within this, or it is closed
    max_header_bytes: int = 64 << 10  # request line and headers past this: 431, closed
    keep_alive_s: int = 5  # an idle keep-alive connection is closed after this (uvicorn's timeout_keep_alive)
    limit_concurrency: int = 10_000  # connections or requests at once past this get 503 (0: no limit)
    backlog: int = 2048  # the listen queue: connections the kernel holds before they are accepted
    max_open_files: int = 65_536  # the server raises its soft RLIMIT_NOFILE to this (at most the hard limit)
    # The garbage collector's thresholds in the server process (``gc.set_threshold``; Python's are 700, 10, 10).
    # Its full passes walk every live object (the fabric, the state, the backlog's specs, the host cache): at
    # 300 nodes under a stream of jobs each took ~0.2 s with the GIL held, 18% of the server's CPU, stalling
    # every request and the loop. Most of what a request makes is freed by reference counting, not by these
    # passes; counting 20,000 new container objects per young pass makes the full ones rare.
    gc_thresholds: tuple[int, int, int] = (20_000, 20, 20)
    auth_fail_burst: int = 20  # failed authentications a token or an address may have at once (0: no limit)
    auth_fail_per_s: float = 1.0  # and more each second; past that a 429 AUTH_RATE_LIMITED with Retry-After
    log_fetch_timeout_s: float = 5.0  # a log fetch from an agent (server/agentlogs.py): connect, read and all
    log_fetches: int = 16  # log fetches in flight at once (an agent at most a quarter of them); more: 503
    # Expected starts (server/eta.py): a read finding the last projection older than eta_refresh_s wakes the
    # next one; a projection looks eta_horizon_s ahead and runs at most eta_max_cycles cycles (its cost bound).
    eta_refresh_s: float = 10.0
    eta_horizon_s: float = 7 * 86400.0
    eta_max_cycles: int = 1000
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)  # what decides (also ``gpupool sim``)

    @property
    def url(self) -> str:
        return self.database_url or default_url(self.data_dir)


# Settings that moved into the ``scheduler`` section (issue 13): named in the error, so a file is fixed at once.
_MOVED = frozenset(
    {"policy", "placer", "preemption", "preemption_grace_s", "preemption_min_runtime_s", "require_quota"}
    | {"usage_half_life_s"}
)
_SECRETS = frozenset({"admin_token", "metrics_token"})
_ADAPTER: TypeAdapter[Settings] = TypeAdapter(Settings)


def _sections(cls: type) -> dict[str, type]:
    """The fields of a settings dataclass that are dataclasses themselves (nested sections), by name."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if dataclasses.is_dataclass(hints[f.name])}


def leaves(cls: type, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """(path, type) of every setting, nested sections walked."""
    hints = typing.get_type_hints(cls)
    out: list[tuple[tuple[str, ...], Any]] = []
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            out += leaves(typing.cast(type, kind), (*path, f.name))
        else:
            out.append(((*path, f.name), kind))
    return out


def env_name(path: tuple[str, ...]) -> str:
    return "GPUPOOL_" + "__".join(path).upper()


def _key_lines(text: str) -> dict[tuple[str, ...], int]:
    """The 1-based line of every key of a YAML mapping (nested mappings walked), by its path."""
    out: dict[tuple[str, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = (*path, str(k.value))
                out[key] = k.start_mark.line + 1
                walk(v, key)

    root = yaml.compose(text)
    if root is not None:
        walk(root, ())
    return out


def _check_keys(data: Mapping[str, Any], cls: type, path: tuple[str, ...], where: Any) -> None:
    names = {f.name for f in dataclasses.fields(cls)}
    sections = _sections(cls)
    for key, value in data.items():
        here = (*path, str(key))
        if key not in names:
            moved = f" (now scheduler.{key})" if not path and key in _MOVED else ""
            raise where(here, f"unknown setting {'.'.join(here)!r}{moved}")
        if key in sections:
            if not isinstance(value, Mapping):
                raise where(here, f"setting {'.'.join(here)!r}: a section of settings, not {value!r}")
            _check_keys(value, sections[key], here, where)


def _env_value(raw: str, kind: Any) -> Any:
    if kind is str:
        return raw
    if typing.get_origin(kind) is tuple and "," in raw and not raw.lstrip().startswith("["):
        return [x.strip() for x in raw.split(",") if x.strip()]
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw  # pydantic names what it should have been


def _put(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        data = data.setdefault(key, {})
    data[path[-1]] = value


def _read_file(path: str | Path) -> tuple[dict[str, Any], dict[tuple[str, ...], int]]:
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ParseError(f"settings are not UTF-8 text (byte {e.start})", source=source) from None
    except OSError as e:
        raise ParseError(f"cannot read settings: {e.strerror}", source=source) from None
    try:
        data = yaml.safe_load(text) or {}
        lines = _key_lines(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ParseError(f"not YAML: {e}", source=source, line=None if mark is None else mark.line + 1) from None
    if not isinstance(data, dict):
        raise ParseError("settings must be a mapping of names to values", source=source, line=1)
    return data, lines


def load_settings(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Settings from ``path`` (YAML mapping, optional) then ``GPUPOOL_<NAME>`` variables of ``env``."""
    env = os.environ if env is None else env
    data: dict[str, Any] = {}
    lines: dict[tuple[str, ...], int] = {}
    if path is not None:
        data, lines = _read_file(path)
    from_env: set[tuple[str, ...]] = set()

    def where(key: tuple[str, ...], message: str) -> ParseError:
        if key in from_env:
            return ParseError(message, source=env_name(key))
        return ParseError(message, source=str(path or "settings"), line=lines.get(key))

    _check_keys(data, Settings, (), where)
    for name in sorted(_MOVED):
        if env_name((name,)) in env:
            raise ParseError(f"moved to {env_name(('scheduler', name))}", source=env_name((name,)))
    for key, kind in leaves(Settings):
        raw = env.get(env_name(key))
        if raw is not None:
            _put(data, key, _env_value(raw, kind))
            from_env.add(key)
    try:
        settings = _ADAPTER.validate_python(data)
    except ValidationError as e:
        first = e.errors()[0]
        key = tuple(str(x) for x in first["loc"] if isinstance(x, str))
        got = first.get("input")
        raise where(key, f"setting {'.'.join(key)!r}: {first['msg']} (got {got!r})") from None
    # The agent protocol refuses a negative grace, so one would fail every heartbeat that stops a workload.
    if settings.stop_grace_s < 0:
        raise where(("stop_grace_s",), f"setting 'stop_grace_s': {settings.stop_grace_s!r} is negative")
    if not 1 <= settings.max_array_size <= 100_000:
        raise where(("max_array_size",), f"setting 'max_array_size': {settings.max_array_size!r} is not in 1..100000")
    if settings.heartbeat_workers < 1:
        raise where(("heartbeat_workers",), f"setting 'heartbeat_workers': {settings.heartbeat_workers!r} is below 1")
    for setting, problem in _lease_problems(settings):
        raise where((setting,), f"setting {setting!r}: {problem}")
    if not 0 <= settings.port <= 65535:
        raise where(("port",), f"setting 'port': {settings.port} is not a TCP port (0 to 65535)")
    for setting, problem in _door_problems(settings):
        raise where((setting,), f"setting {setting!r}: {problem}")
    for setting, problem in _eta_problems(settings):
        raise where((setting,), f"setting {setting!r}: {problem}")
    for name, problem in problems(settings.scheduler):
        raise where(("scheduler", name), f"setting 'scheduler.{name}': {problem}")
    return settings


def _eta_problems(s: Settings) -> list[tuple[str, str]]:
    out = [(n, f"{getattr(s, n)!r} must be above 0") for n in ("eta_refresh_s", "eta_horizon_s") if getattr(s, n) <= 0]
    if s.eta_max_cycles < 1:
        out.append(("eta_max_cycles", f"{s.eta_max_cycles!r} must be at least 1"))
    return out


def _lease_problems(s: Settings) -> list[tuple[str, str]]:
    out = []
    if not s.cluster_name.strip() or len(s.cluster_name) > 128:
        out.append(("cluster_name", f"{s.cluster_name!r} must be 1 to 128 characters, not blank"))
    if s.lease_ttl_s <= 0:
        out.append(("lease_ttl_s", f"{s.lease_ttl_s!r} must be above 0"))
    if not 0 < s.lease_renew_s < s.lease_ttl_s:
        out.append(("lease_renew_s", f"{s.lease_renew_s!r} must be above 0 and below lease_ttl_s ({s.lease_ttl_s!r})"))
    if s.leader_retry_s <= 0:
        out.append(("leader_retry_s", f"{s.leader_retry_s!r} must be above 0"))
    return out


def _door_problems(s: Settings) -> list[tuple[str, str]]:
    positive = ("max_body_bytes", "body_timeout_s", "header_timeout_s", "max_header_bytes", "keep_alive_s")
    out = [(n, f"{getattr(s, n)!r} must be above 0") for n in (*positive, "log_fetch_timeout_s") if getattr(s, n) <= 0]
    out += [
        (n, f"{getattr(s, n)!r} is negative") for n in ("limit_concurrency", "auth_fail_burst") if getattr(s, n) < 0
    ]
    for name in ("auth_fail_per_s", "heartbeat_max_per_s"):
        if getattr(s, name) < 0:
            out.append((name, f"{getattr(s, name)!r} is negative"))
    if s.max_admin_body_bytes < s.max_body_bytes:
        out.append(("max_admin_body_bytes", f"{s.max_admin_body_bytes!r} is below max_body_bytes ({s.max_body_bytes})"))
    for name in ("backlog", "max_open_files", "log_fetches"):
        if getattr(s, name) < 1:
            out.append((name, f"{getattr(s, name)!r} must be at least 1"))
    if min(s.gc_thresholds) < 1:  # 0 would turn the collector off: cyclic garbage would never be freed
        out.append(("gc_thresholds", f"{list(s.gc_thresholds)!r}: each must be at least 1"))
    return out


def plain(value: Any) -> Any:
    """A settings value as YAML and JSON write it: enums by value, tuples as lists."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def print_config(settings: Settings) -> str:
    """The effective settings as the YAML file that would give them, secrets hidden: a file to keep, or to
    hand to ``gpupool sim run --config`` (which reads its ``scheduler`` section)."""
    doc = plain(dataclasses.asdict(settings))
    for name in _SECRETS:
        if doc.get(name):
            doc[name] = "***"
    doc["database_url"] = re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", doc["database_url"])
    return str(yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))
