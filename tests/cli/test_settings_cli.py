"""One ``scheduler`` settings section for the server and the simulator: every setting reaches both, from a
file (and, for the server, ``GPUPOOL_SCHEDULER__*``), with the same defaults; ``gpupool server --print-config``
shows what a server would run with; a bad value stops ``gpupool sim run --config`` with one line."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.cli.sim import _FLAGS, _settings
from gpupool.scheduler import BackfillMode, SchedulerConfig
from gpupool.scheduler.settings import SchedulerSettings, scheduler_config, sharing_policy
from gpupool.server.settings import Settings, env_name, leaves, load_settings, plain

SECTION = leaves(SchedulerSettings)
# A setting whose other value needs another one to be valid.
COMPANIONS: dict[tuple[str, ...], dict[str, Any]] = {("max_lost_s",): {"preemption_by_service": True}}
OTHER_NAMES = {("policy",): "fifo", ("placer",): "best-fit", ("backfill",): BackfillMode.NONE}


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        obj = getattr(obj, name)
    return obj


def _other(path: tuple[str, ...], default: Any) -> Any:
    """A valid value that is not the default."""
    if path in OTHER_NAMES:
        return OTHER_NAMES[path]
    if isinstance(default, bool):
        return not default
    if isinstance(default, Enum):
        return BackfillMode.EASY
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return default + 1.5
    if isinstance(default, tuple):
        return (100.0, 1000.0)
    assert default is None, path
    return 30.0


def _nested(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {path[-1]: value}
    for name in reversed(path[:-1]):
        doc = {name: doc}
    return doc


def test_every_setting_is_named_once_and_walked() -> None:
    names = [".".join(p) for p, _ in SECTION]
    assert len(names) == len(set(names)) > 40
    assert {"policy", "backfill", "preemption_by_service", "max_lost_s", "las_thresholds_gpu_s",
            "gittins.cohort_window_s", "telemetry.hot_gpu", "deadline_admission", "lend_pools"} <= set(names)  # fmt: skip


@pytest.mark.parametrize("path", [p for p, _ in SECTION], ids=[".".join(p) for p, _ in SECTION])
def test_a_setting_reaches_the_server_from_file_and_environment_and_the_simulator_from_the_file(
    path: tuple[str, ...], tmp_path: Path
) -> None:
    default = _get(SchedulerSettings(), path)
    value = _other(path, default)
    extra = COMPANIONS.get(path, {})
    f = tmp_path / "server.yaml"
    f.write_text(yaml.safe_dump({"port": 9000, "scheduler": {**_nested(path, plain(value)), **extra}}))
    env = {env_name(("scheduler", *path)): value if isinstance(value, str) else json.dumps(plain(value))}
    env.update({env_name(("scheduler", k)): json.dumps(v) for k, v in extra.items()})
    server_file = load_settings(f, env={}).scheduler
    server_env = load_settings(None, env=env).scheduler
    sim = _settings(f, {})
    assert _get(server_file, path) == _get(server_env, path) == _get(sim, path) == value != default


def test_both_worlds_start_from_the_same_defaults() -> None:
    defaults = SchedulerSettings()
    assert load_settings(env={}).scheduler == Settings().scheduler == _settings(None, {}) == defaults
    assert scheduler_config(defaults) == SchedulerConfig()  # the scheduler's own defaults, too
    pre = sharing_policy(defaults).preemption
    assert pre.enabled and not pre.by_service and sharing_policy(defaults).deadline_admission


def test_every_simulator_flag_sets_a_scheduler_setting() -> None:
    fields = {f.name for f in dataclasses.fields(SchedulerSettings)}
    assert set(_FLAGS) <= fields


def _gpupool(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_")} | (env or {})
    return subprocess.run([sys.executable, "-m", "gpupool", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env=full)  # fmt: skip


def test_print_config_lists_the_effective_settings_with_secrets_hidden(tmp_path: Path) -> None:
    f = tmp_path / "server.yaml"
    f.write_text("port: 9100\nscheduler:\n  policy: las\n  backfill: easy\n")
    env = {"GPUPOOL_ADMIN_TOKEN": "s3cret-token", "GPUPOOL_SCHEDULER__BACKFILL": "conservative",
           "GPUPOOL_DATABASE_URL": "postgresql+psycopg://gp:hunter2@db:5432/gp"}  # fmt: skip
    r = _gpupool("server", "--config", f, "--print-config", "--host", "0.0.0.0", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert "s3cret-token" not in r.stdout and "hunter2" not in r.stdout
    doc = yaml.safe_load(r.stdout)
    assert doc["admin_token"] == "***" and doc["database_url"] == "postgresql+psycopg://gp:***@db:5432/gp"
    assert (doc["host"], doc["port"]) == ("0.0.0.0", 9100)
    assert doc["scheduler"]["policy"] == "las" and doc["scheduler"]["backfill"] == "conservative"
    # Printed, it is a settings file: the same scheduler, for a server or for ``gpupool sim run --config``.
    printed = tmp_path / "printed.yaml"
    printed.write_text(r.stdout)
    assert load_settings(printed, env={}).scheduler == load_settings(f, env=env).scheduler == _settings(printed, {})


def _itp(tmp: Path) -> Path:
    rows = ["job_id,submission_time,duration,num_gpu"]
    rows += [f"j{i},{i * 300},{600 + 97 * i % 3000},{[1, 2, 4, 8][i % 4]}" for i in range(20)]
    p = tmp / "trace.csv"
    p.write_text("\n".join(rows) + "\n")
    return p


def test_sim_run_takes_the_scheduler_section_and_its_flags_override_it(tmp_path: Path) -> None:
    f = tmp_path / "server.yaml"
    f.write_text("port: 9000\nscheduler:\n  policy: las\n  backfill: easy\n  las_thresholds_gpu_s: [500, 5000]\n")
    base = ("sim", "run", "--trace", _itp(tmp_path), "--format", "itp", "--gpus", "16", "--config", f)
    r = _gpupool(*base, "--backfill", "none", "--out", "o", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    report = (tmp_path / "o" / "report.md").read_text()
    for line in ("- scheduler.policy: las", "- scheduler.backfill: none", "- scheduler.las_thresholds_gpu_s: [500.0, 5000.0]",
                 "- scheduler.placer: topology", "- scheduler.deadline_admission: True"):  # fmt: skip
        assert line in report, line


def test_sim_run_with_a_bad_setting_in_its_file_exits_2_with_the_setting_and_its_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("port: 9000\nscheduler:\n  policy: las\n  backfill: sometimes\n")
    r = _gpupool("sim", "run", "--trace", _itp(tmp_path), "--format", "itp", "--gpus", "16", "--config", f,
                 "--out", "o", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "bad.yaml:4" in lines[0] and "scheduler.backfill" in lines[0] and "sometimes" in lines[0], lines[0]
    f.write_text("scheduler:\n  policy: shortest\n")
    r = _gpupool("sim", "run", "--trace", _itp(tmp_path), "--format", "itp", "--gpus", "16", "--config", f,
                 "--out", "o", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 2 and "bad.yaml:2" in r.stderr and "scheduler.policy" in r.stderr, r.stderr
