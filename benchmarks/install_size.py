"""What each install of gpupool weighs: the wheels it downloads, the disk it takes, the time pip needs.

Builds gpupool's wheel from this checkout, then for each extra (the base install, agent, server, sim, all):
downloads the wheels it needs at the tested versions (constraints.txt) and sums their sizes, then installs
them into a fresh virtual environment from those files alone (``--no-index``: the time is pip's work, not
the network's) and measures the environment's size on disk. Before 0.2.0 every install was today's ``all``.
Prints one JSON line. Usage: python benchmarks/install_size.py [--extras ,agent,server,sim,all]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(*argv: str | Path) -> None:
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, argv))} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--extras", default=",agent,server,sim,all", help="comma-separated; empty = the base install")
    args = ap.parse_args()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    constraints = REPO / "constraints.txt"
    out: dict[str, object] = {"benchmark": "install_size"}
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        _run(*pip, "wheel", "--no-deps", "-q", "-w", tmp / "dist", REPO)
        (wheel,) = (tmp / "dist").glob("gpupool-*.whl")
        out["gpupool_wheel_kb"] = round(wheel.stat().st_size / 1024, 1)
        extras: dict[str, object] = {}
        for extra in args.extras.split(","):
            req = f"gpupool{f'[{extra}]' if extra else ''} @ {wheel.as_uri()}"
            files = tmp / f"wheels-{extra or 'base'}"
            _run(*pip, "download", "-q", "--only-binary=:all:", "-c", constraints, "-d", files, req)
            venv = tmp / f"venv-{extra or 'base'}"
            _run(sys.executable, "-m", "venv", "--without-pip", venv)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            _run(*pip, "--python", venv / "bin" / "python", "install", "-q", "--no-index", "-f", files, req)
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
            wheels = list(files.glob("*.whl"))
            extras[extra or "base"] = {
                "dists": len(wheels),
                "wheels_mb": round(sum(w.stat().st_size for w in wheels) / 2**20, 1),
                "installed_mb": round(_du(venv / "lib") / 2**20, 1),
                "install_s": round(wall, 1),
                "install_cpu_s": round(cpu, 1),
            }
        out["extras"] = extras
    out["load_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
