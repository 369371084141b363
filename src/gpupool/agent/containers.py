"""A rank in a container: the node's container runtime, and the command line that runs one rank in it.

``build`` is pure: from the runtime, the rank (its ``Container``, environment, GPUs, working directory, user,
limits) and what the node offers for GPUs (``NodeDevices``) it answers a ``ContainerLaunch``: the argv the
runtime is exec'd with (through the launcher, like any workload), the runtime's own environment, the
variables the container gets, how its container is removed, and notes on what could not be passed.

Every runtime gets the same rank: the multi-node environment (RANK, WORLD_SIZE, MASTER_ADDR, NCCL_IB_HCA,
...) inside, the host's network (NCCL's sockets and the RDMA devices), the rank's working directory bound at
its own path (so GPUPOOL_HOSTFILE, HOME and TMPDIR mean the same inside), the job's mounts, its GPUs:

- Podman (tested here): rootful, ``--user`` the job's mapped user with no-new-privileges, ``--init`` so its
  signals (SIGTERM, the checkpoint's SIGUSR1) reach the workload, ``--rm`` and a name (``gpupool-<assignment>``)
  so a stop can remove it; variables in an ``--env-file`` of the agent's (never on a command line, never in
  the environment of a root process); GPUs by CDI (``--device nvidia.com/gpu=UUID``) when NVIDIA's CDI spec
  is on the node, else the device nodes (``/dev/nvidiaN``, the control devices) that exist here. Its exit
  status is the container's, so the rank's.
- Apptainer and enroot (command lines built and unit-tested; not run on a real runtime here): run as the
  job's user by the launcher; their variables through the process environment (``APPTAINERENV_*``,
  ``enroot start --env KEY``), GPUs by ``--nv`` / ``NVIDIA_VISIBLE_DEVICES``; nothing outlives their process
  tree, so there is nothing to remove.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from gpupool.agent.cgroups import Limits
from gpupool.agent.gpu import GpuInventory
from gpupool.agent.identity import RunAs
from gpupool.agent.runtime import Confinement, ContainerHold
from gpupool.domain.containers import Container, Mount, check_container
from gpupool.domain.errors import InputError
from gpupool.schemas import agent as wire

CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
CDI_SPECS = (Path("/etc/cdi/nvidia.yaml"), Path("/var/run/cdi"))  # a file; a folder of *.yaml
NAME_PREFIX = "gpupool-"  # a rank's container is gpupool-<assignment id>
LABEL = "io.gpupool.assignment"  # and is labelled with it: `podman ps -a --filter label=io.gpupool.assignment`
ENV_FILE = "container.env"  # in the assignment's state directory (the agent's, 0700): Podman's --env-file
SHM_SIZE = "8g"  # /dev/shm of a Podman container (its default, 64 MiB, is too small for NCCL and data loaders)
# What the runtime process itself may take from the agent's environment: where it finds its helpers
# (runc, conmon), its configuration (CONTAINERS_CONF: default ulimits, the OCI runtime), its state.
HOST_ENV = (
    "PATH",
    "CONTAINERS_CONF",
    "CONTAINERS_STORAGE_CONF",
    "CONTAINERS_REGISTRIES_CONF",
    "XDG_RUNTIME_DIR",
    "APPTAINER_CACHEDIR",
    "ENROOT_DATA_PATH",
    "ENROOT_CACHE_PATH",
    "ENROOT_RUNTIME_PATH",
)
# Podman's own failure (podman-run(1)): the image not found or not pulled, a bad option, the OCI runtime's
# error. Its 126 and 127 (a command that cannot run, or is not in the image) never come with --init:
# catatonit, the container's init, exits 1 then ("failed to exec pid1"), as the workload itself may.
PODMAN_FAILURES = {125: "podman could not run the container"}
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class RuntimeKind(StrEnum):
    PODMAN = "podman"
    APPTAINER = "apptainer"
    ENROOT = "enroot"


@dataclass(frozen=True, slots=True)
class ContainerRuntime:
    kind: RuntimeKind
    binary: str  # absolute path
    env: Mapping[str, str] = field(default_factory=dict)  # the runtime process's own (HOST_ENV of the agent's)


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """What this node offers to pass GPUs: NVIDIA's CDI spec, or the device nodes that exist."""

    cdi: bool
    present: frozenset[str]  # device node paths that exist (/dev/nvidia0, /dev/nvidiactl, /dev/infiniband/uverbs0)
    dev_dir: str = "/dev"


@dataclass(frozen=True, slots=True)
class Rank:
    assignment_id: str
    container: Container
    env: Mapping[str, str]  # the variables the container gets
    gpus: Sequence[tuple[str, int]]  # (UUID or "", minor number) of each of its GPUs
    workdir: str  # its working directory on the node ("": none), bound at the same path
    state_dir: str  # the assignment's state directory (the agent's): where the env file goes
    run_as: RunAs | None = None
    limits: Limits | None = None
    agent_uid: int = 0


