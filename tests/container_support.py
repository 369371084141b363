"""A tiny container image made on the spot (no registry is reachable here): Debian's static busybox in a root
file system, imported with ``podman import``. Used by tests/e2e/test_containers.py and
benchmarks/container_launch.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static
APPLETS = ("sh", "env", "id", "pwd", "cat", "sleep", "echo", "true", "test")
# The sandboxes these run in refuse setrlimit on a container's init (Podman's default ulimits), as
# scripts/smoke-images says; a real node keeps its own containers.conf. Point CONTAINERS_CONF at it.
SANDBOX_CONF = "[containers]\ndefault_ulimits = []\n"


def podman(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=False)


def rootfs_tarball(root: Path) -> Path:
    fs = root / "rootfs"
    (fs / "bin").mkdir(parents=True)
    (fs / "tmp").mkdir(mode=0o1777)
    shutil.copy2(BUSYBOX, fs / "bin" / "busybox")
    for applet in APPLETS:
        (fs / "bin" / applet).symlink_to("busybox")
    tar = root / "busybox-rootfs.tar"
    subprocess.run(["tar", "-C", str(fs), "-cf", str(tar), "."], check=True)
    return tar


def busybox_image(root: Path, name: str) -> str:
    """Import the image as ``name`` and run it once; "" when that works, else what failed (one line)."""
    if shutil.which("podman") is None or not BUSYBOX.is_file():
        return "needs podman and busybox-static (apt-get install podman runc busybox-static)"
    made = podman("import", str(rootfs_tarball(root)), name)
    if made.returncode != 0:
        return f"podman import cannot make an image here: {made.stderr.strip().splitlines()[-1:]}"
    ran = podman("run", "--rm", "--network", "host", name, "/bin/true")
    if ran.returncode != 0:
        podman("rmi", "-f", name)
        return f"podman cannot run a container here: {ran.stderr.strip().splitlines()[-1:]}"
    return ""
