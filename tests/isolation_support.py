"""What the isolation tests need from the machine: root, cgroup hierarchies, throwaway Unix users, directories
other users may enter, and a Python they may run. Each test that needs one skips, saying why, without it."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.agent.cgroups import own_cgroups
from gpupool.agent.identity import RunAs, UserMap

ROOT = os.geteuid() == 0
CGROUP = Path("/sys/fs/cgroup")
V1 = all((CGROUP / c / "cgroup.procs").is_file() for c in ("memory", "pids", "devices", "freezer"))
# A cgroup2 mount beside the v1 hierarchies (hybrid hosts, like the build machines) or at the root (v2 hosts).
V2_MOUNT = next((m for m in (CGROUP / "unified", CGROUP) if (m / "cgroup.subtree_control").is_file()), None)

needs_root = pytest.mark.skipif(not ROOT, reason="switching users needs the tests to run as root")
needs_v1 = pytest.mark.skipif(
    not (ROOT and V1), reason="needs root and cgroup v1 memory, pids, devices and freezer hierarchies"
)
needs_v2 = pytest.mark.skipif(not (ROOT and V2_MOUNT), reason="needs root and a writable cgroup2 mount")


def _others_may_run(path: Path) -> bool:
    real = path.resolve()
    return all(p.stat().st_mode & stat.S_IXOTH for p in (real, *real.parents))


def python_for_others() -> str:
    """A Python an unprivileged user may execute: this one unless it sits under a private directory (a
    virtual environment made from a Python under /root), else the system's."""
    if _others_may_run(Path(sys.executable)):
        return sys.executable
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system is None:
        pytest.skip("no Python that an unprivileged user may run (the test's own is under a private directory)")
    return system


@contextlib.contextmanager
def throwaway_users(n: int) -> Iterator[list[RunAs]]:
    """``n`` fresh system users (``gpt<hex>-<i>``), deleted afterwards."""
    tag = secrets.token_hex(3)
    names = [f"gpt{tag}-{i}" for i in range(n)]
    mapping = {name: name for name in names}
    try:
        yield [UserMap(mapping, create=True).resolve(name) for name in names]
    finally:
        for name in names:
            subprocess.run(["userdel", name], capture_output=True, check=False)


@contextlib.contextmanager
def open_dir(prefix: str = "gpupool-iso-") -> Iterator[Path]:
    """A directory under /tmp that other users may enter but not list (mode 0711), removed afterwards.
    pytest's own tmp_path sits under a 0700 directory of root's, which no job user can enter."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    d.chmod(0o711)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def remove_cgroups(parent: str) -> None:
    """Remove what a test left under ``parent`` (relative to this process's own cgroups) in every hierarchy."""
    v1, v2 = own_cgroups()
    tops = [CGROUP / c / v1.get(c, "/").strip("/") / parent for c in ("memory", "cpu", "pids", "devices", "freezer")]
    if V2_MOUNT is not None:
        tops.append(V2_MOUNT / (v2 or "/").strip("/") / parent)
    for top in tops:
        if top.is_dir():
            for child in sorted((p for p in top.iterdir() if p.is_dir()), reverse=True):
                with contextlib.suppress(OSError):
                    child.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()


def mknod(path: Path, major: int, minor: int) -> None:
    """A character device node anyone may open (stand-ins for /dev/nvidiaN on a machine without GPUs)."""
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    path.chmod(0o666)
