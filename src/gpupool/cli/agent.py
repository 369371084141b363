"""``gpupool agent``: the node agent process (one per GPU server, or one per emulated host on a build machine)."""

from __future__ import annotations

import os
import signal
import stat
import sys
import threading
import zlib
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from gpupool.agent.cgroups import CgroupBackend, detect
from gpupool.agent.config import AgentSettings
from gpupool.agent.containers import find_runtime
from gpupool.agent.daemon import Agent, default_host
from gpupool.agent.identity import DEFAULT_PREFIX, UserMap, load_user_map
from gpupool.agent.isolation import (
    DEFAULT_PIDS_MAX,
    ISOLATED_WORK_ROOT,
    Isolation,
    default_work_root,
    describe,
)
from gpupool.agent.logserver import LogServer
from gpupool.agent.reporter import ServerClient
from gpupool.agent.sources import emulated_sources, hardware_sources
from gpupool.domain.errors import InputError
from gpupool.domain.labels import parse_assignments, parse_labels_file

MAX_INTERVAL_S = 3600.0  # a node silent longer than this is lost to any sane node_lost_after_s anyway


def agent(
    server: Annotated[
        str,
        typer.Option("--server", envvar="GPUPOOL_SERVER", help="Server URL, e.g. https://gpupool.example:8765."),
    ],
    join_token: Annotated[
        str | None,
        typer.Option(
            "--join-token",
            envvar="GPUPOOL_JOIN_TOKEN",
            help="Join token; prefer $GPUPOOL_JOIN_TOKEN or --join-token-file (a token on the command line is"
            " moved to the environment at once: the agent execs itself without it).",
        ),
    ] = None,
    join_token_file: Annotated[
        Path | None, typer.Option("--join-token-file", help="Read the join token from this file (mode 0600).")
    ] = None,
    ca_bundle: Annotated[
        Path | None,
        typer.Option("--ca-bundle", envvar="GPUPOOL_CA_BUNDLE", help="PEM CA file that signed an https server's."),
    ] = None,
    host: Annotated[str | None, typer.Option("--host", help="Node name (default: the short hostname).")] = None,
    state_dir: Annotated[Path, typer.Option("--state-dir", help="Workload records and logs.")] = Path(
        "/var/lib/gpupool/agent"
    ),
    emulate: Annotated[bool, typer.Option("--emulate", help="Emulate this host of --fabric (no GPU needed).")] = False,
    fabric: Annotated[Path | None, typer.Option("--fabric", help="Fabric JSON, with --emulate.")] = None,
    interval: Annotated[float, typer.Option("--interval", help="Heartbeat seconds until the server says.")] = 1.0,
    sysfs_root: Annotated[Path, typer.Option("--sysfs-root", help="InfiniBand sysfs tree.")] = Path(
        "/sys/class/infiniband"
    ),
    smi_xml: Annotated[
        Path | None, typer.Option("--nvidia-smi-xml", help="Read GPUs from this nvidia-smi -q -x file, not NVML.")
    ] = None,
    kernel_log: Annotated[
        Path | None, typer.Option("--kernel-log", help="Kernel log for XIDs, with --nvidia-smi-xml.")
    ] = None,
    log_bind: Annotated[str, typer.Option("--log-bind", help="Address of the workload log server.")] = "127.0.0.1",
    log_port: Annotated[int, typer.Option("--log-port", help="Port of the log server (0: any free one).")] = 0,
    seed: Annotated[int | None, typer.Option("--seed", help="Backoff jitter seed (default: from the host).")] = None,
    stop_on_exit: Annotated[
        bool, typer.Option("--stop-workloads-on-exit", help="Stop every workload when the agent exits.")
    ] = False,
    label: Annotated[
        list[str] | None, typer.Option("--label", help="A node label key=value (repeatable; wins over the file).")
    ] = None,
    labels_file: Annotated[
        Path | None, typer.Option("--labels-file", help="Node labels, one key=value per line (# comments).")
    ] = None,
    isolation: Annotated[
        str,
        typer.Option(
            "--isolation",
            help="auto (on when root), on, off: run each job as its tenant's Unix user (off: as the agent's).",
        ),
    ] = "auto",
    work_dir: Annotated[
        Path | None,
        typer.Option(
            "--work-dir",
            help="Jobs' working directories (default: /var/lib/gpupool/agent-work; STATE_DIR-work without isolation).",
        ),
    ] = None,
    user_map: Annotated[
        Path | None, typer.Option("--user-map", help='TOML file of tenant = "unix-user" lines.')
    ] = None,
    user_prefix: Annotated[
        str, typer.Option("--user-prefix", help="Unmapped tenants run as PREFIX<tenant> (see docs/security.md).")
    ] = DEFAULT_PREFIX,
    create_users: Annotated[
        bool | None,
        typer.Option(
            "--create-users/--no-create-users",
            help="Create a missing tenant user (useradd --system); default: only with --emulate.",
        ),
    ] = None,
    cgroups: Annotated[
        str, typer.Option("--cgroups", help="auto, v1, v2, systemd or none: how each job gets its own cgroup.")
    ] = "auto",
    cgroup_parent: Annotated[
        str,
        typer.Option("--cgroup-parent", help="Jobs' parent cgroup: relative to the agent's own, or absolute."),
    ] = "gpupool",
    dev_dir: Annotated[Path, typer.Option("--dev-dir", help="Where the GPU device nodes are.")] = Path("/dev"),
    pids_max: Annotated[
        int, typer.Option("--pids-max", help="Processes and threads one job may have (0: no limit).")
    ] = DEFAULT_PIDS_MAX,
    container_runtime: Annotated[
        str,
        typer.Option(
            "--container-runtime",
            help="auto, podman, apptainer, enroot or none: what runs jobs that name an image (auto: the first on PATH).",
        ),
    ] = "auto",
) -> None:
    """Run the node agent: register with the server, report telemetry and health, run what it places here."""
    _token_off_the_command_line()
    token = _join_token(join_token, join_token_file)
    name = host or default_host()
    if not 0 < interval <= MAX_INTERVAL_S:  # NaN fails both
        raise InputError(
            f"heartbeat seconds above 0 and at most {MAX_INTERVAL_S:g}, not {interval}", source="--interval"
        )
    labels = node_labels(label or [], labels_file)
    hold = _isolation(
        isolation,
        work_dir,
        state_dir,
        UserMap(
            load_user_map(user_map) if user_map is not None else {},
            user_prefix,
            create=emulate if create_users is None else create_users,
        ),
        detect(cgroups, parent=cgroup_parent),
        dev_dir,
        pids_max,
    )
    containers = find_runtime(container_runtime, os.environ)
    if emulate:
        if fabric is None:
            raise InputError("--emulate needs --fabric FABRIC.json", source="--emulate")
        sources = emulated_sources(fabric, name, state_dir / "node")
    else:
        sources = hardware_sources(sysfs_root, smi_xml, kernel_log, log=lambda m: typer.echo(m, err=True))
    settings = AgentSettings(
        server_url=server,
        join_token=token,
        host=name,
        state_dir=state_dir,
        interval_s=interval,
        # Each node its own jitter by default, yet the same node retries the same way run after run.
        seed=seed if seed is not None else zlib.crc32(name.encode()),
        stop_workloads_on_exit=stop_on_exit,
        labels=labels,
        isolation=hold,
        containers=containers,
    )
    (state_dir / "workloads").mkdir(parents=True, exist_ok=True)
    state_dir.chmod(0o700)  # records, logs and the emulated node: the agent's alone
    typer.echo(describe(hold, state_dir), err=True)
    typer.echo(
        f"gpupool-agent: jobs with an image run with {containers.kind} ({containers.binary})"
        if containers is not None
        else "gpupool-agent: no container runtime: jobs with an image fail here",
        err=True,
    )
    stop = threading.Event()

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    client = ServerClient(server, ca_bundle=ca_bundle)  # first: a bad CA bundle stops the start here
    logs = LogServer(state_dir / "workloads", log_bind, log_port).start()
    try:
        Agent(settings, sources, client, log_url=logs.url, log_key=logs.set_key).run(stop)
    finally:
        client.close()
        logs.close()


