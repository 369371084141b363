"""Cgroups for workloads: one small interface, three ways to get one (cgroupfs v1, cgroupfs v2, systemd scopes).

Each rank gets a cgroup of its own with the CPU and memory of its spec, a process limit and, where the
host enforces devices, a rule that lets it open only its own GPUs' device nodes, the control devices and
the pseudo devices every program expects. Stopping goes through the cgroup, so a child that called
``setsid`` or double-forked away from the process group is stopped too.

How a workload gets in: the launcher (``agent/launcher.py``) writes its own pid into ``join_files`` while
it is still root, before it drops privileges and execs the workload, so nothing the workload starts is ever
outside; with systemd, ``wrap`` puts ``systemd-run --scope`` in front and systemd makes the scope.

The v1 and v2 backends put jobs under the agent's own cgroup by default (``<own>/gpupool/<assignment>``),
which is what a service with ``Delegate=yes`` may do; an absolute ``parent`` puts them elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from gpupool.domain.errors import InputError

_MIB = 1 << 20
_CPU_PERIOD_US = 100_000
_POLL_S = 0.005
CgroupKind = Literal["v1", "v2", "systemd"]


@dataclass(frozen=True, slots=True)
class Device:
    """A device node a job may open (read and write). ``minor`` None: every minor of ``major``."""

    kind: Literal["c", "b"]
    major: int
    minor: int | None
    path: str = ""  # the node it was read from: what systemd's DeviceAllow= names

    def rule(self) -> str:
        return f"{self.kind} {self.major}:{'*' if self.minor is None else self.minor} rw"


# What a container runtime lets every container open: null, zero, full, random, urandom, tty, ptmx, pts.
STANDARD_DEVICES = (
    *(Device("c", 1, m) for m in (3, 5, 7, 8, 9)),
    Device("c", 5, 0),
    Device("c", 5, 2),
    Device("c", 136, None),
)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one rank may use; 0 means no limit. ``devices`` None: no device rule; a tuple: only those
    (besides ``STANDARD_DEVICES``)."""

    cpu_millicores: int = 0
    memory_mib: int = 0
    pids_max: int = 0
    devices: tuple[Device, ...] | None = None


class JobCgroup(Protocol):
    """One rank's cgroup."""

    def join_files(self) -> tuple[Path, ...]:
        """Where the launcher writes its pid to enter (none when ``wrap`` does it)."""
        ...

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as it must be started to land in the cgroup."""
        ...

    def pids(self) -> set[int]:
        """Its live processes (zombies left out: they only wait for their parent)."""
        ...

    def signal_all(self, sig: signal.Signals) -> int:
        """Send ``sig`` to every process in it; how many were signalled."""
        ...

    def kill(self, timeout_s: float = 5.0) -> bool:
        """SIGKILL everything in it, new forks included; True once it is empty."""
        ...

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of it for going over its memory limit."""
        ...

    def remove(self) -> None:
        """Delete it once empty (one with processes left, or just killed ones, stays: OSError EBUSY)."""
        ...

    def record(self) -> dict[str, object]:
        """What a restarted agent needs to find it again (``cgroup_from_record``)."""
        ...


class CgroupBackend(Protocol):
    kind: CgroupKind
    enforced: frozenset[str]  # of "cpu", "memory", "pids", "devices": what this host can hold a job to

    def create(self, name: str, limits: Limits) -> JobCgroup: ...


class CgroupUnavailableError(InputError):
    code = "CGROUP_UNAVAILABLE"


def _write(path: Path, value: str) -> None:
    with path.open("w") as f:  # one write(2) per value: the kernel parses each write on its own
        f.write(value)


def _live(pids: set[int]) -> set[int]:
    out = set()
    for pid in pids:
        try:
            raw = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if raw[raw.rindex(")") + 2 :].split()[0] != "Z":
            out.add(pid)
    return out


def _read_pids(procs: Path) -> set[int]:
    try:
        return _live({int(x) for x in procs.read_text().split()})
    except FileNotFoundError:
        return set()


def _signal_all(pids: set[int], sig: signal.Signals) -> int:
    n = 0
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
            n += 1
    return n


def _rmdir(path: Path) -> None:
    """rmdir a cgroup, once: the kernel may hold a just-killed task for a moment (EBUSY); the caller comes
    back later rather than wait here."""
    with contextlib.suppress(FileNotFoundError):
        path.rmdir()


