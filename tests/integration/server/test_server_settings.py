"""Settings: the default database is the store's default file; the environment wins over the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.domain.errors import ParseError
from gpupool.scheduler.settings import SchedulerSettings, scheduler_config
from gpupool.server.core import build_server
from gpupool.server.settings import Settings, load_settings
from gpupool.store import default_url


def test_the_default_database_is_the_stores_default_file(tmp_path: Path) -> None:
    assert Settings(data_dir=str(tmp_path)).url == default_url(tmp_path)


def test_preemption_settings_come_from_the_environment(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("scheduler:\n  preemption: true\n  preemption_grace_s: 60\n", encoding="utf-8")
    env = {"GPUPOOL_SCHEDULER__PREEMPTION": "false", "GPUPOOL_SCHEDULER__REQUIRE_QUOTA": "yes"}
    s = load_settings(f, env=env).scheduler
    assert (s.preemption, s.preemption_grace_s, s.require_quota) == (False, 60.0, True)


def test_stop_grace_comes_from_the_environment_and_must_not_be_negative(tmp_path: Path) -> None:
    assert load_settings(env={}).stop_grace_s == 30.0
    assert load_settings(env={"GPUPOOL_STOP_GRACE_S": "1.5"}).stop_grace_s == 1.5
    with pytest.raises(ParseError, match="negative"):
        load_settings(env={"GPUPOOL_STOP_GRACE_S": "-1"})
    f = tmp_path / "s.yaml"
    f.write_text("stop_grace_s: -2\n", encoding="utf-8")
    with pytest.raises(ParseError, match="negative"):
        load_settings(f, env={})


def test_the_queue_policy_and_placer_come_from_the_settings(tmp_path: Path) -> None:
    s = load_settings(env={"GPUPOOL_SCHEDULER__POLICY": "gittins", "GPUPOOL_SCHEDULER__PLACER": "frag"})
    config = scheduler_config(s.scheduler)
    assert (config.policy, config.placer) == ("gittins", "frag")
    assert scheduler_config(load_settings(env={}).scheduler).policy == "srt"
    f = tmp_path / "s.yaml"
    f.write_text("scheduler:\n  policy: hrrn\n", encoding="utf-8")
    assert scheduler_config(load_settings(f, env={}).scheduler).policy == "hrrn"


def test_settings_that_moved_into_the_scheduler_section_are_named(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("port: 8000\npolicy: hrrn\n", encoding="utf-8")
    with pytest.raises(ParseError, match=r"s.yaml:2: unknown setting 'policy' \(now scheduler.policy\)"):
        load_settings(f, env={})
    with pytest.raises(ParseError, match="GPUPOOL_POLICY: moved to GPUPOOL_SCHEDULER__POLICY"):
        load_settings(env={"GPUPOOL_POLICY": "hrrn"})


def test_an_unknown_policy_or_placer_is_refused_before_the_store_is_opened(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match=r"setting 'scheduler.policy': 'shortest' is not one of .*gittins"):
        build_server(Settings(data_dir=str(tmp_path / "a"), scheduler=SchedulerSettings(policy="shortest")))
    with pytest.raises(ParseError, match=r"setting 'scheduler\.placer': 'tight'"):
        build_server(Settings(data_dir=str(tmp_path / "b"), scheduler=SchedulerSettings(placer="tight")))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"GPUPOOL_MAX_BODY_BYTES": "0"}, "'max_body_bytes': 0 must be above 0"),
        ({"GPUPOOL_MAX_ADMIN_BODY_BYTES": "10"}, "'max_admin_body_bytes': 10 is below max_body_bytes"),
        ({"GPUPOOL_HEADER_TIMEOUT_S": "-1"}, "'header_timeout_s': -1.0 must be above 0"),
        ({"GPUPOOL_AUTH_FAIL_PER_S": "-0.5"}, "'auth_fail_per_s': -0.5 is negative"),
        ({"GPUPOOL_HEARTBEAT_MAX_PER_S": "-1"}, "'heartbeat_max_per_s': -1.0 is negative"),
        ({"GPUPOOL_BACKLOG": "0"}, "'backlog': 0 must be at least 1"),
        ({"GPUPOOL_GC_THRESHOLDS": "20000,0,20"}, r"'gc_thresholds': \[20000, 0, 20\]: each must be at least 1"),
    ],
)
def test_a_bad_door_setting_is_one_error_naming_it(env: dict[str, str], message: str) -> None:
    with pytest.raises(ParseError, match=message) as e:
        load_settings(env=env)
    assert e.value.source == next(iter(env))
