"""The door: a command a node could not execute is refused by the API (422 naming the field), nothing stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from server_api_helpers import Api, Clock, make_api

JOB = {"command": ["sleep", "1"], "gpus_per_task": 1}


@pytest.mark.parametrize(
    ("body", "field", "why"),
    [
        ({**JOB, "command": ["sleep", "1\x00"]}, "command", "NUL"),  # loc: body.command.1 (schemas' Text)
        ({**JOB, "command": [""]}, "command", "command[0]: the program name is empty"),
        ({**JOB, "env": {"A=B": "1"}}, "env", "'A=B' is not a variable name"),
        ({**JOB, "env": {"A\x00": "1"}}, "env", "NUL"),
        ({**JOB, "env": {"A": "1\x00"}}, "env", "NUL"),  # loc: body.env.A
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


BIG = {**JOB, "command": ["x", *(["a" * 100_000] * 11)]}  # argv of 1,100,013 bytes, over MAX_COMMAND_BYTES (1 MiB)


def test_a_command_over_the_execve_budget_is_refused_whichever_limit_comes_first(
    api: Api, db_url: str, tmp_path: Path, clock: Clock
) -> None:
    """Its body is over max_body_bytes too (1 MiB by default): the door refuses it, 413, before it is parsed. A
    server that takes larger bodies still refuses the command itself: 422 naming it. Nothing stored either way."""
    alice = api.tenant("alice")
    r = api.client.post("/v1/jobs", json=BIG, headers=alice)
    assert r.status_code == 413 and r.json()["code"] == "BODY_TOO_LARGE", r.text[:500]
    assert api.client.get("/v1/jobs", headers=alice).json()["jobs"] == []
    (tmp_path / "wide").mkdir()
    wide = make_api(db_url, tmp_path / "wide", clock, max_body_bytes=4 << 20)
    roomy = next(wide)
    try:
        bob = roomy.tenant("bob")
        r = roomy.client.post("/v1/jobs", json=BIG, headers=bob)
        assert r.status_code == 422, r.text[:500]
        assert any(
            d["loc"][:2] == ["body", "env"] and "command and env take 1100013 bytes" in d["msg"]
            for d in r.json()["detail"]
        ), r.text[:500]
        assert roomy.client.get("/v1/jobs", headers=bob).json()["jobs"] == []
    finally:
        wide.close()


IMAGE = {**JOB, "image": "registry.local/train:1.2"}


@pytest.mark.parametrize(
    ("body", "field", "why"),
    [
        ({**JOB, "mounts": [{"source": "/data", "target": "/data"}]}, [], "mounts: only for a container"),
        ({**JOB, "workdir": "/w"}, [], "workdir: only for a container"),
        ({**IMAGE, "image": "-v"}, ["image"], "image: '-v' is not an image reference"),
        ({**IMAGE, "mounts": [{"source": "data", "target": "/d"}]}, ["mounts"], "mounts[0].source: 'data' is not"),
        ({**IMAGE, "mounts": [{"source": "/d", "target": "/a:b"}]}, ["mounts"], "mounts[0].target: '/a:b' holds"),
        ({**IMAGE, "workdir": "/w/../x"}, ["workdir"], "workdir: '/w/../x' is not a normal path"),
        ({**IMAGE, "env": {"NOTE": "a\nb"}}, [], "env.NOTE: holds a line break"),
    ],
)
def test_a_container_no_runtime_could_take_is_422_naming_the_field_and_not_stored(
    api: Api, body: dict[str, object], field: list[str], why: str
) -> None:
    alice = api.tenant("alice")
    r = api.client.post("/v1/jobs", json=body, headers=alice)
    assert r.status_code == 422, r.text[:500]
    assert any(why in d["msg"] and d["loc"][:2] == ["body", *field] for d in r.json()["detail"]), r.text[:500]
    assert api.client.get("/v1/jobs", headers=alice).json()["jobs"] == []


def test_a_jobs_container_is_stored_and_reaches_each_ranks_launch(api: Api) -> None:
    alice = api.tenant("alice")
    nodes = {h: api.register(h, gpus=8, container_runtime="podman") for h in ("gpu-01", "gpu-02")}
    mounts = [{"source": "/datasets/imagenet", "target": "/data", "read_only": True}]
    body = {**IMAGE, "tasks": 2, "gpus_per_task": 4, "mounts": mounts, "workdir": "/workspace"}
    assert api.client.post("/v1/jobs", json=body, headers=alice).status_code == 201
    assert api.srv.loop.run_cycle().placed == 1
    launches = [c for h, n in nodes.items() for c in api.beat(h, n)]
    assert len(launches) == 2
    for c in launches:
        assert c["argv"] == JOB["command"]
        assert c["container"] == {"image": "registry.local/train:1.2", "mounts": mounts, "workdir": "/workspace"}
    plain = api.client.post("/v1/jobs", json={**JOB, "gpus_per_task": 4}, headers=alice)
    assert plain.status_code == 201
    api.srv.loop.run_cycle()
    (launch,) = [c for h, n in nodes.items() for c in api.beat(h, n) if c["job_id"] == plain.json()["job"]["id"]]
    assert launch["container"] is None


def test_a_container_job_goes_only_to_nodes_with_a_container_runtime(api: Api) -> None:
    alice = api.tenant("alice")
    body = {**IMAGE, "gpus_per_task": 8}
    # No node can run a container yet: refused at the door rather than left waiting (or run on the node).
    r = api.client.post("/v1/jobs", json=body, headers=alice)
    assert r.status_code == 422 and r.json()["code"] == "NO_MATCHING_NODES", r.text
    assert "gpupool/containers" in r.json()["message"]
    nodes = {"plain": api.register("plain"), "pod": api.register("pod", container_runtime="podman")}
    listed = {n["name"]: n["labels"] for n in api.client.get("/v1/nodes", headers=alice).json()["nodes"]}
    assert listed["pod"]["gpupool/container-runtime"] == "podman" and listed["pod"]["gpupool/containers"] == "yes"
    assert "gpupool/containers" not in listed["plain"]
    first = api.client.post("/v1/jobs", json=body, headers=alice).json()["job"]["id"]
    second = api.client.post("/v1/jobs", json=body, headers=alice).json()["job"]["id"]
    api.srv.loop.run_cycle()
    launched = {h: [c["job_id"] for c in api.beat(h, n)] for h, n in nodes.items()}
    assert launched["plain"] == [] and len(launched["pod"]) == 1  # the free node without a runtime takes neither
    (waiting,) = {first, second} - set(launched["pod"])
    assert api.client.get(f"/v1/jobs/{waiting}", headers=alice).json()["state"] == "pending"
    # A selector naming the runtime replaces the implied one; naming one no node has is refused.
    r = api.client.post(
        "/v1/jobs", json={**body, "node_selector": {"gpupool/container-runtime": "enroot"}}, headers=alice
    )
    assert r.status_code == 422 and "gpupool/container-runtime is podman (1 node)" in r.json()["message"], r.text
