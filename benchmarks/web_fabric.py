"""The fabric page at 1,023 hosts and 5,000 jobs: first draw, and what an open tab costs on the wire.

The cluster is tests/webcluster.py's (a real server process holding a DGX SuperPOD of 1,023 hosts and 5,000 jobs,
about 300 active). Headless Chromium opens ``/ui/fabric`` ``--runs`` times; the page marks its own first fetch
and draw with ``performance.now()`` (``since_navigation_ms``: navigation start to the first complete draw:
HTML, scripts, the JSON and the canvas). Then one tab stays open for ``--window`` seconds twice: with the cluster
still, and with churn (a running job cancelled every 2 s, so the scheduler places a waiting one: the GPUs of
two jobs change per poll). Bytes are Chromium's own count of what crossed the wire for every request of the
tab (``encodedDataLength``: headers and the gzip-compressed bodies). The server's CPU seconds over each window
are read from /proc, and over a window with no tab open (its loop and the agent's beats) for comparison.
Prints one JSON line.

    .venv/bin/python benchmarks/web_fabric.py [--runs 5] [--window 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from procs import ADMIN, cpu_s
from webcluster import WebCluster, wait_placed, web_cluster

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


def first_draws(ctx: Any, base: str, runs: int) -> list[dict[str, float]]:
    out = []
    for _ in range(runs):
        page = ctx.new_page()
        page.goto(base + "/ui/fabric")
        page.wait_for_selector("canvas#fabric[data-ready='1']", timeout=60_000)
        out.append(page.evaluate("() => GP.timing"))
        page.close()
    return out


class Churn:
    """Cancels one running job every ``every_s``: the loop then places a waiting one."""

    def __init__(self, cl: WebCluster, every_s: float = 2.0) -> None:
        self.cl, self.every_s, self.stop = cl, every_s, threading.Event()
        self.cancelled = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        h = {"Authorization": f"Bearer {ADMIN}"}
        while not self.stop.wait(self.every_s):
            running = self.cl.get("/v1/jobs", state="placed", limit=1, sort="submitted", order="asc")["jobs"]
            if running:
                httpx.post(f"{self.cl.base}/v1/jobs/{running[0]['id']}/cancel", headers=h, timeout=30)
                self.cancelled += 1


def open_tab(ctx: Any, cl: WebCluster, window_s: float, churn: bool) -> dict[str, float]:
    page = ctx.new_page()
    cdp = ctx.new_cdp_session(page)
    cdp.send("Network.enable")
    got = {"bytes": 0.0, "requests": 0.0}

    def finished(e: dict[str, Any]) -> None:
        got["bytes"] += e["encodedDataLength"]
        got["requests"] += 1

    cdp.on("Network.loadingFinished", finished)
    page.goto(cl.base + "/ui/fabric")
    page.wait_for_selector("canvas#fabric[data-ready='1']", timeout=60_000)
    first = dict(got)
    got.update(bytes=0.0, requests=0.0)
    mover = Churn(cl) if churn else None
    cpu0, t0 = cpu_s(cl.server.proc.pid), time.monotonic()
    if mover is not None:
        mover.thread.start()
    page.wait_for_timeout(window_s * 1000)  # the measured window: the tab polls on its own meanwhile
    wall = time.monotonic() - t0
    cpu = cpu_s(cl.server.proc.pid) - cpu0
    if mover is not None:
        mover.stop.set()
        mover.thread.join()
    page.close()
    return {
        "first_load_bytes": first["bytes"],
        "bytes_per_min": round(got["bytes"] * 60 / wall),
        "bytes_per_s": round(got["bytes"] / wall, 1),
        "requests_per_min": round(got["requests"] * 60 / wall, 1),
        "server_cpu_s_per_min": round(cpu * 60 / wall, 2),
        "jobs_cancelled": 0 if mover is None else mover.cancelled,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--window", type=float, default=60.0)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, web_cluster(Path(tmp)) as cl:
        wait_placed(cl, 150)
        h = {"Authorization": f"Bearer {ADMIN}", "Accept-Encoding": "identity"}
        raw = len(httpx.get(cl.base + "/ui/api/fabric", headers=h, timeout=60).content)
        gz = httpx.get(cl.base + "/ui/api/fabric", headers={**h, "Accept-Encoding": "gzip"}, timeout=60)
        gzipped = int(gz.headers.get("content-length", "0")) or len(gz.content)
        with tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
            ctx = pw.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, args=ARGS, headless=True, viewport={"width": 1600, "height": 1000}
            )
            ctx.add_init_script(f"sessionStorage.setItem('gpupool.token', {json.dumps(ADMIN)})")
            timings = first_draws(ctx, cl.base, args.runs)
            cpu0, t0 = cpu_s(cl.server.proc.pid), time.monotonic()
            time.sleep(args.window)  # no tab open: what the server spends anyway (its loop, the agent's beats)
            idle_cpu = (cpu_s(cl.server.proc.pid) - cpu0) * 60 / (time.monotonic() - t0)
            still = open_tab(ctx, cl, args.window, churn=False)
            moving = open_tab(ctx, cl, args.window, churn=True)
            ctx.close()
    total = [t["since_navigation_ms"] for t in timings]
    print(
        json.dumps(
            {
                "benchmark": "web_fabric",
                "hosts": timings[-1]["hosts"],
                "jobs": 5000,
                "payload_bytes_identity": raw,
                "payload_bytes_gzip": gzipped,
                "runs": len(timings),
                "first_draw_ms_median": round(statistics.median(total), 1),
                "first_draw_ms_max": round(max(total), 1),
                "fetch_ms_median": round(statistics.median(t["fetch_ms"] for t in timings), 1),
                "render_ms_median": round(statistics.median(t["render_ms"] for t in timings), 1),
                "target_ms": 1000,
                "window_s": args.window,
                "no_tab_server_cpu_s_per_min": round(idle_cpu, 2),
                "open_tab_still": still,
                "open_tab_churn": moving,
                "target_bytes_per_s": 5000,
                "load_avg_1m": round(os.getloadavg()[0], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
