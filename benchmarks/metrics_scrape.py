"""One Prometheus scrape of ``/metrics`` on a server holding a 1,023-host SuperPOD with telemetry from every host.

Starts a real server process on 127.0.0.1 (SQLite in a temporary folder), PUTs ``superpod(32)``, registers every
host as its agent would and sends one heartbeat per host with a sample of each GPU and HCA port (and one XID),
then GETs ``/metrics`` ``--runs`` times. ``scrape_ms`` is the wall time of one GET; ``server_cpu_ms`` the
server process's CPU per scrape (from its own ``process_cpu_seconds_total``, read before and after the runs).
Prints one JSON line.

    .venv/bin/python benchmarks/metrics_scrape.py [--sus 32] [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from gpupool.fabric import jsonio
from gpupool.fabric.generators import superpod

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from webcluster import inventory

TOKEN = "bench-admin-token"
LAUNCHER = r"""
import socket, sys
import uvicorn
from gpupool.server.app import create_app
from gpupool.server.settings import Settings

app = create_app(Settings(data_dir=sys.argv[1], admin_token=sys.argv[2], node_lost_after_s=86400.0))
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen(128)
print(sock.getsockname()[1], flush=True)
uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
"""


def seed(c: httpx.Client, sus: int) -> tuple[int, int]:
    fabric = superpod(sus)
    c.put("/v1/fabric", json=jsonio.to_dict(fabric)).raise_for_status()
    join = c.post("/v1/join-tokens", json={}).json()["token"]
    for n, host in enumerate(fabric.hosts):
        body = inventory(fabric, host)
        r = c.post("/v1/agents/register", json=body, headers={"Authorization": f"Bearer {join}"})
        r.raise_for_status()
        node = {"Authorization": f"Bearer {r.json()['node_token']}"}
        beat = {
            "seq": 1,
            "at_s": time.time(),
            "gpus": [
                {
                    "index": g.index,
                    "utilization_pct": 50.0,
                    "memory_used_mib": 4096,
                    "temperature_c": 55.0,
                    "power_w": 400.0,
                }
                for g in host.gpus
            ],
            "ports": [
                {
                    "hca": h["name"],
                    "state": "up",
                    "xmit_gbps": 100.0,
                    "rcv_gbps": 100.0,
                    "xmit_wait_per_s": 1.0,
                    "errors_per_s": 0.0,
                }
                for h in body["hcas"]
            ],
            "xids": [{"gpu": 0, "code": 48, "at_s": time.time()}] if n % 100 == 0 else [],
        }
        c.post(f"/v1/agents/{host.name}/heartbeat", json=beat, headers=node).raise_for_status()
    return len(fabric.hosts), fabric.gpu_count


def cpu_s(text: str) -> float:
    (line,) = [x for x in text.splitlines() if x.startswith("process_cpu_seconds_total ")]
    return float(line.split()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sus", type=int, default=32)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, tmp, TOKEN], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            base = f"http://127.0.0.1:{int(proc.stdout.readline())}"
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60.0) as c:
                hosts, gpus = seed(c, args.sus)
                before = cpu_s(c.get("/metrics").text)
                walls, size, series = [], 0, 0
                for _ in range(args.runs):
                    t0 = time.perf_counter()
                    r = c.get("/metrics")
                    walls.append(time.perf_counter() - t0)
                    r.raise_for_status()
                    size = len(r.content)
                    series = sum(1 for x in r.text.splitlines() if x and not x.startswith("#"))
                after = cpu_s(c.get("/metrics").text)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    print(
        json.dumps(
            {
                "benchmark": "metrics_scrape",
                "hosts": hosts,
                "gpus": gpus,
                "runs": args.runs,
                "series": series,
                "bytes": size,
                "scrape_ms_median": round(statistics.median(walls) * 1000, 1),
                "scrape_ms_max": round(max(walls) * 1000, 1),
                "server_cpu_ms_per_scrape": round((after - before) / (args.runs + 1) * 1000, 1),
                "load_1m": round(os.getloadavg()[0], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
