"""deploy/prometheus as Prometheus reads it: ``promtool check config`` on the scrape config, ``promtool check rules``
on the alert rules and ``promtool test rules`` on their unit tests (series for the leader-missing and link-down
alerts, firing and not). The config is checked as installed: its token file exists (a temporary one here)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
TOKEN_FILE = "/etc/prometheus/gpupool-metrics-token"
ALERTS = {
    "GpupoolNodeLost",
    "GpupoolGpuXid",
    "GpupoolGpuBad",
    "GpupoolLinkDown",
    "GpupoolLeafCongested",
    "GpupoolQueueStuck",
    "GpupoolLeaderMissing",
}


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: install Debian's prometheus package (.ci/run does)"
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_the_scrape_config_passes_promtool_check_config(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("scrape-me-0123456789\n")
    config = (DEPLOY / "prometheus.yml").read_text()
    assert TOKEN_FILE in config
    (tmp_path / "prometheus.yml").write_text(config.replace(TOKEN_FILE, str(token)))
    shutil.copy(DEPLOY / "alerts.yml", tmp_path / "alerts.yml")
    r = _promtool("check", "config", "prometheus.yml", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 7 rules found" in r.stdout, r.stdout
    job = yaml.safe_load(config)["scrape_configs"][0]
    assert job["authorization"] == {"type": "Bearer", "credentials_file": TOKEN_FILE}


def test_the_alert_rules_pass_promtool_check_rules() -> None:
    r = _promtool("check", "rules", "alerts.yml", cwd=DEPLOY)
    assert r.returncode == 0, r.stdout + r.stderr
    rules = [x for g in yaml.safe_load((DEPLOY / "alerts.yml").read_text())["groups"] for x in g["rules"]]
    assert {x["alert"] for x in rules} == ALERTS
    for x in rules:
        assert "for" in x, x["alert"]
        assert x["labels"]["severity"] in ("warning", "critical"), x["alert"]
        assert x["annotations"]["summary"] and x["annotations"]["description"], x["alert"]


def test_the_alert_rules_pass_their_unit_tests() -> None:
    r = _promtool("test", "rules", "alerts_test.yml", cwd=DEPLOY)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout + r.stderr
