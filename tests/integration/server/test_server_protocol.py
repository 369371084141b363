"""Agents one protocol version apart work with this server; further apart they are refused, with nothing stored.

Invariant: an agent of protocol N+1 that sends fields this server does not know registers, beats and is
sent its commands; the fields are logged once per host. An agent two versions apart gets 426 with the
stable code PROTOCOL_UNSUPPORTED and a message saying which versions work, and no node is stored.
"""

from __future__ import annotations

import logging

import pytest
from server_api_helpers import Api

from gpupool.schemas.agent import PROTOCOL_VERSION, PROTOCOL_WINDOW


def _join(api: Api) -> dict[str, str]:
    join = api.client.post("/v1/join-tokens", json={}, headers=api.admin()).json()["token"]
    return {"Authorization": f"Bearer {join}"}


def _inventory(host: str, protocol: int) -> dict[str, object]:
    return {
        "protocol": protocol,
        "host": host,
        "gpus": [{"index": 0, "model": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "nvlink_gen": 4}],
        "hcas": [{"name": "mlx5_0", "rate_gbps": 400.0}],
        "boot_id": "4b1f",  # a field of a newer protocol
    }


def test_a_newer_agent_works_and_its_unknown_fields_are_logged_once(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    newer = PROTOCOL_VERSION + PROTOCOL_WINDOW
    caplog.set_level(logging.WARNING, logger="gpupool.server.gateway")
    r = api.client.post("/v1/agents/register", json=_inventory("n1", newer), headers=_join(api))
    assert r.status_code == 200, r.text
    node = {"Authorization": f"Bearer {r.json()['node_token']}"}
    beat = {"protocol": newer, "seq": 0, "at_s": api.clock.t, "gpus": [{"index": 0, "sm_clock_mhz": 1980}]}
    for seq in range(3):
        r = api.client.post("/v1/agents/n1/heartbeat", json={**beat, "seq": seq}, headers=node)
        assert r.status_code == 200, r.text
    warned = [m.getMessage() for m in caplog.records if "ignored fields" in m.getMessage()]
    assert len(warned) == 2, warned  # the registration's fields, then the heartbeats' (once, not three times)
    assert "boot_id" in warned[0] and "gpus[0].nvlink_gen" in warned[0]
    assert "gpus[0].sm_clock_mhz" in warned[1]
    nodes = api.client.get("/v1/nodes", headers=api.admin()).json()["nodes"]
    assert [(n["name"], n["gpu_count"]) for n in nodes] == [("n1", 1)]


@pytest.mark.parametrize("gap", [PROTOCOL_WINDOW + 1, -(PROTOCOL_WINDOW + 1)])
def test_an_agent_too_far_apart_is_refused_and_nothing_is_stored(api: Api, gap: int) -> None:
    r = api.client.post("/v1/agents/register", json=_inventory("far", PROTOCOL_VERSION + gap), headers=_join(api))
    assert r.status_code == 426, r.text
    body = r.json()
    assert body["code"] == "PROTOCOL_UNSUPPORTED"
    lo, hi = PROTOCOL_VERSION - PROTOCOL_WINDOW, PROTOCOL_VERSION + PROTOCOL_WINDOW
    assert f"speaks protocol {PROTOCOL_VERSION + gap}" in body["message"] and f"{lo} to {hi}" in body["message"]
    assert api.client.get("/v1/nodes", headers=api.admin()).json()["nodes"] == []


def test_a_heartbeat_too_far_apart_is_refused(api: Api) -> None:
    node = api.register("n2")
    far = {"protocol": PROTOCOL_VERSION + PROTOCOL_WINDOW + 1, "seq": 0, "at_s": api.clock.t}
    r = api.client.post("/v1/agents/n2/heartbeat", json=far, headers=node)
    assert (r.status_code, r.json()["code"]) == (426, "PROTOCOL_UNSUPPORTED")
