"""Server-rendered pages: one HTML shell per page, its labels filled from the language's message catalogue.

The pages themselves carry no data and need no token (the token lives in the browser's sessionStorage and
is sent by the page's own fetches); every number on them comes from the API, behind the same tokens.
Templates are plain HTML with ``{{key}}`` placeholders (HTML-escaped catalogue entries), so no template
engine is needed.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Annotated

from fastapi import APIRouter, Cookie, Header, HTTPException, Query
from fastapi.responses import HTMLResponse, RedirectResponse

PAGES = ("fabric", "queue", "jobs", "pools", "tenants", "sim")
# The scripts of each page after app.js: Chart.js (most of the dashboard's weight) only where a page charts.
SCRIPTS = {
    "fabric": ("fabric.js", "fabric-page.js"),
    "queue": ("queue.js",),
    "jobs": ("jobs.js",),
    "pools": ("pools.js",),
    "tenants": ("vendor/chart.umd.min.js", "tenants.js"),
    "sim": ("vendor/chart.umd.min.js", "sim.js"),
}
LANGUAGES = ("en", "zh-CN")
_KEY = re.compile(r"\{\{([a-z0-9_.]+)\}\}")


@dataclass(frozen=True, slots=True)
class Assets:
    """The templates and catalogues, read from the package once when the router is built."""

    shell: str
    bodies: dict[str, str]
    messages: dict[str, dict[str, str]]  # the page labels and the codes (states, reasons, events) together
    reasons: list[list[str]]  # (key, pattern) of each English sentence the page says again from its parameters


def load_assets() -> Assets:
    root = resources.files("gpupool.web")
    shell = (root / "templates" / "shell.html").read_text(encoding="utf-8")
    bodies = {p: (root / "templates" / f"{p}.html").read_text(encoding="utf-8") for p in PAGES}
    i18n = root / "static" / "i18n"
    messages = {
        lang: {
            **json.loads((i18n / f"{lang}.json").read_text(encoding="utf-8")),
            **json.loads((i18n / f"codes.{lang}.json").read_text(encoding="utf-8")),
        }
        for lang in LANGUAGES
    }
    reasons = json.loads((i18n / "reasons.json").read_text(encoding="utf-8"))["patterns"]
    return Assets(shell, bodies, messages, reasons)


def pick_language(query: str | None, cookie: str | None, accept_language: str | None) -> str:
    """The explicit choice (the switch sets ``?lang=`` and a cookie), else the browser's first match."""
    for choice in (query, cookie):
        if choice in LANGUAGES:
            return choice
    ranked: list[tuple[float, int, str]] = []
    for pos, part in enumerate((accept_language or "").split(",")):
        tag, _, params = part.strip().partition(";")
        q = 1.0
        if params.strip().startswith("q="):
            try:
                q = float(params.strip()[2:])
            except ValueError:
                q = 0.0
        ranked.append((-q, pos, tag.strip().lower()))
    for _, _, tag in sorted(ranked):
        if tag.startswith("zh"):
            return "zh-CN"
        if tag.startswith("en"):
            return "en"
    return "en"


def render(assets: Assets, page: str, lang: str) -> str:
    msgs = assets.messages[lang]

    def fill(text: str) -> str:
        return _KEY.sub(lambda m: html.escape(msgs.get(m.group(1), m.group(1))), text)

    nav = "".join(
        f'<a href="/ui/{p}" data-page="{p}"{" class=active" if p == page else ""}>{html.escape(msgs[f"nav.{p}"])}</a>'
        for p in PAGES
    )
    # The catalogue goes to the page as JSON for the labels the scripts write; "</" is escaped so no
    # message can close the script element.
    boot = json.dumps({"page": page, "lang": lang, "msgs": msgs, "reasons": assets.reasons}, ensure_ascii=False)
    boot = boot.replace("</", "<\\/")
    scripts = "".join(f'<script src="/ui/static/{name}"></script>' for name in ("app.js", *SCRIPTS[page]))
    return (
        fill(assets.shell)
        .replace("%%LANG%%", lang)
        .replace("%%PAGE%%", page)
        .replace("%%TITLE%%", html.escape(msgs[f"nav.{page}"]))
        .replace("%%NAV%%", nav)
        .replace("%%BODY%%", fill(assets.bodies[page]))
        .replace("%%BOOT%%", boot)
        .replace("%%SCRIPTS%%", scripts)
    )


def build_router(assets: Assets) -> APIRouter:
    router = APIRouter()

    @router.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui/fabric", status_code=307)

    @router.get("/ui", include_in_schema=False)
    def ui_root() -> RedirectResponse:
        return RedirectResponse("/ui/fabric", status_code=307)

    @router.get("/ui/{page}", response_class=HTMLResponse, include_in_schema=False)
    def page(
        page: str,
        lang: Annotated[str | None, Query(max_length=16)] = None,
        gpupool_lang: Annotated[str | None, Cookie()] = None,
        accept_language: Annotated[str | None, Header()] = None,
    ) -> HTMLResponse:
        if page not in PAGES:
            raise HTTPException(status_code=404, detail=f"no page {page!r}")
        chosen = pick_language(lang, gpupool_lang, accept_language)
        response = HTMLResponse(render(assets, page, chosen))
        if lang in LANGUAGES:
            response.set_cookie("gpupool_lang", chosen, max_age=365 * 86400, samesite="strict")
        return response

    return router
