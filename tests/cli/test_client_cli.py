"""The client commands as real processes against a real server (uvicorn on 127.0.0.1 in a thread, SQLite)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_server import ADMIN, cli_server, run
from cli_server import tenant_token as make_token

from procs import free_port


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with cli_server(tmp_path_factory.mktemp("srv")) as url:
        yield url


@pytest.fixture(scope="module")
def tenant_token(server_url: str) -> str:
    return make_token(server_url, "team-a")


def test_submit_with_flags_then_list_show_and_cancel(server_url: str, tenant_token: str) -> None:
    code, out, err = run(
        server_url, tenant_token, "submit", "--gpus", "2", "--name", "train", "--", "python", "-c", "1"
    )
    assert code == 0, err
    job_id = out.split()[0]
    code, out, _ = run(server_url, tenant_token, "jobs", "--format", "json")
    assert code == 0 and job_id in [j["id"] for j in json.loads(out)]
    code, out, _ = run(server_url, tenant_token, "job", job_id)
    assert code == 0 and "train" in out and "pending" in out
    assert "events:" in out and "job.submitted" in out  # what happened to it, oldest first
    code, out, _ = run(server_url, tenant_token, "cancel", job_id)
    assert code == 0 and out.strip() == f"{job_id} cancelled"


def test_submit_from_a_yaml_job_file(server_url: str, tenant_token: str, tmp_path: Path) -> None:
    f = tmp_path / "job.yaml"
    f.write_text("name: from-file\ncommand: [sleep, '5']\ntasks: 2\ngpus_per_task: 4\n")
    code, out, err = run(server_url, tenant_token, "submit", "--file", str(f), "--idempotency-key", "file-1")
    assert code == 0 and "submitted" in out, err
    code, again, _ = run(server_url, tenant_token, "submit", "--file", str(f), "--idempotency-key", "file-1")
    assert again.split()[0] == out.split()[0] and "already submitted" in again


def test_an_invalid_job_file_names_file_line_and_field(server_url: str, tenant_token: str, tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("command: [sleep, '5']\ntasks: 0\n")
    code, _, err = run(server_url, tenant_token, "submit", "--file", str(f))
    assert code == 2 and f"{f}:2" in err and "tasks" in err
    assert "Traceback" not in err


def test_a_bad_token_and_a_down_server_are_one_clear_line(server_url: str) -> None:
    code, _, err = run(server_url, "gpt_0123456789abcdef_wrong", "jobs")
    assert code == 2 and "refused the token" in err
    code, _, err = run(f"http://127.0.0.1:{free_port()}", "x", "jobs")
    assert code == 2 and "does not answer" in err and "Traceback" not in err


def test_usage_in_table_csv_and_json(server_url: str, tenant_token: str) -> None:
    for fmt, check in (("table", "tenant"), ("csv", "tenant,gpu_model,pool,gpu_seconds"), ("json", '"usage"')):
        code, out, err = run(server_url, tenant_token, "usage", "--format", fmt)
        assert code == 0 and check in out, err


def test_nodes_pools_and_drain_of_an_unknown_node(server_url: str, tenant_token: str) -> None:
    assert run(server_url, tenant_token, "nodes")[0] == 0
    assert run(server_url, tenant_token, "pools", "--format", "csv")[1].startswith("pool,gpus,used,lent")
    code, _, err = run(server_url, tenant_token, "drain", "gpu-99")
    assert code == 2 and "admin" in err
    code, _, err = run(server_url, ADMIN, "drain", "gpu-99")
    assert code == 2 and "gpu-99" in err