def own_cgroups(text: str | None = None) -> tuple[dict[str, str], str | None]:
    """The calling process's cgroups from ``/proc/self/cgroup``: v1 controller -> path, and the v2 path."""
    raw = Path("/proc/self/cgroup").read_text() if text is None else text
    v1: dict[str, str] = {}
    v2: str | None = None
    for line in raw.splitlines():
        hier, ctrls, path = line.split(":", 2)
        if hier == "0" and ctrls == "":
            v2 = path
        for c in ctrls.split(","):
            if c:
                v1[c] = path
    return v1, v2


def _under(mount: Path, own: str, parent: str) -> Path:
    """``parent`` relative to the agent's own cgroup ``own``, or from the mount when it starts with '/'."""
    base = "" if parent.startswith("/") else own.strip("/")
    return mount / base / parent.strip("/")


# --- cgroup v1: one directory per controller ------------------------------------------------------------------
_V1 = ("memory", "cpu", "pids", "devices", "freezer")
_V1_FIRST = ("freezer", "pids", "memory", "devices", "cpu")  # whose cgroup.procs says who is in


@dataclass(frozen=True, slots=True)
class V1Group:
    dirs: Mapping[str, Path]

    def join_files(self) -> tuple[Path, ...]:
        return tuple(d / "cgroup.procs" for d in self.dirs.values())

    def wrap(self, argv: Sequence[str]) -> list[str]:
        return list(argv)

    def _procs(self) -> Path:
        return next(self.dirs[c] for c in _V1_FIRST if c in self.dirs) / "cgroup.procs"

    def pids(self) -> set[int]:
        return _read_pids(self._procs())

    def signal_all(self, sig: signal.Signals) -> int:
        return _signal_all(self.pids(), sig)

    def kill(self, timeout_s: float = 5.0) -> bool:
        freezer = self.dirs.get("freezer")
        deadline = time.monotonic() + timeout_s
        while True:
            if freezer is not None and freezer.is_dir():
                # Frozen, nothing can fork between our reading the list and the signals landing.
                with contextlib.suppress(OSError):
                    _write(freezer / "freezer.state", "FROZEN")
                _signal_all(self.pids(), signal.SIGKILL)
                with contextlib.suppress(OSError):
                    _write(freezer / "freezer.state", "THAWED")
            else:
                _signal_all(self.pids(), signal.SIGKILL)
            if not self.pids():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)

    def oom_killed(self) -> bool:
        mem = self.dirs.get("memory")
        if mem is None:
            return False
        with contextlib.suppress(OSError, ValueError):
            for line in (mem / "memory.oom_control").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value) > 0
        return False

    def remove(self) -> None:
        for d in self.dirs.values():
            _rmdir(d)

    def record(self) -> dict[str, object]:
        return {"kind": "v1", "dirs": {c: str(d) for c, d in self.dirs.items()}}


class CgroupV1:
    """cgroupfs v1: ``<mount>/<controller>/<parent>/<name>`` for memory, cpu, pids, devices and freezer."""

    kind: CgroupKind = "v1"

    def __init__(self, root: Path = Path("/sys/fs/cgroup"), parent: str = "gpupool") -> None:
        own, _ = own_cgroups()
        self.parents: dict[str, Path] = {}
        for c in _V1:
            mount = root / c
            if (mount / "cgroup.procs").is_file():
                self.parents[c] = _under(mount, own.get(c, "/"), parent)
        if not {"memory", "pids", "freezer"} & set(self.parents):
            raise CgroupUnavailableError(f"no cgroup v1 memory, pids or freezer hierarchy under {root}", source="v1")
        for d in self.parents.values():
            d.mkdir(parents=True, exist_ok=True)
        self.enforced: frozenset[str] = frozenset(c for c in ("memory", "cpu", "pids", "devices") if c in self.parents)

    def create(self, name: str, limits: Limits) -> V1Group:
        group = V1Group({c: d / name for c, d in self.parents.items()})
        for d in group.dirs.values():
            d.mkdir(exist_ok=True)
        try:
            self._limit(group, limits)
        except OSError:
            with contextlib.suppress(OSError):
                group.remove()
            raise
        return group

    @staticmethod
    def _limit(group: V1Group, limits: Limits) -> None:
        d = group.dirs
        if limits.memory_mib > 0 and "memory" in d:
            _write(d["memory"] / "memory.limit_in_bytes", str(limits.memory_mib * _MIB))
            if (d["memory"] / "memory.memsw.limit_in_bytes").exists():  # swap accounting on: no escape to swap
                _write(d["memory"] / "memory.memsw.limit_in_bytes", str(limits.memory_mib * _MIB))
        if limits.cpu_millicores > 0 and "cpu" in d:
            _write(d["cpu"] / "cpu.cfs_period_us", str(_CPU_PERIOD_US))
            _write(d["cpu"] / "cpu.cfs_quota_us", str(_cpu_quota_us(limits.cpu_millicores)))
        if limits.pids_max > 0 and "pids" in d:
            _write(d["pids"] / "pids.max", str(limits.pids_max))
        if limits.devices is not None and "devices" in d:
            _write(d["devices"] / "devices.deny", "a")  # allowed: only what follows
            for dev in (*STANDARD_DEVICES, *limits.devices):
                _write(d["devices"] / "devices.allow", dev.rule())


