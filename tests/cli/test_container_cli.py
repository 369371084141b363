"""Containers from the command line, against a real server: ``gpupool submit --image --mount --workdir`` and a
job file's ``image``/``mounts``; a mount or path no runtime could take is exit code 2 and one line naming the
flag (or the file's field), with nothing stored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cli_server import ADMIN, cli_server, run, tenant_token


def register_podman_node(url: str) -> None:
    """A node whose agent has Podman: jobs with an image are placed only on such nodes (and refused without)."""
    admin = {"Authorization": f"Bearer {ADMIN}"}
    join = httpx.post(f"{url}/v1/join-tokens", json={}, headers=admin).json()["token"]
    body = {
        "host": "pod-01",
        "gpus": [{"index": 0, "model": "H100", "memory_mib": 81559}],
        "container_runtime": "podman",
    }
    r = httpx.post(f"{url}/v1/agents/register", json=body, headers={"Authorization": f"Bearer {join}"})
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with cli_server(tmp_path_factory.mktemp("srv")) as url:
        register_podman_node(url)
        yield url, tenant_token(url, "team-a")


def stored(url: str, token: str) -> list[str]:
    """The stored jobs' ids (their states move on: the node runs nothing, but the loop places them)."""
    code, out, err = run(url, token, "jobs", "--all", "--format", "json")
    assert code == 0, err
    return sorted(j["id"] for j in json.loads(out))


def test_a_container_job_is_submitted_from_flags_and_from_a_file(server: tuple[str, str], tmp_path: Path) -> None:
    url, token = server
    flags = ["--image", "registry.local/train:1", "--mount", "/data:/data:ro", "--mount", "/s:/s", "--workdir", "/w"]
    code, out, err = run(url, token, "submit", *flags, "--", "python", "train.py")
    assert code == 0 and "submitted" in out, err
    job = tmp_path / "job.yaml"
    job.write_text(
        "command: [python, train.py]\nimage: registry.local/train:1\nmounts:\n  - {source: /d, target: /d}\n"
    )
    code, out, err = run(url, token, "submit", "-F", str(job))
    assert code == 0 and "submitted" in out, err
    assert len(stored(url, token)) == 2


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--mount", "/data"], "--mount: '/data' is not SRC:DST, SRC:DST:ro or SRC:DST:rw"),
        (["--image", "img", "--mount", "/a:/b:rx"], "--mount: '/a:/b:rx' is not SRC:DST"),
        (
            ["--image", "img", "--mount", "data:/data"],
            "--mount: Value error, mounts[0].source: 'data' is not an absolute",
        ),
        (["--image", "img", "--workdir", "w"], "--workdir: Value error, workdir: 'w' is not an absolute path"),
        (["--image", "-x"], "--image: Value error, image: '-x' is not an image reference"),
        (["--mount", "/a:/b"], "mounts: only for a container: give 'image'"),
    ],
)
def test_bad_container_input_is_one_line_exit_2_and_nothing_is_stored(
    server: tuple[str, str], args: list[str], needle: str
) -> None:
    url, token = server
    before = stored(url, token)
    code, out, err = run(url, token, "submit", *args, "--", "sleep", "1")
    assert code == 2 and out == "", (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], err
    assert stored(url, token) == before
