"""Live telemetry: a heartbeat's GPU and port samples reach the dashboard's fabric payload (one per host)."""

from __future__ import annotations

from typing import Any

from server_api_helpers import Api

LEAF_OK, LEAF_DOWN = 0, 3  # gpupool.web.fabricview's leaf flags


def beat(api: Api, host: str, node: dict[str, str], **samples: Any) -> None:
    body = {"seq": 2, "at_s": api.clock.t, **samples}
    r = api.client.post(f"/v1/agents/{host}/heartbeat", json=body, headers=node)
    assert r.status_code == 200, r.text


def fabric(api: Api) -> dict[str, Any]:
    """The fabric page's whole answer, with GPU telemetry: its static and live parts in one dict."""
    r = api.client.get("/ui/api/fabric", params={"telemetry": "true"}, headers=api.admin())
    assert r.status_code == 200, r.text
    got = r.json()
    return {**got["static"], **got["live"]}


def test_a_heartbeats_samples_show_on_the_fabric_page(api: Api) -> None:
    nodes = {h: api.register(h, gpus=4, hcas=2) for h in ("gpu-01", "gpu-02")}
    before = fabric(api)
    assert set(before["util"]) == {None} and set(before["leaf_flag"]) == {LEAF_OK}
    gpus = [{"index": i, "utilization_pct": 10.0 * (i + 1), "temperature_c": 50.0 + i} for i in range(4)]
    ports = [{"hca": "mlx5_0", "state": "up"}, {"hca": "mlx5_1", "state": "down"}]
    beat(api, "gpu-02", nodes["gpu-02"], gpus=gpus, ports=ports)
    got = fabric(api)
    h = got["hosts"].index("gpu-02")
    off = got["gpu_offset"][h]
    assert got["util"][off : off + 4] == [10.0, 20.0, 30.0, 40.0]
    assert got["temp"][off : off + 4] == [50.0, 51.0, 52.0, 53.0]
    other = got["gpu_offset"][got["hosts"].index("gpu-01")]
    assert got["util"][other : other + 4] == [None] * 4  # gpu-01 sent no samples
    # The down port flags exactly its leaf.
    fab, _ = api.srv.fabrics.current()
    assert fab is not None
    hca = next(i for i, x in enumerate(fab.hcas) if (x.host, x.name) == ("gpu-02", "mlx5_1"))
    down_leaf = fab.switches[int(fab.hca_leaf[hca])].name
    flags = {leaf[0]: flag for leaf, flag in zip(got["tiers"]["leaf"], got["leaf_flag"], strict=True)}
    assert flags[down_leaf] == LEAF_DOWN
    assert all(f == LEAF_OK for name, f in flags.items() if name != down_leaf)


def test_one_sample_per_host_the_latest_wins(api: Api) -> None:
    node = api.register("gpu-01", gpus=2)
    beat(api, "gpu-01", node, gpus=[{"index": 0, "utilization_pct": 5.0}, {"index": 1, "utilization_pct": 6.0}])
    beat(api, "gpu-01", node, gpus=[{"index": 0, "utilization_pct": 90.0}, {"index": 1, "utilization_pct": 91.0}])
    beat(api, "gpu-01", node)  # a beat without samples keeps the last ones
    assert fabric(api)["util"][:2] == [90.0, 91.0]
    assert list(api.srv.gateway.telemetry()) == ["gpu-01"]
