"""Node labels: the agent's and the derived ones at registration, admins' over them (surviving re-registration),
a ``node_selector`` placed by them, and a selector nobody can match refused at submit. SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from server_api_helpers import Api

from gpupool.fabric import jsonio
from gpupool.fabric.generators import leaf_spine

FABRIC = leaf_spine(2, 1, 2, gpus_per_host=8)
JOB = {"command": ["sleep", "600"], "tasks": 1, "gpus_per_task": 8}


def register(api: Api, host: str, labels: dict[str, str] | None = None) -> dict[str, str]:
    # Again: with the node token its last registration got, as a restarted agent presents its kept token.
    join = api.node_tokens.get(host) or api.client.post("/v1/join-tokens", json={}, headers=api.admin()).json()["token"]
    h = FABRIC.host(host)
    body: dict[str, Any] = {
        "host": host,
        "gpus": [{"index": g.index, "model": g.model, "memory_mib": g.memory_mib} for g in h.gpus],
        "hcas": [{"name": "mlx5_0", "guid": h.hcas[0]}],
        "labels": labels or {},
    }
    r = api.client.post("/v1/agents/register", json=body, headers={"Authorization": f"Bearer {join}"})
    assert r.status_code == 200, r.text
    api.node_tokens[host] = r.json()["node_token"]
    return {"Authorization": f"Bearer {r.json()['node_token']}"}


def setup(api: Api) -> dict[str, str]:
    assert api.client.put("/v1/fabric", json=jsonio.to_dict(FABRIC), headers=api.admin()).status_code == 200
    for h in FABRIC.hosts:
        register(api, h.name)
    return api.tenant("acme")


def labels(api: Api, node: str) -> dict[str, Any]:
    r = api.client.get(f"/v1/nodes/{node}/labels", headers=api.admin())
    assert r.status_code == 200, r.text
    return dict(r.json())


def patch(api: Api, node: str, headers: dict[str, str] | None = None, **body: Any) -> Any:
    return api.client.patch(f"/v1/nodes/{node}/labels", json=body, headers=headers or api.admin())


def test_registration_gives_the_agents_labels_and_derived_ones(api: Api) -> None:
    assert api.client.put("/v1/fabric", json=jsonio.to_dict(FABRIC), headers=api.admin()).status_code == 200
    register(api, "node003", {"rack": "r7", "gpupool/su": "mine"})
    got = labels(api, "node003")
    assert got["agent_labels"] == {
        "rack": "r7",
        "gpupool/gpu-model": "NVIDIA H100 80GB HBM3",
        "gpupool/leaf": "leaf-02",
        "gpupool/su": "mine",  # the node's configuration wins over what is derived
        "gpupool/rails": "1",
        "network.topology.nvidia.com/leaf": "leaf-02",
        "network.topology.nvidia.com/spine": "spine-01",
    }
    assert got["admin_labels"] == {} and got["labels"] == got["agent_labels"]
    listed = {n["name"]: n for n in api.client.get("/v1/nodes", headers=api.admin()).json()["nodes"]}
    assert listed["node003"]["labels"]["rack"] == "r7"


def test_an_admin_label_places_a_selector_job_and_survives_the_agent_registering_again(api: Api) -> None:
    acme = setup(api)
    r = patch(api, "node004", set={"zone": "b", "rack": "r9"})
    assert r.status_code == 200, r.text
    assert r.json()["admin_labels"] == {"zone": "b", "rack": "r9"}
    job = api.client.post("/v1/jobs", json={**JOB, "node_selector": {"zone": "b"}}, headers=acme).json()["job"]["id"]
    api.srv.loop.run_cycle()
    assert {a.host for a in api.srv.ops.job_assignments(job)} == {"node004"}
    register(api, "node004", {"rack": "r1"})  # the agent comes back with its own labels
    got = labels(api, "node004")
    assert got["admin_labels"] == {"zone": "b", "rack": "r9"} and got["agent_labels"]["rack"] == "r1"
    assert got["labels"]["rack"] == "r9"  # an admin's value wins for a key both set
    events = api.srv.store.list_audit(subject="node/node004", limit=100)
    assert [e.data for e in events if e.action == "node.labels"] == [
        {"set": {"zone": "b", "rack": "r9"}, "removed": []}
    ]
    # Removing it lets the agent's value show again, and the scheduler sees that at its next cycle.
    assert patch(api, "node004", remove=["rack", "zone"]).json()["labels"]["rack"] == "r1"
    second = api.client.post("/v1/jobs", json={**JOB, "node_selector": {"rack": "r9"}}, headers=acme)
    assert second.status_code == 422 and second.json()["code"] == "NO_MATCHING_NODES"


def test_a_selector_nobody_matches_is_refused_with_the_labels_that_exist_and_nothing_is_stored(api: Api) -> None:
    acme = setup(api)
    patch(api, "node001", set={"zone": "a"})
    patch(api, "node002", set={"zone": "a"})
    patch(api, "node003", set={"zone": "c"})
    r = api.client.post("/v1/jobs", json={**JOB, "node_selector": {"zone": "b", "disk": "nvme"}}, headers=acme)
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["code"] == "NO_MATCHING_NODES"
    assert "zone is a (2 nodes), c (1 node)" in body["message"] and "no node has a label disk" in body["message"]
    assert "gpupool/leaf" in body["message"]  # the keys nodes do have
    assert api.client.get("/v1/jobs", headers=acme).json()["jobs"] == []
    # Labels on two different nodes are not one node's: still refused.
    patch(api, "node004", set={"disk": "nvme"})
    r = api.client.post("/v1/jobs", json={**JOB, "node_selector": {"zone": "c", "disk": "nvme"}}, headers=acme)
    assert r.status_code == 422
    patch(api, "node004", set={"zone": "c"})
    r = api.client.post("/v1/jobs", json={**JOB, "node_selector": {"zone": "c", "disk": "nvme"}}, headers=acme)
    assert r.status_code == 201, r.text  # set a moment ago: the check reads the store before refusing


def test_label_changes_are_for_admins_and_checked(api: Api) -> None:
    acme = setup(api)
    assert patch(api, "node001", headers=acme, set={"zone": "a"}).status_code == 403
    assert labels(api, "node001")["admin_labels"] == {}
    bad = patch(api, "node001", set={"bad key": "x"})
    assert bad.status_code == 422 and "bad key" in bad.text
    assert patch(api, "node001", set={"zone": "a"}, remove=["zone"]).status_code == 422
    owned = patch(api, "node001", remove=["gpupool/leaf"])
    assert owned.status_code == 409 and "set by its agent" in owned.json()["message"]
    assert patch(api, "node404", set={"zone": "a"}).status_code == 404
    r = api.client.post("/v1/jobs", json={**JOB, "node_selector": {"-x": "1"}}, headers=acme)
    assert r.status_code == 422 and "node_selector" in r.text
