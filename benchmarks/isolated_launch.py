"""What isolating a workload costs the agent: ``WorkloadRuntime.launch`` (fork -> the workload exec'd) and
``stop`` (SIGTERM -> every process gone), three ways on the same machine and minute:

- ``plain``: the launcher only, as the agent's own user, no cgroup (what an agent not run as root does);
- ``user``: as a throwaway user, in a private working directory (no cgroup);
- ``cgroup``: as that user and in a cgroup v1 of its own with a device rule (what a root agent does here).

The workload is ``/bin/sleep 60``: its start-up costs nothing, so the numbers are the agent's. Prints one
JSON line: median and p90 milliseconds of launch and stop per mode, and the agent's CPU seconds per launch.
Needs root and cgroup v1 for the last two modes (they are left out, with the reason, otherwise).
Usage: python benchmarks/isolated_launch.py [--n 40]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import numpy as np

from gpupool.agent.cgroups import CgroupV1, Limits
from gpupool.agent.identity import RunAs
from gpupool.agent.runtime import Confinement, WorkloadRuntime
from isolation_support import V1, remove_cgroups, throwaway_users

ARGV = ["/bin/sleep", "60"]
ENV = {"PATH": "/usr/bin:/bin"}


def run(mode: str, n: int, user: RunAs | None, place: Path) -> dict[str, float]:
    parent = f"gpupool-bench-{secrets.token_hex(3)}"
    cg = CgroupV1(parent=parent) if mode == "cgroup" else None
    rt = WorkloadRuntime(place / mode / "state", cgroups=cg)
    hold = Confinement(
        run_as=user,
        work_root=place / mode / "work" if user else None,
        limits=Limits(1000, 256, 100, ()) if cg else None,
        umask=0o077 if user else None,
        no_new_privs=user is not None,
    )
    launch, stop = [], []
    cpu0 = time.process_time()
    try:
        for i in range(n):
            t0 = time.perf_counter()
            rt.launch(f"a{i}", ARGV, ENV, confine=hold)
            t1 = time.perf_counter()
            rt.stop(f"a{i}", grace_s=5.0)
            t2 = time.perf_counter()
            launch.append((t1 - t0) * 1000)
            stop.append((t2 - t1) * 1000)
        cpu = (time.process_time() - cpu0) / n
    finally:
        if cg is not None:
            remove_cgroups(parent)
    return {
        "launch_ms_p50": round(float(np.percentile(launch, 50)), 1),
        "launch_ms_p90": round(float(np.percentile(launch, 90)), 1),
        "stop_ms_p50": round(float(np.percentile(stop, 50)), 1),
        "agent_cpu_ms_per_launch_and_stop": round(cpu * 1000, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    args = ap.parse_args()
    place = Path(tempfile.mkdtemp(prefix="gpupool-bench-"))
    place.chmod(0o711)
    out: dict[str, object] = {"benchmark": "isolated_launch", "n": args.n}
    try:
        out["plain"] = run("plain", args.n, None, place)
        if os.geteuid() != 0 or not V1:
            out["skipped"] = "user and cgroup modes need root and cgroup v1"
        else:
            with throwaway_users(1) as (user,):
                out["user"] = run("user", args.n, user, place)
                out["cgroup"] = run("cgroup", args.n, user, place)
    finally:
        shutil.rmtree(place, ignore_errors=True)
    out["loadavg_1m"] = os.getloadavg()[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