def node_labels(words: list[str], path: Path | None) -> dict[str, str]:
    """The labels file's, then each ``--label`` over them; a bad one is an InputError naming where it is."""
    labels: dict[str, str] = {}
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise InputError(f"cannot read: {e.strerror}", source=str(path)) from None
        labels = parse_labels_file(text, str(path))
    sets, removed = parse_assignments(words, "--label")
    if removed:
        raise InputError(f"{removed[0]}-: an agent sets labels, it does not remove them", source="--label")
    return {**labels, **sets}


def _token_off_the_command_line() -> None:
    """Exec this same command again with the join token moved from argv to the environment.

    Any local user can read a process's command line (/proc/PID/cmdline); only the process's own user and
    root can read its environment. The token is on the command line only for the moment before this exec.
    """
    argv = list(sys.orig_argv)
    rest: list[str] = []
    token: str | None = None
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "--join-token" and i + 1 < len(argv):
            token, i = argv[i + 1], i + 2
            continue
        if a.startswith("--join-token="):
            token = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    if token is not None:
        os.execve(sys.executable, [argv[0], *rest], {**os.environ, "GPUPOOL_JOIN_TOKEN": token})


def _join_token(token: str | None, path: Path | None) -> str:
    if (token is None) == (path is None):
        raise InputError(
            "give the join token once: $GPUPOOL_JOIN_TOKEN, --join-token-file or --join-token", source="--join-token"
        )
    if path is not None:
        try:
            token = path.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise InputError(f"cannot read: {e.strerror}", source=str(path)) from e
    assert token is not None
    if not token:
        raise InputError("the join token is empty", source=str(path or "--join-token"))
    return token


def _isolation(
    mode: str,
    work_dir: Path | None,
    state_dir: Path,
    users: UserMap,
    cgroups: CgroupBackend | None,
    dev_dir: Path,
    pids_max: int,
) -> Isolation:
    root = os.geteuid() == 0
    if mode not in ("auto", "on", "off"):
        raise InputError(f"{mode!r}: auto, on or off", source="--isolation")
    on = root if mode == "auto" else mode == "on"
    if on and not root:
        raise InputError("running jobs as their tenants' users needs the agent to run as root", source="--isolation")
    if pids_max < 0:
        raise InputError(f"must be >= 0, not {pids_max}", source="--pids-max")
    if work_dir is None:
        work_dir = ISOLATED_WORK_ROOT if on else default_work_root(state_dir)
    if on:
        closed = [p for p in work_dir.absolute().parents if p.is_dir() and not p.stat().st_mode & stat.S_IXOTH]
        if closed:
            raise InputError(
                f"{closed[0]} is not searchable by other users, so jobs could not enter their working directories"
                " under it: choose another --work-dir",
                source="--work-dir",
            )
    return Isolation(users if on else None, work_dir, cgroups, dev_dir, pids_max)
