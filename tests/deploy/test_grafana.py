"""deploy/grafana's dashboards as Grafana imports them: each file loads as JSON with the schema's essentials
(uid, title, schemaVersion, a Prometheus datasource variable, panels with type, title, targets and a gridPos
inside the 24-column grid, no two overlapping), and every query is valid PromQL: ``promtool check rules`` on
the queries written as recording rules, with the dashboard variables put in. That each query names only series
the server exposes is checked against a real scrape in tests/integration/server/test_server_metrics.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

GRAFANA = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
DASHBOARDS = ("cluster", "fabric", "tenants", "scheduler")
PANEL_TYPES = {"timeseries", "stat", "table", "bargauge", "gauge"}


def load(name: str) -> dict[str, Any]:
    return dict(json.loads((GRAFANA / f"{name}.json").read_text()))


def exprs(dash: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dash["panels"] for t in p["targets"]]


def test_the_four_dashboards_ship_and_no_other() -> None:
    assert sorted(p.stem for p in GRAFANA.glob("*.json")) == sorted(DASHBOARDS)
    uids = [load(n)["uid"] for n in DASHBOARDS]
    assert len(set(uids)) == len(uids)


@pytest.mark.parametrize("name", DASHBOARDS)
def test_a_dashboard_has_the_schema_essentials(name: str) -> None:
    d = load(name)
    assert d["title"].startswith("gpupool / ") and re.fullmatch(r"[a-z0-9-]{1,40}", d["uid"])
    assert isinstance(d["schemaVersion"], int) and d["schemaVersion"] >= 36
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert d["panels"]
    cells: set[tuple[int, int]] = set()
    for p in d["panels"]:
        assert p["type"] in PANEL_TYPES and p["title"], p
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        g = p["gridPos"]
        assert all(isinstance(g[k], int) for k in "hwxy") and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
        assert p["targets"], p["title"]
        ref_ids = [t["refId"] for t in p["targets"]]
        assert len(set(ref_ids)) == len(ref_ids) and all(t["expr"] for t in p["targets"]), p["title"]
        for t in p["targets"]:
            for var in re.findall(r"\$(\w+)", t["expr"]):
                assert var in variables or var == "__range", f"{p['title']}: ${var} is no variable"


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: install Debian's prometheus package (.ci/run does)"
    rules = []
    for name in DASHBOARDS:
        for i, e in enumerate(exprs(load(name))):
            e = e.replace("$__range", "1h")
            e = re.sub(r"\$\w+", ".*", e)
            rules.append({"record": f"dashboard:{name}:{i}", "expr": e})
    (tmp_path / "queries.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    r = subprocess.run(
        [promtool, "check", "rules", "queries.yml"], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(rules)} rules found" in r.stdout
