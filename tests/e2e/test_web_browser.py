"""The dashboard in a real browser: headless Chromium (Debian's) driven by Playwright, against a real server
process holding a 1,023-host DGX SuperPOD and 5,000 jobs (tests/webcluster.py: the history written into the
store before the server starts, the active jobs through the API, one real emulated agent for logs).

Screenshots (desktop and phone width, 390 px) go to ``$GPUPOOL_ARTIFACTS/web`` (default ``artifacts/web``);
the README's are copies of them. Without ``/usr/bin/chromium`` the module skips, except under CI, where it fails.
"""

from __future__ import annotations

import csv
import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from procs import ADMIN
from webcluster import (
    AGENT_HOST,
    BAD_GPU,
    DRAINED,
    NEEDLE,
    STDERR_LINE,
    UNREGISTERED,
    WebCluster,
    wait_placed,
    web_cluster,
)

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
PHONE = {"width": 390, "height": 844}

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        pytest.fail(f"{CHROMIUM} is missing: the browser tests must run in CI", pytrace=False)
    pytest.skip(f"{CHROMIUM} is missing", allow_module_level=True)


def _artifacts() -> Path:
    out = Path(os.environ.get("GPUPOOL_ARTIFACTS", "artifacts")) / "web"
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebCluster]:
    with web_cluster(tmp_path_factory.mktemp("web")) as cl:
        wait_placed(cl, 150)
        yield cl


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


def _login(page: Any, base: str, path: str, token: str = ADMIN) -> None:
    page.goto(base + path)
    page.fill("#token", token)
    page.click("#login button[type=submit]")
    page.wait_for_selector("#main:not([hidden])")


def _active(cl: WebCluster) -> dict[str, str]:
    out: dict[str, str] = {}
    offset = 0
    while True:
        page = cl.get("/v1/jobs", active="true", limit=1000, offset=offset)
        out.update({j["id"]: j["state"] for j in page["jobs"]})
        offset += len(page["jobs"])
        if offset >= page["total"] or not page["jobs"]:
            return out


def test_every_active_job_is_findable_in_the_jobs_page_newest_first(cluster: WebCluster, page: Any) -> None:
    """At 5,000 jobs (4,700 of them ended), paging the default view (active jobs) shows every running and
    placed job the API lists, and only active jobs, newest first."""
    _login(page, cluster.base, "/ui/jobs")
    page.wait_for_selector("#jobs tbody tr[data-job]")
    assert int(page.get_attribute("#jobs", "data-total")) <= 1000  # the active ones, not the 5,000
    seen: list[tuple[str, str]] = []
    while True:
        rows = page.eval_on_selector_all("#jobs tbody tr", "rs => rs.map(r => [r.dataset.job, r.dataset.state])")
        seen += [(j, s) for j, s in rows]
        if page.is_disabled("#next"):
            break
        first = rows[0][0]
        page.click("#next")
        page.wait_for_function("f => document.querySelector('#jobs tbody tr').dataset.job !== f", arg=first)
    active = _active(cluster)
    running = {j for j, s in active.items() if s in ("placed", "running")}
    assert len(running) >= 150
    shown = {j for j, _ in seen}
    assert running <= shown, sorted(running - shown)[:5]
    assert {s for _, s in seen} <= {"pending", "placed", "running"}
    assert len(cluster.get("/v1/jobs", limit=1)["jobs"]) == 1 and cluster.get("/v1/jobs", limit=1)["total"] == 5000


def test_a_search_finds_a_job_by_name_among_5000(cluster: WebCluster, page: Any) -> None:
    _login(page, cluster.base, "/ui/jobs")
    page.select_option("#job-state", "")
    page.fill("#job-q", NEEDLE)
    page.click("#job-filters button[type=submit]")
    page.wait_for_function("document.getElementById('jobs').dataset.total === '1'")
    rows = page.eval_on_selector_all("#jobs tbody tr", "rs => rs.map(r => r.dataset.job)")
    assert rows == [cluster.jobs["needle"]]
    page.click("#jobs th[data-sort=name]")  # sorting keeps the search
    page.wait_for_selector("#jobs th[aria-sort=ascending]")
    assert page.eval_on_selector_all("#jobs tbody tr", "rs => rs.map(r => r.dataset.job)") == rows
    # A time range: submitted after tomorrow matches nothing, after last year everything the search finds.
    page.fill("#job-after", "2099-01-01T00:00")
    page.click("#job-filters button[type=submit]")
    page.wait_for_function("document.getElementById('jobs').dataset.total === '0'")
    assert page.is_visible("#jobs-empty")
    page.fill("#job-after", "2020-01-01T00:00")
    page.fill("#job-q", "hist-initech-0")  # the seeded history: 4,700 jobs over the tenants, one a third
    page.click("#job-filters button[type=submit]")
    page.wait_for_function("+document.getElementById('jobs').dataset.total > 100")
    total = int(page.get_attribute("#jobs", "data-total"))
    assert total == cluster.get("/v1/jobs", q="hist-initech-0", limit=1)["total"]


