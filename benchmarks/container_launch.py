"""What a container costs a rank on the node: the agent's runtime running ``/bin/true`` on the host and in a
Podman container (the command line ``agent/containers.py`` builds, through the same launcher), launch until
the exit is seen and the rank cleaned up (the container's removal included), and a container's stop
(``sleep 60``: SIGTERM through Podman to its init, until every process is gone and the container removed).

The image is the tests' busybox (tests/container_support.py), already in Podman's store after its first
import, as a cached image on a node. Prints one JSON line: median and p90 milliseconds per measure, and the
CPU seconds of the agent process with the children it waited for (Podman; conmon and runc are not its
children, so a container's CPU is under-counted by theirs).
Usage: python benchmarks/container_launch.py [--n 20]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import numpy as np

from container_support import SANDBOX_CONF, busybox_image, podman
from gpupool.agent.containers import NodeDevices, Rank, build, find_runtime, write_env_file
from gpupool.agent.runtime import Confinement, WorkloadRuntime, WorkloadState
from gpupool.domain.containers import Container

ENV = {"PATH": "/usr/bin:/bin"}


def cpu_s() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def until_done(rt: WorkloadRuntime, aid: str) -> None:
    """Poll (1 ms) until the rank exited: the poll that sees it also cleans up (removes its container)."""
    while rt.poll()[aid].state is WorkloadState.RUNNING:
        time.sleep(0.001)


def stats(ms: list[float], cpu: float, n: int) -> dict[str, float]:
    return {
        "ms_p50": round(float(np.percentile(ms, 50)), 1),
        "ms_p90": round(float(np.percentile(ms, 90)), 1),
        "cpu_ms_per_rank": round(cpu * 1000 / n, 1),
    }


def measure(n: int, one: Callable[[int], tuple[float, float]]) -> dict[str, float]:
    """``one(i)`` answers (milliseconds, CPU seconds) of what it timed."""
    runs = [one(i) for i in range(n)]
    return stats([ms for ms, _ in runs], sum(cpu for _, cpu in runs), n)


def timed(t0: float, c0: float) -> tuple[float, float]:
    return (time.perf_counter() - t0) * 1000, cpu_s() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20)
    args = ap.parse_args()
    place = Path(tempfile.mkdtemp(prefix="gpupool-bench-"))
    conf = place / "containers.conf"
    conf.write_text(SANDBOX_CONF)
    os.environ.setdefault("CONTAINERS_CONF", str(conf))
    image = f"localhost/gpupool-bench-busybox:{os.getpid()}"
    out: dict[str, object] = {"benchmark": "container_launch", "n": args.n}
    try:
        failed = busybox_image(place, image)
        if failed:
            out["skipped"] = failed
            return
        rt = WorkloadRuntime(place / "state")
        podman_rt = find_runtime("podman", os.environ)
        assert podman_rt is not None
        node = NodeDevices(False, frozenset())

        def container(aid: str, argv: list[str]) -> tuple[tuple[str, ...], dict[str, str], Confinement]:
            d = rt.state_dir / aid
            rank = Rank(aid, Container(image), {"RANK": "0"}, (), "", str(d), None, None, os.geteuid())
            launch = build(podman_rt, rank, node, argv)
            write_env_file(launch, d)
            return launch.argv, launch.env, Confinement(container=launch.hold)

        def host_true(i: int) -> tuple[float, float]:
            t0, c0 = time.perf_counter(), cpu_s()
            rt.launch(f"h{i}", ["/bin/true"], ENV)
            until_done(rt, f"h{i}")
            return timed(t0, c0)

        def container_true(i: int) -> tuple[float, float]:
            t0, c0 = time.perf_counter(), cpu_s()
            argv, env, hold = container(f"c{i}", ["/bin/true"])
            rt.launch(f"c{i}", argv, env, confine=hold)
            until_done(rt, f"c{i}")
            return timed(t0, c0)

        def container_stop(i: int) -> tuple[float, float]:
            argv, env, hold = container(f"s{i}", ["sleep", "60"])
            rt.launch(f"s{i}", argv, env, confine=hold)
            while podman("container", "exists", f"gpupool-s{i}").returncode != 0:
                time.sleep(0.01)  # started: the container exists (neither timed nor counted)
            t0, c0 = time.perf_counter(), cpu_s()
            rt.stop(f"s{i}", grace_s=10.0)
            until_done(rt, f"s{i}")
            return timed(t0, c0)

        load0 = os.getloadavg()[0]
        out["host_true"] = measure(args.n, host_true)
        out["container_true"] = measure(args.n, container_true)
        out["container_stop"] = measure(args.n, container_stop)
        left = podman("ps", "-a", "--filter", "label=io.gpupool.assignment", "--format", "{{.Names}}").stdout.split()
        out["containers_left"] = len([n for n in left if n.startswith("gpupool-")])
        out["loadavg_1m"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    finally:
        podman("rmi", "-f", image)
        shutil.rmtree(place, ignore_errors=True)
        print(json.dumps(out))


if __name__ == "__main__":
    main()
