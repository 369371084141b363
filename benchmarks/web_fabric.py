"""The fabric page of a generated 1,000-host fabric: load and render time measured in the browser.

Starts a real server process on 127.0.0.1 (SQLite in a temporary folder) with the dashboard mounted, PUTs
``superpod(32)`` (1,023 DGX H100 hosts), registers every host as its agent would, submits jobs that hold
about a third of the GPUs, then opens ``/ui/fabric`` in headless Chromium ``--runs`` times. The page marks
its own first fetch and draw with ``performance.now()``; ``since_navigation_ms`` is navigation start to the
first complete draw (HTML, scripts, the JSON payload and the canvas). Prints one JSON line.

    .venv/bin/python benchmarks/web_fabric.py [--sus 32] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

from gpupool.fabric import jsonio
from gpupool.fabric.generators import superpod

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "bench-admin-token"
LAUNCHER = r"""
import socket, sys
import uvicorn
from gpupool.server.app import create_app
from gpupool.server.settings import Settings
from gpupool.web import mount

app = create_app(Settings(data_dir=sys.argv[1], admin_token=sys.argv[2], node_lost_after_s=86400.0))
mount(app)
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen(128)
print(sock.getsockname()[1], flush=True)
uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
"""


def seed(base: str, sus: int) -> tuple[int, int]:
    fabric = superpod(sus)
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60.0) as c:
        c.put("/v1/fabric", json=jsonio.to_dict(fabric)).raise_for_status()
        join = c.post("/v1/join-tokens", json={}).json()["token"]
        for host in fabric.hosts:
            hcas = [fabric.hcas[fabric.hca_index(g)] for g in host.hcas]
            inventory = {
                "host": host.name,
                "gpus": [{"index": g.index, "model": g.model, "memory_mib": g.memory_mib} for g in host.gpus],
                "hcas": [{"name": h.name, "guid": h.guid, "rate_gbps": h.rate_gbps} for h in hcas],
            }
            r = c.post("/v1/agents/register", json=inventory, headers={"Authorization": f"Bearer {join}"})
            r.raise_for_status()
        c.post("/v1/tenants", json={"name": "bench"}).raise_for_status()
        jobs = len(fabric.hosts) // 3 // 4
        for _ in range(jobs):
            body = {"command": ["sleep", "1"], "tenant": "bench", "tasks": 4, "gpus_per_task": 8}
            c.post("/v1/jobs", json=body).raise_for_status()
        # Wait until the loop has placed them (each holds 32 GPUs), so the page draws a loaded fabric.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            placed = c.get("/v1/jobs", params={"state": "placed", "limit": 1000}).json()["jobs"]
            if len(placed) >= jobs:
                break
            time.sleep(0.5)
    return len(fabric.hosts), fabric.gpu_count


def measure(base: str, runs: int) -> list[dict[str, float]]:
    from playwright.sync_api import sync_playwright

    out = []
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, args=ARGS, headless=True, viewport={"width": 1600, "height": 1000}
        )
        ctx.add_init_script(f"sessionStorage.setItem('gpupool.token', {json.dumps(TOKEN)})")
        for _ in range(runs):
            page = ctx.new_page()
            page.goto(base + "/ui/fabric")
            page.wait_for_selector("canvas#fabric[data-ready='1']", timeout=30_000)
            out.append(page.evaluate("() => GP.timing"))
            page.close()
        ctx.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sus", type=int, default=32)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, tmp, TOKEN], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            base = f"http://127.0.0.1:{int(proc.stdout.readline())}"
            hosts, gpus = seed(base, args.sus)
            payload = len(httpx.get(base + "/ui/api/fabric", headers={"Authorization": f"Bearer {TOKEN}"}).content)
            timings = measure(base, args.runs)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    total = [t["since_navigation_ms"] for t in timings]
    print(
        json.dumps(
            {
                "benchmark": "web_fabric",
                "hosts": hosts,
                "gpus": gpus,
                "drawn_hosts": timings[-1]["hosts"],
                "payload_bytes": payload,
                "runs": len(timings),
                "load_render_ms_median": round(statistics.median(total), 1),
                "load_render_ms_max": round(max(total), 1),
                "fetch_ms_median": round(statistics.median(t["fetch_ms"] for t in timings), 1),
                "render_ms_median": round(statistics.median(t["render_ms"] for t in timings), 1),
                "target_ms": 1000,
            }
        )
    )


if __name__ == "__main__":
    main()