def test_a_jobs_url_opens_its_panel_with_the_stderr_of_rank_1_and_esc_closes_it(
    cluster: WebCluster, browser: Any
) -> None:
    """The URL of a job's rank-1 stderr opens it: the CUDA error that stdout alone once hid is on screen. At
    phone width too (the screenshot the README shows)."""
    job = cluster.jobs["logs"]
    for name, viewport in (("logs", {"width": 1400, "height": 900}), ("phone-logs", PHONE)):
        p = browser.new_page()
        p.set_viewport_size(viewport)
        try:
            _login(p, cluster.base, f"/ui/jobs#job={job}&rank=1&stream=stderr")
            p.wait_for_function("t => document.getElementById('logs').textContent.includes(t)", arg=STDERR_LINE)
            assert p.get_attribute("#logs", "data-rank") == "1" and p.get_attribute("#logs", "data-stream") == "stderr"
            assert p.text_content("#job-id") == job
            assert p.eval_on_selector_all("#ranks tbody tr", "rs => rs.map(r => r.dataset.rank)") == ["0", "1"]
            assert AGENT_HOST in p.text_content("#ranks")
            p.screenshot(path=str(_artifacts() / f"{name}.png"))
            p.keyboard.press("Escape")
            p.wait_for_selector("#job", state="hidden")
            assert "job=" not in p.evaluate("location.hash")
        finally:
            p.close()


def _pixels(page: Any, rect: dict[str, float]) -> list[list[int]]:
    return page.evaluate(
        """r => { const c = document.getElementById('fabric'), k = c.width / c.clientWidth;
           const d = c.getContext('2d').getImageData(Math.floor(r.x * k), Math.floor(r.y * k),
             Math.max(1, Math.ceil(r.w * k)), Math.max(1, Math.ceil(r.h * k))).data;
           const out = []; for (let i = 0; i < d.length; i += 4) out.push([d[i], d[i + 1], d[i + 2]]); return out; }""",
        rect,
    )


def test_the_fabric_counts_schedulable_gpus_names_finds_and_shows_the_bad_gpu(cluster: WebCluster, page: Any) -> None:
    _login(page, cluster.base, "/ui/fabric")
    page.wait_for_selector("canvas#fabric[data-ready='1']")
    assert int(page.get_attribute("canvas#fabric", "data-drawn")) == 1023
    # 1,023 hosts of 8 GPUs, 7 without an agent, 2 drained, one GPU bad: only the rest can be scheduled.
    schedulable = (1023 - len(UNREGISTERED) - len(DRAINED)) * 8 - 1
    assert int(page.get_attribute("#fabric-summary", "data-schedulable")) == schedulable
    assert f"{schedulable:,} schedulable" in page.text_content("#fabric-summary")
    assert page.input_value("#colour") == "tenant"  # the default view
    # The bad GPU is drawn red (its outline and cross) in the default view, at the zoom that fits everything.
    host, gpu = BAD_GPU
    bad = _pixels(page, page.evaluate("([h, g]) => GP.fabricView.gpuRect(h, g)", [host, gpu]))
    assert any(r > 190 and g < 90 and b < 90 for r, g, b in bad), "the bad GPU is not drawn red"
    healthy = f"dgx{int(host[3:]) + 1:05d}"  # the same GPU of the next host, which is fine: not red
    ok = _pixels(page, page.evaluate("([h, g]) => GP.fabricView.gpuRect(h, g)", [healthy, gpu]))
    assert not any(r > 190 and g < 90 and b < 90 for r, g, b in ok)
    labels = page.evaluate("GP.fabricView.labels")
    assert "SU 1" in labels and "SU 32" in labels  # scalable units are named at every zoom
    page.screenshot(path=str(_artifacts() / "fabric.png"))
    # Search: the host is found, centred and zoomed until its name (and its neighbours') fits.
    page.fill("#find", host)
    page.press("#find", "Enter")
    page.wait_for_function("document.getElementById('find-result').textContent.length > 0")
    labels = page.evaluate("GP.fabricView.labels")
    assert host in labels and sum(1 for x in labels if re.fullmatch(r"dgx\d{5}", x)) >= 8
    r = page.evaluate("h => GP.fabricView.hostRect(h)", host)
    box = page.locator("canvas#fabric").bounding_box()
    assert r["x"] >= 0 and r["x"] + r["w"] <= box["width"] and r["y"] >= 0 and r["y"] + r["h"] <= box["height"]
    # Hover: the tooltip names the host and its bad GPU.
    page.mouse.move(box["x"] + r["x"] + r["w"] / 2, box["y"] + r["y"] + r["h"] / 2)
    page.wait_for_selector("#tip:not([hidden])")
    assert host in page.text_content("#tip") and "1 bad" in page.text_content("#tip")
    page.screenshot(path=str(_artifacts() / "fabric-search.png"))
    # Search by job name finds the hosts its GPUs are on.
    page.fill("#find", NEEDLE)
    page.press("#find", "Enter")
    page.wait_for_function("document.getElementById('find-result').textContent.includes('1 jobs')")


