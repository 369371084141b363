"""The example configuration in deploy/examples is what the readers read: the server's settings and secrets
through the server's own loader, the agent's variables against what ``gpupool agent`` reads, its labels
through the agent's parser, and the admin files through ``gpupool admin apply`` into a real server process,
whose API then answers with exactly what the files say (applying them twice leaves it so)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import typer
import yaml

from gpupool.cli.agent import agent
from gpupool.client.adminfile import read_admin_file
from gpupool.domain.calendar import parse_calendar
from gpupool.domain.labels import parse_labels_file
from gpupool.server.settings import load_settings
from procs import ADMIN, ServerProc

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


def env_file(path: Path) -> dict[str, str]:
    """A systemd EnvironmentFile's KEY=VALUE lines (comments and blank lines skipped)."""
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep and key == key.strip() and key.isidentifier(), line
            out[key] = value
    return out


def test_the_server_example_loads_with_its_secrets() -> None:
    env = env_file(EXAMPLES / "server.env")
    s = load_settings(EXAMPLES / "server.yaml", env=env)
    assert (s.host, s.port, s.cluster_name, s.log_format) == ("0.0.0.0", 8765, "dc1", "json")
    assert (s.scheduler.policy, s.scheduler.placer, s.scheduler.backfill.value) == ("fair", "topology", "easy")
    assert s.admin_token == env["GPUPOOL_ADMIN_TOKEN"] and s.url.startswith("postgresql+psycopg://")
    assert not {"admin_token", "metrics_token", "database_url"} & set(
        yaml.safe_load((EXAMPLES / "server.yaml").read_text())
    )


def test_the_agent_example_names_only_what_the_agent_reads() -> None:
    app = typer.Typer()
    app.command()(agent)
    params = typer.main.get_command(app).params
    read = {e for p in params if isinstance(e := getattr(p, "envvar", None), str)}
    assert set(env_file(EXAMPLES / "agent.env")) <= read, read
    labels = parse_labels_file((EXAMPLES / "labels.txt").read_text(), "labels.txt")
    assert labels == {"rack": "r07", "row": "b", "nvlink": "nvl8"}


def test_the_calendar_example_parses() -> None:
    cal = parse_calendar((EXAMPLES / "calendar.toml").read_text(), "calendar.toml")
    assert (cal.timezone, cal.default_pool, [r.pool for r in cal.rules]) == (
        "Asia/Shanghai",
        "training",
        ["inference", "interactive"],
    )


def apply(srv: ServerProc) -> None:
    files = [str(EXAMPLES / n) for n in ("tenants.yaml", "pools.yaml", "quotas.yaml")]
    env = {**os.environ, "GPUPOOL_SERVER": srv.base, "GPUPOOL_TOKEN": ADMIN, "GPUPOOL_CONFIG": "/nonexistent"}
    args = [sys.executable, "-m", "gpupool", "admin", "apply", *(a for f in files for a in ("-f", f))]
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr


def test_the_admin_examples_apply_to_a_real_server(tmp_path: Path) -> None:
    tenants = read_admin_file(EXAMPLES / "tenants.yaml").tenants
    pools = read_admin_file(EXAMPLES / "pools.yaml").pools
    quotas = read_admin_file(EXAMPLES / "quotas.yaml").quotas
    srv = ServerProc(f"sqlite:///{tmp_path / 'gpupool.db'}", tmp_path, tmp_path / "server.log")
    try:
        for _ in range(2):  # the second time changes nothing that the API shows
            apply(srv)
            got = {t["name"]: t["weight"] for t in srv.admin("GET", "/v1/tenants")["tenants"]}
            assert got == {t.name: t.weight for t in tenants}
            stored = {p["name"]: p["calendar_toml"] for p in srv.admin("GET", "/v1/pools")["pools"]}
            assert stored == {p.name: p.calendar_toml for p in pools}
            assert stored["inference"] == (EXAMPLES / "calendar.toml").read_text()
            got_q = srv.admin("GET", "/v1/quotas")["quotas"]
            assert got_q == sorted(
                ({"tenant": q.tenant, **q.body().model_dump()} for q in quotas),
                key=lambda q: (q["tenant"], q["pool"], q["gpu_model"]),
            )
        cal = srv.admin("GET", "/v1/pools/inference/calendar", params={"at": 1796608800.0})  # Mon 2026-12-07 10:00 CST
        assert [(r["pool"], r["share_now"]) for r in cal["rules"]] == [("inference", 0.75), ("interactive", 1.0)]
    finally:
        srv.stop()
