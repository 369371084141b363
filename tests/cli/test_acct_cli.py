"""``gpupool acct`` bad input against a real server: a window in a form nobody reads, a statement month that
is no month, a statement without a rate card: exit 2, one line naming the problem. A tenant sees its own."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from cli_server import ADMIN, cli_server, run, tenant_token


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with cli_server(tmp_path_factory.mktemp("srv")) as url:
        yield url, tenant_token(url, "team-a")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["acct", "--since", "last tuesday"], "--since: 'last tuesday' is not a time"),
        (["acct", "--since", "now-3fortnights"], "--since: unknown unit 'fortnights'"),
        (["acct", "statement", "--month", "2026-13"], "'2026-13' is not a month"),
        (["acct", "statement", "--month", "2026-11"], "no rate card is configured"),
        (["acct", "--tenant", "team-b"], "sees its own tenant's accounting only"),
    ],
)
def test_bad_input_is_one_line_exit_2(server: tuple[str, str], args: list[str], needle: str) -> None:
    url, token = server
    code, out, err = run(url, token, *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (code, err)
    assert needle in err, err


def test_an_empty_window_is_an_empty_table_and_json(server: tuple[str, str]) -> None:
    url, _ = server
    code, out, err = run(url, ADMIN, "acct", "-f", "json", "--since", "2020-01-01", "--until", "2020-02-01")
    assert code == 0 and json.loads(out) == [], err
    code, out, err = run(url, ADMIN, "acct", "--since", "2020-01-01", "--until", "2020-02-01")
    assert code == 0 and out.split()[:3] == ["job_id", "attempt", "tenant"], err