@dataclass(frozen=True, slots=True)
class ContainerLaunch:
    argv: tuple[str, ...]
    env: dict[str, str]  # the runtime process's environment
    hold: ContainerHold
    env_file: str = ""  # text of ENV_FILE in the state directory ("" none)
    notes: tuple[str, ...] = ()  # what could not be passed, and why


def find_runtime(
    choice: str, env: Mapping[str, str], which: Callable[[str, str | None], str | None] | None = None
) -> ContainerRuntime | None:
    """The node's runtime: ``choice`` podman, apptainer or enroot (InputError naming --container-runtime when
    it is not on PATH), ``auto`` the first of them on PATH (None if none), ``none`` None."""
    look = which or (lambda name, path: shutil.which(name, path=path))
    own = {k: env[k] for k in HOST_ENV if k in env}
    own.setdefault("PATH", DEFAULT_PATH)
    if choice == "none":
        return None
    kinds = list(RuntimeKind) if choice == "auto" else [k for k in RuntimeKind if k.value == choice]
    if not kinds:
        raise InputError(f"{choice!r}: auto, podman, apptainer, enroot or none", source="--container-runtime")
    for kind in kinds:
        found = look(kind.value, own["PATH"])
        if found:
            return ContainerRuntime(kind, found, own)
    if choice != "auto":
        raise InputError(f"{choice} is not on PATH ({own['PATH']})", source="--container-runtime")
    return None


def probe_devices(dev_dir: Path = Path("/dev"), cdi: Sequence[Path] = CDI_SPECS) -> NodeDevices:
    """NVIDIA's CDI spec present (a file, or a folder with a *.yaml), and the GPU and RDMA device nodes here."""
    has_cdi = any(p.is_file() or (p.is_dir() and any(p.glob("*.yaml"))) for p in cdi)
    present = {str(p) for p in dev_dir.glob("nvidia*")}
    rdma = dev_dir / "infiniband"
    if rdma.is_dir():
        present |= {str(p) for p in rdma.iterdir()}
    return NodeDevices(has_cdi, frozenset(present), str(dev_dir))


def gpu_devices(rank: Rank, node: NodeDevices) -> tuple[list[str], list[str]]:
    """(device arguments, device nodes left out because they are not on this node)."""
    if node.cdi:
        return [f"nvidia.com/gpu={uuid or minor}" for uuid, minor in rank.gpus], []
    dev = node.dev_dir.rstrip("/")
    wanted = [f"{dev}/nvidia{minor}" for _, minor in rank.gpus]
    if rank.gpus:
        wanted += [f"{dev}/{n}" for n in CONTROL_DEVICES]
    wanted += sorted(p for p in node.present if p.startswith(f"{dev}/infiniband/"))
    return [p for p in wanted if p in node.present], [p for p in wanted if p not in node.present]


def _binds(rank: Rank) -> list[tuple[str, str, bool]]:
    out = [(rank.workdir, rank.workdir, False)] if rank.workdir else []
    return out + [(m.source, m.target, m.read_only) for m in rank.container.mounts]


def _podman(rt: ContainerRuntime, rank: Rank, node: NodeDevices) -> ContainerLaunch:
    name = NAME_PREFIX + rank.assignment_id
    env_file = f"{rank.state_dir}/{ENV_FILE}"
    argv = [rt.binary, "run", "--rm", "--name", name, "--label", f"{LABEL}={rank.assignment_id}", "--init"]
    argv += ["--network", "host", "--shm-size", SHM_SIZE, "--env-file", env_file]
    if rank.run_as is not None:
        argv += ["--user", f"{rank.run_as.uid}:{rank.run_as.gid}", "--security-opt", "no-new-privileges"]
        argv += [a for g in rank.run_as.groups if g != rank.run_as.gid for a in ("--group-add", str(g))]
    elif rank.agent_uid != 0:
        argv += ["--userns", "keep-id"]  # rootless: the agent's own user inside, as outside
    for src, dst, ro in _binds(rank):
        argv += ["--volume", f"{src}:{dst}{':ro' if ro else ''}"]
    workdir = rank.container.workdir or rank.workdir
    if workdir:
        argv += ["--workdir", workdir]
    devices, missing = gpu_devices(rank, node)
    argv += [a for d in devices for a in ("--device", d)]
    lim = rank.limits
    if lim is not None:
        if lim.cpu_millicores:
            argv += ["--cpus", f"{lim.cpu_millicores / 1000:g}"]
        if lim.memory_mib:
            argv += ["--memory", f"{lim.memory_mib}m"]
        if lim.pids_max:
            argv += ["--pids-limit", str(lim.pids_max)]
    argv.append(rank.container.image)
    teardown = (rt.binary, "rm", "--force", "--ignore", "--time", "0", name)
    text = "".join(f"{k}={v}\n" for k, v in sorted(rank.env.items()))
    return ContainerLaunch(
        tuple(argv),
        dict(rt.env),
        ContainerHold(teardown, dict(rt.env), runtime_as_root=True, failures=PODMAN_FAILURES),
        text,
        _notes(missing),
    )


