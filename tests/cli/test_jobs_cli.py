"""Arrays, dependencies and limits from the command line, against a real server: an array is queried and
cancelled as one; bad input (an array past the server's maximum, an unknown job in a dependency, a time
limit in an unknown unit) is exit code 2 and one line naming the problem, with nothing stored."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from cli_server import cli_server, run, tenant_token

MAX_ARRAY = 50


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with cli_server(tmp_path_factory.mktemp("srv"), max_array_size=MAX_ARRAY) as url:
        yield url, tenant_token(url, "team-a")


def stored(url: str, token: str) -> list[dict[str, object]]:
    code, out, err = run(url, token, "jobs", "--all", "--format", "json")
    assert code == 0, err
    return list(json.loads(out))


def one_line_error(code: int, out: str, err: str) -> str:
    assert code == 2 and out == "", (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_an_array_is_submitted_queried_listed_and_cancelled_as_one(server: tuple[str, str]) -> None:
    url, token = server
    code, out, err = run(url, token, "submit", "--array", "0-9%2", "--name", "sweep", "--", "sleep", "60")
    assert code == 0, err
    array_id = out.split()[0]
    assert out.strip() == f"{array_id} submitted: array of 10 jobs ({array_id}.0 first)"
    code, out, _ = run(url, token, "jobs", "--array", array_id, "--sort", "submitted", "--order", "asc", "-f", "json")
    assert code == 0 and [j["array_index"] for j in json.loads(out)] == list(range(10))
    code, out, _ = run(url, token, "job", array_id, "--format", "json")
    assert code == 0 and json.loads(out)["size"] == 10 and json.loads(out)["cap"] == 2
    code, out, err = run(url, token, "cancel", array_id)
    assert code == 0 and out.strip() == f"{array_id} 10 cancelled", err


def test_a_dependency_from_the_command_line_names_stored_jobs(server: tuple[str, str]) -> None:
    url, token = server
    code, out, err = run(url, token, "submit", "--", "sleep", "1")
    assert code == 0, err
    first = out.split()[0]
    code, out, err = run(url, token, "submit", "--dependency", f"afterok:{first}", "--", "sleep", "1")
    assert code == 0, err
    code, out, _ = run(url, token, "job", out.split()[0])
    assert code == 0 and "pending" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--array", f"0-{MAX_ARRAY}"], f"body.array: array '0-{MAX_ARRAY}' has more than the {MAX_ARRAY} elements"),
        (["--array", "9-1"], "body.array: range '9-1' is empty"),
        (["--dependency", "afterok:j-nope"], "body.after: job 'j-nope' is not stored"),
        (["--dependency", "singleton:j-1"], "--dependency: dependency kind 'singleton' is not supported"),
        (["--time-limit", "4x"], "--time-limit: unknown unit 'x' in duration '4x'"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_is_stored(
    server: tuple[str, str], args: list[str], needle: str
) -> None:
    url, token = server
    before = stored(url, token)
    line = one_line_error(*run(url, token, "submit", *args, "--", "sleep", "1"))
    assert needle in line, line
    assert stored(url, token) == before
