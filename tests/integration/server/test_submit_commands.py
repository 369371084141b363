"""The door: a command a node could not execute is refused by the API (422 naming the field), nothing stored."""

from __future__ import annotations

import pytest
from server_api_helpers import Api

JOB = {"command": ["sleep", "1"], "gpus_per_task": 1}


@pytest.mark.parametrize(
    ("body", "field", "why"),
    [
        ({**JOB, "command": ["sleep", "1\x00"]}, "command", "NUL"),  # loc: body.command.1 (schemas' Text)
        ({**JOB, "command": [""]}, "command", "command[0]: the program name is empty"),
        ({**JOB, "env": {"A=B": "1"}}, "env", "'A=B' is not a variable name"),
        ({**JOB, "env": {"A\x00": "1"}}, "env", "NUL"),
        ({**JOB, "env": {"A": "1\x00"}}, "env", "NUL"),  # loc: body.env.A
        ({**JOB, "command": ["x", *(["a" * 100_000] * 11)]}, "env", "command and env take 1100013 bytes"),
    ],
)
def test_a_command_no_node_could_run_is_422_and_not_stored(
    api: Api, body: dict[str, object], field: str, why: str
) -> None:
    alice = api.tenant("alice")
    r = api.client.post("/v1/jobs", json=body, headers=alice)
    assert r.status_code == 422, r.text[:500]
    detail = r.json()["detail"]
    assert any(d["loc"][:2] == ["body", field] and why in d["msg"] for d in detail), r.text[:500]
    assert api.client.get("/v1/jobs", headers=alice).json()["jobs"] == []
