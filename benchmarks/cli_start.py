"""Start-up time of the ``gpupool`` command: ``--version``, ``--help`` and ``jobs`` (target: ``--version`` < 150 ms).

Each command runs ``--runs`` times as a fresh process (the console script next to this Python, as a user runs
it); the median wall time and the median CPU time (user + system of the child) are reported, in ms. ``jobs``
talks to a closed loopback port, so it measures the imports and one refused connection (it exits 2).
``--src DIR`` puts DIR first on PYTHONPATH, to time another checkout with the same environment (before/after);
``--version-argv`` replaces ``--version`` (a checkout that had ``gpupool version`` instead).
Prints one JSON line. Usage: python benchmarks/cli_start.py [--runs 10] [--src ../main/src]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: connections are refused


def _once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall * 1000, cpu * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--src", type=Path, default=None)
    ap.add_argument("--version-argv", default="--version")
    args = ap.parse_args()
    script = Path(sys.executable).parent / "gpupool"
    base = [str(script)] if script.exists() else [sys.executable, "-m", "gpupool"]
    env = dict(os.environ, GPUPOOL_SERVER=f"http://127.0.0.1:{_closed_port()}", GPUPOOL_TOKEN="x")
    if args.src is not None:
        env["PYTHONPATH"] = str(args.src.resolve())
    out: dict[str, object] = {"benchmark": "cli_start", "runs": args.runs}
    for name, extra in (("version", shlex.split(args.version_argv)), ("help", ["--help"]), ("jobs", ["jobs"])):
        _once(base + extra, env)  # warm the page cache and the bytecode files
        samples = [_once(base + extra, env) for _ in range(args.runs)]
        out[f"{name}_wall_ms"] = round(statistics.median(w for w, _ in samples), 1)
        out[f"{name}_cpu_ms"] = round(statistics.median(c for _, c in samples), 1)
    out["load_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
