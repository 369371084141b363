"""``gpupool admin tokens`` and ``gpupool admin join-tokens`` as real processes against a real server: create
(printed once, with an expiry and a note), list (never a secret), revoke (refused from the next request on);
bad values are one line, exit 2, and nothing is made."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_server import ADMIN, cli_server, run


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with cli_server(tmp_path_factory.mktemp("srv")) as url:
        # The tenant every test names, made here: tests of one module may run in any order, on any worker.
        assert run(url, ADMIN, "admin", "tenants", "create", "acme")[0] == 0
        yield url


def _tokens(url: str) -> list[dict[str, object]]:
    code, out, err = run(url, ADMIN, "admin", "tokens", "list", "--format", "json")
    assert code == 0, err
    return list(json.loads(out))


def test_create_list_use_and_revoke_an_api_token(server_url: str) -> None:
    code, out, err = run(
        server_url, ADMIN, "admin", "tokens", "create", "--tenant", "acme", "--expires-in", "1h", "--note", "ci"
    )
    assert code == 0, err
    token = out.strip()
    token_id, secret = token.split("_")[1], token.split("_", 2)[2]
    (listed,) = [t for t in _tokens(server_url) if t["id"] == token_id]
    assert (listed["tenant"], listed["note"], listed["state"]) == ("acme", "ci", "active")
    assert isinstance(listed["expires_s"], float) and isinstance(listed["created_s"], float)
    assert listed["expires_s"] == pytest.approx(listed["created_s"] + 3600)
    code, table, _ = run(server_url, ADMIN, "admin", "tokens", "list", "--tenant", "acme")
    assert code == 0 and token_id in table and secret not in table
    assert run(server_url, token, "jobs")[0] == 0
    code, out, err = run(server_url, ADMIN, "admin", "tokens", "revoke", token_id)
    assert code == 0 and out.strip() == f"token {token_id} revoked", err
    code, _, err = run(server_url, token, "jobs")
    assert code == 2 and "refused the token" in err
    assert [t["state"] for t in _tokens(server_url) if t["id"] == token_id] == ["revoked"]


def test_create_list_and_revoke_a_join_token(server_url: str) -> None:
    code, out, err = run(server_url, ADMIN, "admin", "join-tokens", "create", "--max-nodes", "3", "--note", "rack 7")
    assert code == 0 and out.startswith("gpj_"), err
    token_id = out.strip().split("_")[1]
    code, table, _ = run(server_url, ADMIN, "admin", "join-tokens", "list")
    (line,) = [ln for ln in table.splitlines() if ln.startswith(token_id)]
    assert line.split()[:4] == [token_id, "active", "0", "3"] and "rack 7" in line
    code, out, _ = run(server_url, ADMIN, "admin", "join-tokens", "revoke", token_id)
    assert code == 0 and out.strip() == f"join token {token_id} revoked"
    code, out, _ = run(server_url, ADMIN, "admin", "join-tokens", "list", "--format", "json")
    assert [t["state"] for t in json.loads(out) if t["id"] == token_id] == ["revoked"]


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (("tokens", "create", "--tenant", "acme", "--expires-in", "0"), "--expires-in"),
        (("tokens", "create", "--tenant", "acme", "--expires-in", "soon"), "--expires-in"),
        (("tokens", "create", "--tenant", "acme", "--expires-at", "1"), "expires_at_s"),
        (("tokens", "create"), "tenant"),
        (("join-tokens", "create", "--max-nodes", "0"), "--max-nodes"),
        (("tokens", "revoke", "0123456789abcdef"), "not stored"),
    ],
)
def test_bad_values_are_one_line_exit_2_and_make_nothing(
    server_url: str, args: tuple[str, ...], names: str, tmp_path: Path
) -> None:
    before = _tokens(server_url)
    code, out, err = run(server_url, ADMIN, "admin", *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and names in err, (code, out, err)
    assert _tokens(server_url) == before
