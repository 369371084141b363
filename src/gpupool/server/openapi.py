"""The API's description: a tag per route (from its path, in one table), the bearer security scheme, and
``/docs`` served from this package with no external URL.

Why no Swagger UI. FastAPI's ``/docs`` loads Swagger UI from a CDN: blank in an air-gapped data centre. The
packages that ship its assets were weighed: ``swagger-ui-bundle`` 1.1.0 (the newest) carries Swagger UI 4.15,
which cannot render the OpenAPI 3.1 FastAPI writes; ``swagger-ui-py`` carries 5.x in a 25 MB wheel (the
editor and source maps, and Jinja2), 70% on top of the server's 36.6 MB of wheels. So ``/docs`` is a page
of this server's own: every operation by tag with its summary and description, and ``/openapi.json`` (the
whole description) to open in any OpenAPI viewer. ReDoc, which FastAPI also loads from a CDN, is off.
"""

from __future__ import annotations

import html
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

# (path prefix, tag, description): the longest matching prefix names a route's tag.
TAGS: tuple[tuple[str, str, str], ...] = (
    ("/v1/jobs", "jobs", "Submit, list, inspect and cancel jobs; why a job waits; its events, attempts and logs."),
    ("/v1/arrays", "jobs", ""),
    ("/v1/nodes", "nodes", "Registered nodes: state, labels, drain and undrain."),
    ("/v1/fabric", "fabric", "The InfiniBand and NVLink topology the scheduler places on."),
    ("/v1/pools", "sharing", "Pools, tenants and quotas: who may use what, and when."),
    ("/v1/tenants", "sharing", ""),
    ("/v1/quotas", "sharing", ""),
    ("/v1/usage", "accounting", "GPU time per tenant, pool and model; per-run records and priced statements."),
    ("/v1/accounting", "accounting", ""),
    ("/v1/tokens", "tokens", "API tokens and agent join tokens (admin)."),
    ("/v1/join-tokens", "tokens", ""),
    ("/v1/agents", "agents", "The agent protocol: registration, heartbeats, commands, reports (node tokens)."),
    ("/ui", "dashboard", "What the web dashboard reads."),
    ("/healthz", "operations", "Health for load balancers and Prometheus metrics."),
    ("/metrics", "operations", ""),
)
SECURITY = {"bearer": {"type": "http", "scheme": "bearer", "description": "An API token, admin or tenant."}}


def _tag(path: str) -> str:
    """The tag of the longest prefix of ``path`` in ``TAGS``; ``other`` (listed nowhere: a test fails) if none."""
    best = max((p for p, _, _ in TAGS if path == p or path.startswith(p + "/")), key=len, default=None)
    return next((t for p, t, _ in TAGS if p == best), "other")


def document(app: FastAPI) -> None:
    """Tag every operation without tags (in the description: FastAPI includes routers lazily, so there is no
    route object to tag), add the security scheme, and serve ``/docs``."""
    app.openapi_tags = [{"name": t, "description": d} for _, t, d in TAGS if d]
    app.description = (
        "gpupool's REST API. Every route but /healthz takes `Authorization: Bearer TOKEN`; the agent routes take"
        ' a node or join token. Errors are `{"error": {"code", "message"}}` with a stable code.'
    )
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = plain()
            for path, item in spec["paths"].items():
                for op in item.values():
                    op["tags"] = op.get("tags") or [_tag(path)]
            spec.setdefault("components", {})["securitySchemes"] = SECURITY
            spec["security"] = [{"bearer": []}]
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    def docs() -> HTMLResponse:
        return HTMLResponse(docs_page(openapi()))


def docs_page(spec: dict[str, Any]) -> str:
    """The operations by tag: method, path, summary and description; no script, style sheet or image."""
    by_tag: dict[str, list[str]] = {}
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            row = (
                f"<tr><td><code>{method.upper()}</code></td><td><code>{html.escape(path)}</code></td>"
                f"<td>{html.escape(op.get('summary', ''))}</td><td>{html.escape(op.get('description', ''))}</td></tr>"
            )
            by_tag.setdefault((op.get("tags") or ["other"])[0], []).append(row)
    notes = {t["name"]: t.get("description", "") for t in spec.get("tags", [])}
    sections = "".join(
        f"<h2>{html.escape(tag)}</h2><p>{html.escape(notes.get(tag, ''))}</p><table>{''.join(rows)}</table>"
        for tag, rows in by_tag.items()
    )
    title = html.escape(f"{spec['info']['title']} API {spec['info']['version']}")
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body><h1>{title}</h1>"
        f"<p>{html.escape(spec['info'].get('description', ''))}</p><p>The whole description: "
        "<a href='/openapi.json'>/openapi.json</a> (OpenAPI 3.1), for any OpenAPI viewer or client generator.</p>"
        f"{sections}</body></html>"
    )
