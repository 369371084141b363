"""``gpupool agent``: the node agent process (one per GPU server, or one per emulated host on a build machine)."""

from __future__ import annotations

import signal
import threading
import zlib
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from gpupool.agent.daemon import (
    Agent,
    AgentSettings,
    default_host,
    emulated_sources,
    hardware_sources,
)
from gpupool.agent.logserver import LogServer
from gpupool.agent.reporter import ServerClient
from gpupool.domain.errors import InputError
from gpupool.domain.labels import parse_assignments, parse_labels_file


def agent(
    server: Annotated[
        str,
        typer.Option("--server", envvar="GPUPOOL_SERVER", help="Server URL, e.g. https://gpupool.example:8765."),
    ],
    join_token: Annotated[
        str, typer.Option("--join-token", envvar="GPUPOOL_JOIN_TOKEN", help="Join token (or $GPUPOOL_JOIN_TOKEN).")
    ],
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
) -> None:
    """Run the node agent: register with the server, report telemetry and health, run what it places here."""
    name = host or default_host()
    if interval <= 0:
        raise InputError(f"must be positive, not {interval}", source="--interval")
    labels = node_labels(label or [], labels_file)
    if emulate:
        if fabric is None:
            raise InputError("--emulate needs --fabric FABRIC.json", source="--emulate")
        sources = emulated_sources(fabric, name, state_dir / "node")
    else:
        sources = hardware_sources(sysfs_root, smi_xml, kernel_log, log=lambda m: typer.echo(m, err=True))
    settings = AgentSettings(
        server_url=server,
        join_token=join_token,
        host=name,
        state_dir=state_dir,
        interval_s=interval,
        # Each node its own jitter by default, yet the same node retries the same way run after run.
        seed=seed if seed is not None else zlib.crc32(name.encode()),
        stop_workloads_on_exit=stop_on_exit,
        labels=labels,
    )
    (state_dir / "workloads").mkdir(parents=True, exist_ok=True)
    stop = threading.Event()

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    client = ServerClient(server, ca_bundle=ca_bundle)  # first: a bad CA bundle stops the start here
    logs = LogServer(state_dir / "workloads", log_bind, log_port).start()
    try:
        Agent(settings, sources, client, log_url=logs.url).run(stop)
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
