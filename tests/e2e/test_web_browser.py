"""The dashboard in a real browser: headless Chromium (Debian's) driven by Playwright, against a real server
process on 127.0.0.1 with SQLite in a temporary folder and the web router mounted.

The demo cluster is one DGX H100 SuperPOD scalable unit (31 hosts, 8 rails) PUT through the API, every host
registered as an agent would, two tenants with jobs. Screenshots go to ``$GPUPOOL_ARTIFACTS`` (default
``artifacts/``). Without ``/usr/bin/chromium`` the module skips, except under CI, where it fails.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

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
ADMIN = "web-test-admin-token"

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        pytest.fail(f"{CHROMIUM} is missing: the browser tests must run in CI", pytrace=False)
    pytest.skip(f"{CHROMIUM} is missing", allow_module_level=True)

# The server process: binds its socket before printing the port, so the test connects without polling.
# Its telemetry is a fixed demo sample (utilisation, temperature, one erroring and one congested leaf), so
# the colour modes have something to show; the real server keeps no samples yet.
LAUNCHER = r"""
import socket, sys
import uvicorn
from gpupool.server.app import create_app
from gpupool.server.settings import Settings
from gpupool.web import GpuTelemetry, HostTelemetry, PortTelemetry, mount

data_dir, token = sys.argv[1], sys.argv[2]
def demo_telemetry():
    out = {}
    for h in range(1, 32):
        gpus = {g: GpuTelemetry(float((h * 37 + g * 11) % 100), 35.0 + (h * 13 + g * 7) % 50) for g in range(8)}
        ports = ()
        if h == 3:
            ports = (PortTelemetry("mlx5_2", "up", 12.0, 0.0),)
        if h == 5:
            ports = (PortTelemetry("mlx5_6", "up", 0.0, 50_000.0),)
        out[f"dgx{h:03d}"] = HostTelemetry(gpus, ports)
    return out