def test_a_hosts_url_opens_its_panel_and_drain_takes_a_reason(cluster: WebCluster, page: Any) -> None:
    drained = next(iter(DRAINED))
    _login(page, cluster.base, f"/ui/fabric#host={drained}")
    page.wait_for_selector(f"#host-name:text('{drained}')")
    assert DRAINED[drained] in page.text_content("#host-drain-reason")
    page.click("#host .close")
    page.wait_for_selector("#host", state="hidden")
    target = "dgx00900"
    page.evaluate("h => { location.hash = 'host=' + h; }", target)
    page.wait_for_selector(f"#host-name:text('{target}')")
    page.click("#drain")  # no reason: refused on the page, nothing sent
    page.wait_for_function("document.getElementById('error').textContent.length > 0")
    assert next(n for n in cluster.get("/v1/nodes")["nodes"] if n["name"] == target)["state"] == "up"
    page.fill("#drain-reason", "GPU 5 fan noise, ticket OPS-77")
    page.click("#drain")
    page.wait_for_selector("#host-state[data-state='drained']")
    page.wait_for_function("document.getElementById('host-drain-reason').textContent.includes('OPS-77')")
    page.screenshot(path=str(_artifacts() / "fabric-host.png"))
    page.click("#undrain")
    page.wait_for_selector("#host-state[data-state='up']")


_ENGLISH = re.compile(r"[A-Za-z]{3,}")
_ALLOWED = {"GPU", "GPUs", "MiB", "NVLink", "CPU", "rank", "XID"}


def _english(texts: list[str], data: set[str]) -> list[str]:
    """Words of three Latin letters or more, less units and the names of things (tenants, jobs, hosts)."""
    bad = []
    for text in texts:
        for w in _ENGLISH.findall(text):
            if w not in _ALLOWED and not any(w in d for d in data):
                bad.append(f"{w!r} in {text!r}")
    return bad


def test_the_chinese_pages_show_no_english_state_reason_or_event(cluster: WebCluster, page: Any) -> None:
    _login(page, cluster.base, "/ui/queue?lang=zh-CN")
    page.wait_for_selector("#queue tbody tr .reason")
    reasons = page.eval_on_selector_all("#queue .reason", "es => es.map(e => e.textContent)")
    names = {"default", "inference", "acme", "globex", "initech", "wait-big", "pretrain", "finetune", "sweep"}
    assert reasons and _english(reasons, names) == []
    assert page.text_content("#queue-hint").startswith("待调度作业")
    page.set_viewport_size(PHONE)
    page.screenshot(path=str(_artifacts() / "phone-queue-zh.png"))
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(cluster.base + "/ui/jobs")
    page.select_option("#job-state", "")
    page.wait_for_function("+document.getElementById('jobs').dataset.total > 1000")
    states = page.eval_on_selector_all("#jobs .state", "es => es.map(e => e.textContent)")
    assert states and _english(states, set()) == []
    heads = page.eval_on_selector_all("#jobs th", "es => es.map(e => e.textContent)")
    assert _english(heads, set()) == []
    # Narrow columns keep Chinese words on one line: no header is taller than one line of text.
    heights = page.eval_on_selector_all("#jobs th", "es => es.map(e => e.getBoundingClientRect().height)")
    assert max(heights) < 2 * min(heights)
    page.goto(cluster.base + f"/ui/jobs#job={cluster.jobs['logs']}")
    page.wait_for_selector("#events tbody tr")
    events = page.eval_on_selector_all(
        "#events td:nth-child(3), #events td:nth-child(4)", "es => es.map(e => e.textContent)"
    )
    assert _english(events, {AGENT_HOST}) == []
    assert page.text_content("#job-state-badge") in ("运行中", "已放置")
    page.screenshot(path=str(_artifacts() / "jobs-zh.png"))
    page.goto(cluster.base + "/ui/fabric")
    page.wait_for_selector("canvas#fabric[data-ready='1']")
    assert "可调度" in page.text_content("#fabric-summary")
    page.screenshot(path=str(_artifacts() / "fabric-zh.png"))
    page.goto(cluster.base + "/ui/queue?lang=en")  # back to English for the tests after this one


