"""The OpenAPI description of the real app: a bearer security scheme, every operation with a tag (one the
description lists), a summary and a description; ``/docs`` is Swagger UI served from the package and loads no
URL from anywhere else (FastAPI's loads it from a CDN), and ReDoc is off. tests/e2e/test_docs_browser.py
opens it in a real browser."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from server_api_helpers import Api


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.urls += [v for k, v in attrs if k in ("src", "href") and v is not None]


def test_every_operation_has_a_tag_a_summary_and_a_description_and_auth_is_bearer(api: Api) -> None:
    spec = api.client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "An API token, admin or tenant.",
    }
    assert spec["security"] == [{"bearer": []}]
    listed = {t["name"] for t in spec["tags"]}
    ops = [(m.upper(), p, op) for p, item in spec["paths"].items() for m, op in item.items()]
    assert len(ops) > 40
    for method, path, op in ops:
        assert len(op.get("tags", [])) == 1 and op["tags"][0] in listed, (method, path, op.get("tags"))
        assert op.get("summary") and op.get("description"), (method, path)
    tag = {(m, p): op["tags"][0] for m, p, op in ops}
    assert tag[("POST", "/v1/jobs")] == "jobs" and tag[("GET", "/v1/arrays/{array_id}")] == "jobs"
    assert tag[("POST", "/v1/agents/{host}/heartbeat")] == "agents" and tag[("GET", "/metrics")] == "operations"
    assert tag[("GET", "/ui/api/fabric")] == "dashboard" and tag[("PUT", "/v1/tenants/{tenant}/quotas")] == "sharing"


def test_docs_load_no_external_url(api: Api) -> None:
    r = api.client.get("/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = _Links()
    page.feed(r.text)
    js, css = "/ui/static/vendor/swagger-ui-bundle.js", "/ui/static/vendor/swagger-ui.css"
    assert sorted(page.urls) == sorted([css, "data:,", js]), page.urls
    assert "url: '/openapi.json'" in r.text and '"validatorUrl": null' in r.text  # no online validator badge
    assert not re.search(r"https?://", r.text), re.findall(r"https?://\S+", r.text)
    for url, kind in ((js, "javascript"), (css, "css")):
        asset = api.client.get(url)
        assert asset.status_code == 200 and kind in asset.headers["content-type"], (url, asset.headers)
    assert b"SwaggerUIBundle" in api.client.get(js).content
    assert api.client.get("/redoc").status_code == 404
