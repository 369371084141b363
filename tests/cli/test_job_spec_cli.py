"""Job files with the spec's version and human units, against a real server: stored as the numbers they mean;
a bad field is one line with its path and line (exit 2) and nothing stored; the API names the field (422);
``gpupool spec schema`` prints the schema the files are checked against."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cli_server import cli_server, run, tenant_token


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with cli_server(tmp_path_factory.mktemp("srv")) as url:
        yield url, tenant_token(url, "team-a")


def stored(url: str, token: str) -> list[dict[str, object]]:
    code, out, err = run(url, token, "jobs", "--all", "--format", "json")
    assert code == 0, err
    return list(json.loads(out))


def test_a_job_file_in_human_units_is_stored_in_seconds(server: tuple[str, str], tmp_path: Path) -> None:
    url, token = server
    f = tmp_path / "job.yaml"
    f.write_text("version: 1\ncommand: [sleep, '60']\nmemory: 1Gi\ntime_limit: 1h30m\nname: units\n")
    code, out, err = run(url, token, "submit", "-F", str(f))
    assert code == 0, err
    code, out, err = run(url, token, "job", out.split()[0], "--format", "json")
    assert code == 0, err
    assert json.loads(out)["time_limit_s"] == 5400.0


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("command: [a]\nretry:\n  count: 1\n  tries: 3\n", ":4: retry.tries: unknown field"),
        ("command: [a]\ntime_limit: 4fortnights\n", ":2: time_limit: unknown unit 'fortnights'"),
        ("version: 7\ncommand: [a]\n", ":1: version: job spec version 7 is not supported"),
    ],
)
def test_a_bad_job_file_is_one_line_exit_2_nothing_stored(
    server: tuple[str, str], tmp_path: Path, text: str, needle: str
) -> None:
    url, token = server
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    before = stored(url, token)
    code, out, err = run(url, token, "submit", "-F", str(f))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (code, out, err)
    assert f"{f}{needle}" in err, err
    assert stored(url, token) == before


def test_the_api_names_a_bad_or_unknown_field(server: tuple[str, str]) -> None:
    url, token = server
    auth = {"Authorization": f"Bearer {token}"}
    for body, loc in [
        ({"command": ["a"], "memory": "12Qi"}, ["body", "memory"]),
        ({"command": ["a"], "retry": {"count": 1, "tries": 3}}, ["body", "retry", "tries"]),
        ({"command": ["a"], "version": 2}, ["body", "version"]),
    ]:
        r = httpx.post(f"{url}/v1/jobs", json=body, headers=auth)
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == loc, r.text
    r = httpx.post(f"{url}/v1/jobs", json={"command": ["true"], "time_limit": "2h", "memory": "2Gi"}, headers=auth)
    assert r.status_code in (200, 201) and r.json()["job"]["time_limit_s"] == 7200.0, r.text


def test_spec_schema_prints_the_published_schema(tmp_path: Path) -> None:
    code, out, err = run("http://127.0.0.1:9", "", "spec", "schema")
    assert code == 0, err
    schema = json.loads(out)
    assert schema["title"] == "gpupool job" and "time_limit" in schema["properties"]
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("command: [a]\nmemory: 8Gi\n")
    bad.write_text("command: [a]\nmemroy: 8Gi\n")
    assert run("http://127.0.0.1:9", "", "spec", "check", str(good))[:2] == (0, f"{good}: ok\n")
    code, _, err = run("http://127.0.0.1:9", "", "spec", "check", str(bad))
    assert code == 2 and f"{bad}:2: memroy: unknown field" in err


def test_a_pipeline_file_submits_its_jobs_in_order_with_their_ids(server: tuple[str, str], tmp_path: Path) -> None:
    url, token = server
    f = tmp_path / "pipeline.yaml"
    f.write_text(
        "jobs:\n  train:\n    command: [sleep, '60']\n    after: [{kind: afterok, jobs: [prep]}]\n"
        "  prep:\n    command: [sleep, '60']\n"
    )
    code, out, err = run(url, token, "submit", "-F", str(f), "--idempotency-key", "pipe-1")
    assert code == 0, err
    lines = out.strip().splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["prep", "train"] and all(ln.endswith(" submitted") for ln in lines)
    prep, train = (ln.split()[1] for ln in lines)
    code, out, err = run(url, token, "job", train, "--format", "json")
    assert code == 0 and json.loads(out)["name"] == "train", err
    code, again, _ = run(url, token, "submit", "-F", str(f), "--idempotency-key", "pipe-1")
    assert again.split() == [w for ln in lines for w in (*ln.split()[:2], "already", "submitted")]
    assert prep != train


def test_a_dependency_cycle_is_one_line_with_its_line_and_nothing_stored(
    server: tuple[str, str], tmp_path: Path
) -> None:
    url, token = server
    f = tmp_path / "cycle.yaml"
    f.write_text(
        "jobs:\n  a:\n    command: [a]\n    after: [{kind: afterok, jobs: [b]}]\n"
        "  b:\n    command: [b]\n    after: [{kind: afterany, jobs: [a]}]\n"
    )
    before = stored(url, token)
    code, out, err = run(url, token, "submit", "-F", str(f))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (code, out, err)
    assert f"{f}:4: dependency cycle: a -> b -> a" in err, err
    assert stored(url, token) == before