app = create_app(Settings(data_dir=data_dir, admin_token=token, node_lost_after_s=86400.0, schedule_period_s=0.5))
mount(app, telemetry=demo_telemetry)
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen(128)
print(sock.getsockname()[1], flush=True)
uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
"""


def _artifacts() -> Path:
    out = Path(os.environ.get("GPUPOOL_ARTIFACTS", "artifacts")) / "web"
    out.mkdir(parents=True, exist_ok=True)
    return out


def _register(c: httpx.Client, join: str, fabric: Any) -> None:
    for host in fabric.hosts:
        hcas = [fabric.hcas[fabric.hca_index(g)] for g in host.hcas]
        inventory = {
            "host": host.name,
            "gpus": [{"index": g.index, "model": g.model, "memory_mib": g.memory_mib} for g in host.gpus],
            "hcas": [{"name": h.name, "guid": h.guid, "rate_gbps": h.rate_gbps} for h in hcas],
        }
        r = c.post("/v1/agents/register", json=inventory, headers={"Authorization": f"Bearer {join}"})
        assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, tmp, ADMIN], stdout=subprocess.PIPE, text=True, cwd=tmp
        )
        try:
            assert proc.stdout is not None
            port = int(proc.stdout.readline())
            base = f"http://127.0.0.1:{port}"
            admin = {"Authorization": f"Bearer {ADMIN}"}
            with httpx.Client(base_url=base, headers=admin, timeout=10.0) as c:
                fabric = superpod(1)
                assert c.put("/v1/fabric", json=jsonio.to_dict(fabric)).status_code == 200
                _register(c, c.post("/v1/join-tokens", json={}).json()["token"], fabric)
                tokens = {}
                for t in ("acme", "globex"):
                    assert c.post("/v1/tenants", json={"name": t}).status_code == 201
                    tokens[t] = c.post("/v1/tokens", json={"tenant": t}).json()["token"]
                    c.put(f"/v1/tenants/{t}/quotas", json={"pool": "default", "nominal_gpus": 128, "cohort": "all"})
                calendar = (
                    'timezone = "UTC"\ndefault_pool = "default"\n\n[[pool]]\nname = "inference"\nsus = [1]\n'
                    'share = 0.5\nshare_outside = 0.125\nwindows = [{ days = "mon-sun", start = "08:00", end = "20:00" }]\n'
                )
                assert c.put("/v1/pools/default", json={"calendar_toml": calendar}).status_code == 200

                def submit(tenant: str, **body: Any) -> str:
                    r = c.post("/v1/jobs", json={"command": ["sleep", "600"], "tenant": tenant, **body})
                    assert r.status_code == 201, r.text
                    return str(r.json()["job"]["id"])

                jobs = {
                    "acme_small": submit("acme", name="train-a", tasks=2, gpus_per_task=8),
                    "globex_small": submit("globex", name="infer-g", tasks=1, gpus_per_task=4),
                    # 240 of the 256 GPUs: it fits the cluster (a larger one is refused at submit) but not
                    # beside the two above, so it waits with a reason.
                    "acme_huge": submit("acme", name="too-big", tasks=30, gpus_per_task=8),
                }
            yield {"base": base, "tokens": tokens, "jobs": jobs, "hosts": [h.name for h in fabric.hosts]}
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, args=ARGS, headless=True, viewport={"width": 1400, "height": 900}
        )
        try:
            yield ctx
        finally:
            ctx.close()


@pytest.fixture()
def page(browser: Any) -> Iterator[Any]:
    p = browser.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda e: errors.append(str(e)))
    p.on("dialog", lambda d: d.accept())
    yield p
    p.close()
    assert errors == [], errors  # no script error on any page


def _login(page: Any, base: str, path: str, token: str) -> None:
    page.goto(base + path)
    page.fill("#token", token)
    page.click("#login button[type=submit]")
    page.wait_for_selector("#main:not([hidden])")


def _api(cluster: dict[str, Any], path: str, token: str = ADMIN) -> Any:
    r = httpx.get(cluster["base"] + path, headers={"Authorization": f"Bearer {token}"}, timeout=10.0)
    r.raise_for_status()
    return r.json()


def test_fabric_page_renders_every_host_and_a_click_opens_it(cluster: dict[str, Any], page: Any) -> None:
    _login(page, cluster["base"], "/ui/fabric", ADMIN)
    page.wait_for_selector("canvas#fabric[data-ready='1']")
    drawn = page.eval_on_selector("canvas#fabric", "c => +c.dataset.drawn")
    assert drawn == len(cluster["hosts"]) == len(_api(cluster, "/v1/fabric")["document"]["hosts"])
    page.wait_for_function("document.getElementById('fabric-summary').textContent.includes('248')")
    page.screenshot(path=str(_artifacts() / "fabric.png"), full_page=True)
    for mode in ("util", "temp", "health"):
        page.select_option("#colour", mode)
        page.screenshot(path=str(_artifacts() / f"fabric-{mode}.png"))


def test_job_submitted_through_the_api_is_queued_with_its_reason(cluster: dict[str, Any], page: Any) -> None:
    job = cluster["jobs"]["acme_huge"]
    _login(page, cluster["base"], "/ui/queue", ADMIN)
    row = page.wait_for_selector(f"#queue tr[data-job='{job}'] .reason:not(:empty)")
    why = _api(cluster, f"/v1/jobs/{job}/why")
    assert why["state"] == "pending" and why["reason"]
    assert row.text_content() == why["reason"]
    page.screenshot(path=str(_artifacts() / "queue.png"), full_page=True)


def test_draining_a_node_from_the_page_drains_it(cluster: dict[str, Any], page: Any) -> None:
    host = cluster["hosts"][-1]
    _login(page, cluster["base"], "/ui/fabric", ADMIN)
    page.wait_for_selector("canvas#fabric[data-ready='1']")
    rect = page.evaluate("n => GP.fabricView.hostRect(n)", host)
    box = page.locator("canvas#fabric").bounding_box()
    page.mouse.click(box["x"] + rect["x"] + rect["w"] / 2, box["y"] + rect["y"] + rect["h"] / 2)
    page.wait_for_selector(f"#host-name:text('{host}')")
    page.click("#drain")
    page.wait_for_selector("#host-state[data-state='drained']")
    nodes = {n["name"]: n["state"] for n in _api(cluster, "/v1/nodes")["nodes"]}
    assert nodes[host] == "drained"
    assert sum(1 for s in nodes.values() if s == "drained") == 1
    page.screenshot(path=str(_artifacts() / "fabric-host.png"))


def test_a_tenant_token_sees_only_its_own_jobs(cluster: dict[str, Any], page: Any) -> None:
    acme, jobs = cluster["tokens"]["acme"], cluster["jobs"]
    _login(page, cluster["base"], "/ui/jobs", acme)
    page.wait_for_selector(f"#jobs tr[data-job='{jobs['acme_small']}']")
    shown = page.eval_on_selector_all("#jobs tr[data-job]", "rs => rs.map(r => r.dataset.job)")
    assert set(shown) == {jobs["acme_small"], jobs["acme_huge"]}
    # Nor through the dashboard's own endpoints: the fabric marks globex's GPUs only as someone else's.
    fabric = _api(cluster, "/ui/api/fabric", acme)
    assert jobs["globex_small"] not in json.dumps(fabric)
    assert -2 in fabric["alloc"] and fabric["jobs"] == [jobs["acme_small"]]
    queue = _api(cluster, "/ui/api/queue", acme)
    assert {j["id"] for j in queue["jobs"]} == {jobs["acme_huge"]}
    for host in cluster["hosts"][:4]:
        assert jobs["globex_small"] not in json.dumps(_api(cluster, f"/ui/api/hosts/{host}", acme))
    r = httpx.get(cluster["base"] + "/ui/api/sim?path=/tmp", headers={"Authorization": f"Bearer {acme}"})
    assert r.status_code == 403


def _sim_folder(root: Path) -> Path:
    out = root / "sim-run"
    out.mkdir()
    (out / "metrics.json").write_text(json.dumps({"jobs": 3, "mean_jct_s": 5400.0, "utilisation": 0.71}))
    with (out / "jobs.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "submit", "start", "end", "gpus"])
        w.writerows([["a", 0, 60, 3600, 8], ["b", 10, 1800, 9000, 16], ["c", 20, 20, 7200, 8]])
    return out


def test_every_page_in_both_languages_and_the_simulator_report(cluster: dict[str, Any], page: Any) -> None:
    _login(page, cluster["base"], "/ui/pools", ADMIN)
    page.wait_for_selector("#pools .timeline span")
    page.screenshot(path=str(_artifacts() / "pools.png"), full_page=True)
    page.goto(cluster["base"] + "/ui/tenants")
    page.wait_for_selector("#usage tbody tr")
    page.wait_for_selector("#quotas tbody tr")
    page.screenshot(path=str(_artifacts() / "tenants.png"), full_page=True)
    page.goto(cluster["base"] + "/ui/jobs")
    page.click(f"#jobs tr[data-job='{cluster['jobs']['acme_small']}'] button")
    page.wait_for_selector("#events tbody tr")
    assert "dgx" in page.text_content("#placement-text")
    page.screenshot(path=str(_artifacts() / "jobs.png"), full_page=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = _sim_folder(Path(tmp))
        page.goto(cluster["base"] + "/ui/sim")
        page.fill("#sim-path", str(folder))
        page.click("#sim-form button")
        page.wait_for_selector("#sim-metrics tbody tr")
        assert "mean_jct_s" in page.text_content("#sim-metrics")
        page.screenshot(path=str(_artifacts() / "sim.png"), full_page=True)
    # The language switch: the same page in Simplified Chinese, kept by a cookie for the next page.
    page.goto(cluster["base"] + "/ui/queue")
    page.select_option("#lang", "zh-CN")
    page.wait_for_selector("html[lang='zh-CN']")
    assert page.text_content("nav a.active") == "队列"
    page.goto(cluster["base"] + "/ui/fabric")
    assert page.text_content("nav a.active") == "网络拓扑"
    page.wait_for_selector("canvas#fabric[data-ready='1']")
    page.screenshot(path=str(_artifacts() / "fabric-zh.png"))