def _cpu_quota_us(millicores: int) -> int:
    return max(1000, millicores * _CPU_PERIOD_US // 1000)


# --- cgroup v2: one tree ------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class V2Group:
    dir: Path
    prefix: tuple[str, ...] = ()  # systemd-run --scope ...: systemd makes the cgroup, the launcher joins nothing
    kind: CgroupKind = "v2"

    def join_files(self) -> tuple[Path, ...]:
        return () if self.prefix else (self.dir / "cgroup.procs",)

    def wrap(self, argv: Sequence[str]) -> list[str]:
        return [*self.prefix, *argv]

    def pids(self) -> set[int]:
        return _read_pids(self.dir / "cgroup.procs")

    def signal_all(self, sig: signal.Signals) -> int:
        return _signal_all(self.pids(), sig)

    def kill(self, timeout_s: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout_s
        has_kill = (self.dir / "cgroup.kill").exists()  # Linux 5.14: the kernel kills the tree, forks included
        while True:
            if has_kill:
                with contextlib.suppress(OSError):
                    _write(self.dir / "cgroup.kill", "1")
            else:
                with contextlib.suppress(OSError):
                    _write(self.dir / "cgroup.freeze", "1")
                _signal_all(self.pids(), signal.SIGKILL)
                with contextlib.suppress(OSError):
                    _write(self.dir / "cgroup.freeze", "0")
            if not self.pids():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)

    def oom_killed(self) -> bool:
        with contextlib.suppress(OSError, ValueError):
            for line in (self.dir / "memory.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value) > 0
        return False

    def remove(self) -> None:
        _rmdir(self.dir)

    def record(self) -> dict[str, object]:
        return {"kind": self.kind, "dir": str(self.dir)}


def _limit_v2(d: Path, limits: Limits) -> None:
    if limits.memory_mib > 0 and (d / "memory.max").exists():
        _write(d / "memory.max", str(limits.memory_mib * _MIB))
        if (d / "memory.swap.max").exists():
            _write(d / "memory.swap.max", "0")
        # Over its limit the whole rank goes, not one process picked from it: no half-alive gang member.
        _write(d / "memory.oom.group", "1")
    if limits.cpu_millicores > 0 and (d / "cpu.max").exists():
        _write(d / "cpu.max", f"{_cpu_quota_us(limits.cpu_millicores)} {_CPU_PERIOD_US}")
    if limits.pids_max > 0 and (d / "pids.max").exists():
        _write(d / "pids.max", str(limits.pids_max))


class CgroupV2:
    """cgroupfs v2: ``<mount>/<own>/<parent>/<name>``. Devices are not confined: v2 does it with an eBPF
    program, which systemd attaches for us (``SystemdScopes``); this backend says so in ``enforced``."""

    kind: CgroupKind = "v2"
    _WANTED = ("cpu", "memory", "pids")

    def __init__(self, root: Path = Path("/sys/fs/cgroup"), parent: str = "gpupool") -> None:
        if not (root / "cgroup.procs").is_file():
            raise CgroupUnavailableError(f"{root} is not a cgroup v2 mount", source="v2")
        _, own = own_cgroups()
        own = own or "/"
        self.parent = _under(root, own, parent)
        if not parent.startswith("/") and own.strip("/"):
            # No internal processes: a cgroup that hands controllers to children holds no process itself, so
            # the agent steps down into a leaf of its own (what a service with Delegate=yes is expected to do).
            leaf = root / own.strip("/") / "agent"
            leaf.mkdir(exist_ok=True)
            _write(leaf / "cgroup.procs", str(os.getpid()))
        self.parent.mkdir(parents=True, exist_ok=True)
        chain = [self.parent, *self.parent.parents]
        for d in reversed(chain[: chain.index(root) + 1]):
            available = set((d / "cgroup.controllers").read_text().split())
            for c in self._WANTED:
                if c in available:
                    with contextlib.suppress(OSError):  # a delegated tree may not pass on everything
                        _write(d / "cgroup.subtree_control", f"+{c}")
        on = set((self.parent / "cgroup.subtree_control").read_text().split())
        self.enforced: frozenset[str] = frozenset(c for c in self._WANTED if c in on)

    def create(self, name: str, limits: Limits) -> V2Group:
        group = V2Group(self.parent / name)
        group.dir.mkdir(exist_ok=True)
        try:
            _limit_v2(group.dir, limits)
        except OSError:
            with contextlib.suppress(OSError):
                group.remove()
            raise
        return group


# --- systemd: a transient scope per rank ---------------------------------------------------------------------
class SystemdScopes:
    """``systemd-run --scope`` per rank in ``gpupool.slice``: systemd sets the limits, and confines devices
    on cgroup v2 (DevicePolicy=closed, DeviceAllow= per node) with the eBPF program it attaches."""

    kind: CgroupKind = "systemd"
    enforced = frozenset({"cpu", "memory", "pids", "devices"})

    def __init__(
        self, root: Path = Path("/sys/fs/cgroup"), slice_name: str = "gpupool.slice", systemd_run: str = "systemd-run"
    ) -> None:
        self.root, self.slice_name, self.systemd_run = root, slice_name, systemd_run

    def create(self, name: str, limits: Limits) -> V2Group:
        unit = f"gpupool-{name}.scope"
        return V2Group(
            self.root / self.slice_name / unit,
            tuple(systemd_run_argv(self.systemd_run, unit, self.slice_name, limits)),
            "systemd",
        )


def systemd_run_argv(systemd_run: str, unit: str, slice_name: str, limits: Limits) -> list[str]:
    """The ``systemd-run`` prefix that starts a command in a new scope ``unit`` with ``limits``."""
    argv = [systemd_run, "--scope", "--quiet", "--collect", f"--unit={unit}", f"--slice={slice_name}"]
    if limits.memory_mib > 0:
        argv += ["-p", f"MemoryMax={limits.memory_mib * _MIB}", "-p", "MemorySwapMax=0"]
    if limits.cpu_millicores > 0:
        argv += ["-p", f"CPUQuota={limits.cpu_millicores / 10:g}%"]
    if limits.pids_max > 0:
        argv += ["-p", f"TasksMax={limits.pids_max}"]
    if limits.devices is not None:
        argv += ["-p", "DevicePolicy=closed"]  # closed: the standard pseudo devices, and what is allowed below
        argv += [x for dev in limits.devices if dev.path for x in ("-p", f"DeviceAllow={dev.path} rw")]
    return [*argv, "--"]


def cgroup_from_record(record: Mapping[str, object]) -> JobCgroup:
    """A cgroup as ``JobCgroup.record`` described it (an agent restarted on the same state directory)."""
    kind = record.get("kind")
    if kind == "v1":
        dirs = record.get("dirs")
        if isinstance(dirs, dict):
            return V1Group({str(c): Path(str(d)) for c, d in dirs.items()})
    elif kind in ("v2", "systemd") and isinstance(record.get("dir"), str):
        return V2Group(Path(str(record["dir"])), kind="systemd" if kind == "systemd" else "v2")
    raise InputError(f"not a cgroup record: {dict(record)!r}", source="launch.json")


def detect(kind: str = "auto", root: Path = Path("/sys/fs/cgroup"), parent: str = "gpupool") -> CgroupBackend | None:
    """The backend ``kind`` names (auto: systemd scopes where systemd runs a v2 host, cgroupfs v2 or v1 by
    the mount, none when not root); None for "none". Raises CgroupUnavailableError when asked for one the
    host cannot give."""
    if kind == "none":
        return None
    if kind == "auto":
        if os.geteuid() != 0:
            return None
        if (root / "cgroup.controllers").is_file():
            systemd = Path("/run/systemd/system").is_dir() and shutil.which("systemd-run") is not None
            kind = "systemd" if systemd else "v2"
        elif (root / "memory" / "cgroup.procs").is_file() or (root / "pids" / "cgroup.procs").is_file():
            kind = "v1"
        else:
            return None
    if kind == "v1":
        return CgroupV1(root, parent)
    if kind == "v2":
        return CgroupV2(root, parent)
    if kind == "systemd":
        return SystemdScopes(root)
    raise InputError(f"unknown cgroup backend {kind!r} (auto, v1, v2, systemd, none)", source="--cgroups")