def test_phone_width_queue_and_jobs_fit_the_screen(cluster: WebCluster, browser: Any) -> None:
    p = browser.new_page()
    try:
        _login(p, cluster.base, "/ui/queue")
        p.wait_for_selector("#queue tbody tr .reason")
        p.screenshot(path=str(_artifacts() / "queue.png"))
        p.set_viewport_size(PHONE)
        for path, ready, name in (
            ("/ui/queue", "#queue tbody tr", "phone-queue"),
            ("/ui/jobs", "#jobs tbody tr", "phone-jobs"),
        ):
            p.goto(cluster.base + path)
            p.wait_for_selector(ready)
            # One card per row: nothing wider than the screen, so nothing to scroll sideways.
            assert p.evaluate("document.scrollingElement.scrollWidth") <= PHONE["width"]
            p.screenshot(path=str(_artifacts() / f"{name}.png"))
    finally:
        p.close()


def test_sign_out_stops_polling_and_chart_js_loads_only_where_a_page_charts(cluster: WebCluster, page: Any) -> None:
    requests: list[tuple[str, str | None]] = []
    page.on("request", lambda r: requests.append((r.url, r.headers.get("authorization"))))
    _login(page, cluster.base, "/ui/fabric")
    page.wait_for_selector("canvas#fabric[data-ready='1']")
    assert not any("chart" in u for u, _ in requests)
    page.click("#logout")
    page.wait_for_selector("#login:not([hidden])")
    requests.clear()
    page.wait_for_timeout(5000)  # the observation window: two and a half poll periods
    assert [u for u, _ in requests if "/api/" in u or "/v1/" in u] == []
    assert not any(a is not None and "null" in a for _, a in requests)
    _login(page, cluster.base, "/ui/tenants")
    page.wait_for_selector("#usage-chart")
    page.wait_for_function("!!window.Chart")


def _sim_folder(root: Path) -> Path:
    out = root / "sim-run"
    out.mkdir()
    (out / "metrics.json").write_text(json.dumps({"jobs": 3, "mean_jct_s": 5400.0, "utilisation": 0.71}))
    with (out / "jobs.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "submit", "start", "end", "gpus"])
        w.writerows([["a", 0, 60, 3600, 8], ["b", 10, 1800, 9000, 16], ["c", 20, 20, 7200, 8]])
    return out


def test_pools_tenants_and_a_simulator_report(cluster: WebCluster, page: Any) -> None:
    _login(page, cluster.base, "/ui/pools")
    page.wait_for_selector("#pools .timeline span")
    page.screenshot(path=str(_artifacts() / "pools.png"), full_page=True)
    page.goto(cluster.base + "/ui/tenants")
    page.wait_for_selector("#usage tbody tr")
    page.wait_for_function("!!window.Chart")
    page.screenshot(path=str(_artifacts() / "tenants.png"))
    with tempfile.TemporaryDirectory() as tmp:
        folder = _sim_folder(Path(tmp))
        page.goto(cluster.base + "/ui/sim")
        page.fill("#sim-path", str(folder))
        page.click("#sim-form button")
        page.wait_for_selector("#sim-metrics tbody tr")
        assert "mean_jct_s" in page.text_content("#sim-metrics")
        page.screenshot(path=str(_artifacts() / "sim.png"), full_page=True)


def test_a_tenant_token_sees_only_its_own_jobs(cluster: WebCluster, page: Any) -> None:
    globex, needle = cluster.tokens["globex"], cluster.jobs["needle"]
    _login(page, cluster.base, "/ui/jobs", globex)
    page.wait_for_selector("#jobs tbody tr[data-job]")
    tenants = page.eval_on_selector_all("#jobs tbody td:nth-child(3)", "es => es.map(e => e.textContent)")
    assert set(tenants) == {"globex"}
    fabric = cluster.get("/ui/api/fabric", globex)
    jobs = fabric["live"]["jobs"].values()
    assert {j[1] for j in jobs} == {"globex"} and needle in {j[0] for j in jobs}
    assert -2 in fabric["live"]["alloc"]  # the others' GPUs: held, by nobody it may see
    assert "acme" not in str(fabric["live"])
    r = httpx.get(cluster.base + "/ui/api/sim?path=/tmp", headers={"Authorization": f"Bearer {globex}"})
    assert r.status_code == 403
