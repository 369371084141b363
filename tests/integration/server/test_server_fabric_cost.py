"""What registrations and heartbeats cost in fabric work (the regression of the live events: every
registration rebuilt or re-parsed the fabric, N^2 over a burst). The invariant: an agent's inventory is
validated once per registration, the imported fabric parsed once per stored version, and a heartbeat does
neither. SQLite and PostgreSQL, the real app, the loop driven by hand."""

from __future__ import annotations

from typing import Any

from server_api_helpers import Api

from gpupool.fabric import jsonio
from gpupool.fabric.generators import leaf_spine

HOSTS = [f"node{i:03d}" for i in range(1, 21)]


def beat(api: Api, host: str, node: dict[str, str]) -> None:
    ports: list[dict[str, Any]] = [{"hca": "mlx5_0", "state": "up", "xmit_wait_per_s": 1e6, "errors_per_s": 0.0}]
    r = api.client.post(f"/v1/agents/{host}/heartbeat", json={"seq": 1, "at_s": 0.0, "ports": ports}, headers=node)
    assert r.status_code == 200, r.text


def test_without_an_imported_fabric_each_inventory_is_validated_once(api: Api) -> None:
    nodes = {}
    for h in HOSTS:
        nodes[h] = api.register(h, gpus=8, hcas=1)
        api.srv.loop.run_cycle()  # the loop rebuilds the synthetic fabric for each new agent...
    for _ in range(3):
        api.clock.t += 1.0
        for h in HOSTS:
            beat(api, h, nodes[h])
        api.srv.loop.run_cycle()
    fabrics = api.srv.fabrics
    assert fabrics.validated == len(HOSTS)  # ...validating only the new one's inventory (N, not N^2 / 2)
    assert fabrics.parsed == 0
    nodes[HOSTS[3]] = api.register(HOSTS[3], gpus=8, hcas=1)  # registers again: its inventory may differ
    api.srv.loop.run_cycle()
    assert fabrics.validated == len(HOSTS) + 1
    fabric, _ = fabrics.current()
    assert fabric is not None and {h.name for h in fabric.hosts} == set(HOSTS)


def test_the_imported_fabric_is_parsed_once_per_stored_version(api: Api) -> None:
    fab = leaf_spine(4, 1, 5, gpus_per_host=8)  # node001..node020
    assert api.client.put("/v1/fabric", json=jsonio.to_dict(fab), headers=api.admin()).status_code == 200
    nodes = {h: api.register(h, gpus=8, hcas=1) for h in HOSTS}
    for _ in range(3):
        api.clock.t += 2 * api.srv.settings.host_cache_s  # past the leaf map's re-read of the version
        for h in HOSTS:
            beat(api, h, nodes[h])
        api.srv.loop.run_cycle()
    fabrics = api.srv.fabrics
    assert fabrics.parsed == 1 and fabrics.validated == 0  # no synthetic fabric is built beside an import
    assert api.client.put("/v1/fabric", json=jsonio.to_dict(fab), headers=api.admin()).status_code == 200
    api.srv.loop.run_cycle()
    api.clock.t += 2 * api.srv.settings.host_cache_s
    for h in HOSTS:
        beat(api, h, nodes[h])
    assert fabrics.parsed == 2


def test_under_an_imported_fabric_a_registration_rebuilds_no_loop_state(api: Api) -> None:
    """An agent registering (again) changes the registered agents, not an imported topology: the loop folds
    its node in through the sync (its node up, its work placeable at once) instead of rebuilding its whole
    state from the store (~1.4 s at a thousand hosts). A new stored fabric version still rebuilds."""
    fab = leaf_spine(4, 1, 5, gpus_per_host=8)
    assert api.client.put("/v1/fabric", json=jsonio.to_dict(fab), headers=api.admin()).status_code == 200
    api.register(HOSTS[0], gpus=8, hcas=1)
    assert api.srv.loop.run_cycle().rebuilt
    assert not api.srv.loop.run_cycle().rebuilt
    key = api.srv.fabrics.current()[1]
    api.register(HOSTS[1], gpus=8, hcas=1)
    api.register(HOSTS[0], gpus=8, hcas=1)  # again
    # The fabric's key is the stored version alone: the agents' set is not read while a fabric is imported.
    assert api.srv.fabrics.current()[1] == key
    alice = api.tenant("alice")
    for _ in range(2):  # 8 GPUs each: one per node
        assert api.client.post("/v1/jobs", json={"command": ["true"], "gpus_per_task": 8}, headers=alice).is_success
    report = api.srv.loop.run_cycle()
    assert (report.rebuilt, report.placed) == (False, 2)
    assert api.client.put("/v1/fabric", json=jsonio.to_dict(fab), headers=api.admin()).status_code == 200
    assert api.srv.loop.run_cycle().rebuilt