def _apptainer(rt: ContainerRuntime, rank: Rank, node: NodeDevices) -> ContainerLaunch:
    argv = [rt.binary, "exec", "--cleanenv", "--contain"]
    if rank.gpus:
        argv.append("--nv")
    for src, dst, ro in _binds(rank):
        argv += ["--bind", f"{src}:{dst}{':ro' if ro else ''}"]
    rdma = f"{node.dev_dir.rstrip('/')}/infiniband"
    if any(p.startswith(rdma + "/") for p in node.present):
        argv += ["--bind", rdma]
    workdir = rank.container.workdir or rank.workdir
    if workdir:
        argv += ["--pwd", workdir]
    argv.append(rank.container.image)
    env = {**rt.env, **{f"APPTAINERENV_{k}": v for k, v in rank.env.items()}}
    return ContainerLaunch(tuple(argv), env, ContainerHold())


def _enroot(rt: ContainerRuntime, rank: Rank, node: NodeDevices) -> ContainerLaunch:
    if rank.container.workdir:
        raise InputError("enroot has no working-directory option: leave workdir out", source="workdir")
    argv = [rt.binary, "start", "--rw"]
    for src, dst, ro in _binds(rank):
        argv += ["--mount", f"{src}:{dst}:none:x-create=auto,rbind{',ro' if ro else ''}"]
    env = {**rt.env, **rank.env}
    if rank.gpus:
        env["NVIDIA_VISIBLE_DEVICES"] = ",".join(uuid or str(minor) for uuid, minor in rank.gpus)
        env.setdefault("NVIDIA_DRIVER_CAPABILITIES", "compute,utility")
    keys = sorted(set(rank.env) | ({"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"} if rank.gpus else set()))
    argv += [a for k in keys for a in ("--env", k)]
    argv.append(rank.container.image)
    return ContainerLaunch(tuple(argv), env, ContainerHold())


def _notes(missing: Sequence[str]) -> tuple[str, ...]:
    if not missing:
        return ()
    return (f"not on this node, not passed to the container: {', '.join(missing)}",)


_BUILDERS = {RuntimeKind.PODMAN: _podman, RuntimeKind.APPTAINER: _apptainer, RuntimeKind.ENROOT: _enroot}


def build(rt: ContainerRuntime, rank: Rank, node: NodeDevices, argv: Sequence[str]) -> ContainerLaunch:
    """How ``rt`` runs ``argv`` as ``rank``; InputError naming the field when the rank cannot be run so."""
    check_container(rank.container, rank.env)
    out = _BUILDERS[rt.kind](rt, rank, node)
    return ContainerLaunch((*out.argv, *argv), out.env, out.hold, out.env_file, out.notes)


def write_env_file(launch: ContainerLaunch, state_dir: Path) -> None:
    """The container's variables, readable by the agent only (the runtime reads it as root)."""
    if not launch.env_file:
        return
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(state_dir / ENV_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(launch.env_file)


def containerize(
    rt: ContainerRuntime | None,
    cmd: wire.LaunchCommand,
    env: Mapping[str, str],
    confine: Confinement,
    gpus: Sequence[GpuInventory],
    state_root: Path,
    log: Callable[[str], None],
    dev_dir: Path = Path("/dev"),
) -> tuple[tuple[str, ...], dict[str, str], Confinement]:
    """The agent's launch of ``cmd`` (its env and hold as isolation planned them) turned into its runtime's:
    (argv, the runtime's env, the confinement holding the runtime). The env file is written here; what the
    node could not pass is logged. InputError when this node has no runtime or the rank cannot run so."""
    spec = cmd.container
    assert spec is not None
    if rt is None:
        raise InputError("this node has no container runtime (see gpupool agent --container-runtime)", source="image")
    mounts = tuple(Mount(m.source, m.target, m.read_only) for m in spec.mounts)
    by_index = {g.index: g for g in gpus}
    ids = []
    for i in cmd.gpus:
        g = by_index.get(i)
        ids.append((g.uuid, g.minor_number if g.minor_number is not None else i) if g is not None else ("", i))
    d = state_root / cmd.assignment_id
    workdir = str(confine.work_root / cmd.assignment_id) if confine.work_root is not None else ""
    rank = Rank(
        cmd.assignment_id,
        Container(spec.image, mounts, spec.workdir),
        env,
        ids,
        workdir,
        str(d),
        confine.run_as,
        confine.limits,
        os.geteuid(),
    )
    out = build(rt, rank, probe_devices(dev_dir), cmd.argv)
    write_env_file(out, d)
    for note in out.notes:
        log(f"{cmd.assignment_id}: {note}")
    return out.argv, out.env, replace(confine, container=out.hold)
