"""``/docs`` in a real browser (Debian's Chromium, driven by Playwright) against a real server process: Swagger UI,
served from the package, renders the OpenAPI 3.1 description (every tag, the operations under them, the
bearer "Authorize" button), and the page asks for nothing outside the server (every other request is
refused and recorded: an air-gapped data centre has no CDN). A screenshot goes to ``$GPUPOOL_ARTIFACTS``.
Without ``/usr/bin/chromium`` the module skips, except under CI, where it fails."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from procs import ServerProc

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]  # fmt: skip

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        pytest.fail(f"{CHROMIUM} is missing: the browser tests must run in CI", pytrace=False)
    pytest.skip(f"{CHROMIUM} is missing", allow_module_level=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    data = tmp_path_factory.mktemp("docs")
    srv = ServerProc(f"sqlite:///{data / 'gpupool.db'}", data, data / "server.log")
    try:
        yield srv
    finally:
        srv.stop()


def test_docs_render_every_tag_and_operation_from_the_package_alone(server: ServerProc) -> None:
    from playwright.sync_api import sync_playwright

    spec = httpx.get(f"{server.base}/openapi.json", timeout=10).json()
    assert spec["openapi"].startswith("3.1")
    elsewhere: list[str] = []
    errors: list[str] = []
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, args=ARGS, headless=True, viewport={"width": 1400, "height": 900}
        )
        try:

            def guard(route: Any) -> None:
                url = route.request.url
                if urlsplit(url).netloc == urlsplit(server.base).netloc or url.startswith("data:"):
                    route.continue_()
                else:
                    elsewhere.append(url)
                    route.abort()

            ctx.route("**/*", guard)
            page = ctx.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{server.base}/docs")
            page.wait_for_selector(".opblock-tag-section", timeout=30_000)
            tags = page.locator(".opblock-tag").all_inner_texts()
            shown = {t.split("\n")[0].strip() for t in tags}
            assert {t["name"] for t in spec["tags"]} <= shown, shown
            paths = set(page.locator(".opblock-summary-path").all_inner_texts())
            want = {"/v1/jobs", "/v1/jobs/{job_id}/why", "/v1/pools/{name}/calendar", "/v1/quotas"}
            assert {p.replace("\u200b", "") for p in paths} >= want, sorted(paths)[:20]
            n_ops = sum(len(item) for item in spec["paths"].values())
            assert page.locator(".opblock").count() == n_ops
            assert page.locator("button.authorize").count() == 1  # the bearer security scheme
            assert page.get_by_text("OAS 3.1", exact=True).count() == 1  # Swagger UI 5 read the 3.1 description
            out = Path(os.environ.get("GPUPOOL_ARTIFACTS", "artifacts")) / "web"
            out.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out / "docs.png"))
        finally:
            ctx.close()
    assert elsewhere == [], elsewhere
    assert errors == [], errors
