"""The API's description: a tag per route (from its path, in one table), the bearer security scheme, and
``/docs``: Swagger UI served from this package, with no external URL.

FastAPI's ``/docs`` loads Swagger UI from a CDN: blank in an air-gapped data centre. The packages that ship
its assets were weighed: ``swagger-ui-bundle`` 1.1.0 (the newest on PyPI) carries Swagger UI 4.15, which cannot
render the OpenAPI 3.1 FastAPI writes; ``swagger-ui-py`` carries 5.x in a 25 MB wheel (the editor, source maps
and Jinja2). So Swagger UI 5's two files that render a description (``swagger-ui-bundle.js`` and
``swagger-ui.css``, 2 MB, from the npm package ``swagger-ui-dist``) are vendored beside the dashboard's
assets (``web/static/vendor``, see ``web/static/VENDORED.md``) and ``/docs`` is FastAPI's own Swagger page
pointed at them, with the online validator badge (an external image) off. ReDoc, also from a CDN, is off.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse

# (path prefix, tag, description): the longest matching prefix names a route's tag.
TAGS: tuple[tuple[str, str, str], ...] = (
    ("/v1/jobs", "jobs", "Submit, list, inspect and cancel jobs; why a job waits; its events, attempts and logs."),
    ("/v1/arrays", "jobs", ""),
    ("/v1/queue", "jobs", ""),
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
VENDOR = "/ui/static/vendor"  # where the dashboard's static files are served (web.mount)
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
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{app.title} API {app.version}",
            swagger_js_url=f"{VENDOR}/swagger-ui-bundle.js",
            swagger_css_url=f"{VENDOR}/swagger-ui.css",
            swagger_favicon_url="data:,",  # no icon: nothing fetched from elsewhere
            swagger_ui_parameters={"validatorUrl": None},
        )
