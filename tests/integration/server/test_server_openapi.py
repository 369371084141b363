"""The OpenAPI description of the real app: a bearer security scheme, every operation with a tag (one the
description lists), a summary and a description; ``/docs`` is the server's own page and loads no URL from
anywhere else (FastAPI's loads Swagger UI from a CDN), and ReDoc is off."""

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
    assert page.urls == ["/openapi.json"], page.urls
    assert not page.tags & {"script", "link", "img", "iframe"}
    assert not re.search(r"https?://", r.text), re.findall(r"https?://\S+", r.text)
    assert "/v1/jobs/{job_id}/why" in r.text and "Why Pending" in r.text
    assert api.client.get("/redoc").status_code == 404
