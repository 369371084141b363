"""/metrics as Prometheus reads it, on SQLite and PostgreSQL, the real app: after a heartbeat with GPU, port and
XID samples and a cycle that places a job under a quota, every family the operator's pack uses exists with its
type and the values the beat and the cycle gave; ``promtool check metrics`` passes on the scraped text."""

from __future__ import annotations

import json
import platform
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families
from server_api_helpers import Api

from gpupool import __version__

JOB = {"command": ["sleep", "1"], "gpus_per_task": 1}

# Every gpupool_ family the dashboards and alerts read, with its type (prometheus_client's names: a counter's
# family is named without ``_total``, its sample with it).
FAMILIES = {
    "gpupool_build_info": "gauge",
    "gpupool_leader": "gauge",
    "gpupool_nodes": "gauge",
    "gpupool_agent_heartbeat_age_seconds": "gauge",
    "gpupool_gpu_health": "gauge",
    "gpupool_gpu_utilization_ratio": "gauge",
    "gpupool_gpu_memory_used_bytes": "gauge",
    "gpupool_gpu_temperature_celsius": "gauge",
    "gpupool_gpu_power_watts": "gauge",
    "gpupool_gpu_xid": "counter",
    "gpupool_ib_port_state": "gauge",
    "gpupool_ib_port_xmit_bytes_per_second": "gauge",
    "gpupool_ib_port_rcv_bytes_per_second": "gauge",
    "gpupool_ib_port_xmit_wait_per_second": "gauge",
    "gpupool_ib_port_errors_per_second": "gauge",
    "gpupool_leaf_congestion_ratio": "gauge",
    "gpupool_leaf_link_state": "gauge",
    "gpupool_jobs": "gauge",
    "gpupool_queue_depth": "gauge",
    "gpupool_queue_wait_seconds": "histogram",
    "gpupool_schedule_cycle_seconds": "histogram",
    "gpupool_placements": "counter",
    "gpupool_preemptions": "counter",
    "gpupool_job_submits": "counter",
    "gpupool_gpus_allocated": "gauge",
    "gpupool_gpus_free": "gauge",
    "gpupool_quota_used_gpus": "gauge",
    "gpupool_quota_nominal_gpus": "gauge",
    "gpupool_quota_borrowed_gpus": "gauge",
    "gpupool_tenant_gpu_seconds": "counter",
}


def _scrape(api: Api) -> str:
    r = api.client.get("/metrics", headers=api.admin())
    assert r.status_code == 200, r.text
    return r.text


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def _heartbeat_with_samples(api: Api, host: str, node: dict[str, str]) -> None:
    gpus: list[dict[str, Any]] = [
        {"index": i, "utilization_pct": 50.0, "memory_used_mib": 1024, "temperature_c": 60.0 + i, "power_w": 300.0}
        for i in range(4)
    ]
    gpus[3]["health"] = "bad"
    ports = [
        {"hca": "mlx5_0", "state": "up", "xmit_gbps": 100.0, "rcv_gbps": 90.0, "xmit_wait_per_s": 5.0},
        {"hca": "mlx5_1", "state": "down", "errors_per_s": 2.0},
    ]
    xids = [{"gpu": 3, "code": 79, "at_s": api.clock.t, "message": "fallen off the bus"}]
    body = {"seq": 2, "at_s": api.clock.t, "gpus": gpus, "ports": ports, "xids": xids}
    r = api.client.post(f"/v1/agents/{host}/heartbeat", json=body, headers=node)
    assert r.status_code == 200, r.text


def _loaded(api: Api) -> str:
    """Two nodes, one beat with samples, a quota, a placed job that waited 30 s and one over the quota: a scrape."""
    alice = api.tenant("alice")
    quota = {"pool": "default", "nominal_gpus": 2}
    assert api.client.put("/v1/tenants/alice/quotas", json=quota, headers=api.admin()).status_code == 200
    node = api.register("gpu-01", gpus=4, hcas=2)
    api.register("gpu-02", gpus=4, hcas=2)
    _heartbeat_with_samples(api, "gpu-01", node)
    api.client.post("/v1/jobs", json={**JOB, "gpus_per_task": 2}, headers=alice)
    api.client.post("/v1/jobs", json={**JOB, "gpus_per_task": 2}, headers=alice)  # over the quota: waits
    api.clock.t += 30  # the first job waited 30 s
    assert api.srv.loop.run_cycle().placed == 1
    api.clock.t += 10
    text = _scrape(api)
    return text


def test_the_families_exist_with_their_types_after_a_beat_and_a_cycle(api: Api) -> None:
    text = _loaded(api)
    types = {f.name: f.type for f in text_string_to_metric_families(text) if f.name.startswith("gpupool_")}
    assert {n: types.get(n) for n in FAMILIES} == FAMILIES
    got = _samples(text)

    def at(name: str, **labels: str) -> float:
        return got[(name, frozenset(labels.items()))]

    assert at("gpupool_nodes", state="up") == 2.0 and at("gpupool_nodes", state="lost") == 0.0
    assert at("gpupool_gpu_utilization_ratio", node="gpu-01", gpu="0") == 0.5
    assert at("gpupool_gpu_memory_used_bytes", node="gpu-01", gpu="1") == 1024 * 2**20
    assert at("gpupool_gpu_temperature_celsius", node="gpu-01", gpu="2") == 62.0
    assert at("gpupool_gpu_power_watts", node="gpu-01", gpu="3") == 300.0
    assert at("gpupool_gpu_health", node="gpu-01", gpu="3") == 2.0
    assert at("gpupool_gpu_health", node="gpu-01", gpu="0") == 0.0
    assert at("gpupool_gpu_xid_total", node="gpu-01", gpu="3") == 1.0
    fab, _ = api.srv.fabrics.current()
    assert fab is not None
    leaf = {x.name: fab.switches[int(fab.hca_leaf[i])].name for i, x in enumerate(fab.hcas) if x.host == "gpu-01"}
    up = {"node": "gpu-01", "port": "mlx5_0/1", "leaf": leaf["mlx5_0"]}
    down = {"node": "gpu-01", "port": "mlx5_1/1", "leaf": leaf["mlx5_1"]}
    assert at("gpupool_ib_port_state", **up) == 0.0 and at("gpupool_ib_port_state", **down) == 2.0
    assert at("gpupool_ib_port_xmit_bytes_per_second", **up) == 100e9 / 8
    assert at("gpupool_ib_port_xmit_wait_per_second", **up) == 5.0
    assert at("gpupool_ib_port_errors_per_second", **down) == 2.0
    assert at("gpupool_jobs", state="running", tenant="alice", pool="default") == 1.0
    assert at("gpupool_jobs", state="pending", tenant="alice", pool="default") == 1.0
    assert at("gpupool_queue_wait_seconds_count") == 1.0
    assert at("gpupool_queue_wait_seconds_bucket", le="10.0") == 0.0
    assert at("gpupool_queue_wait_seconds_bucket", le="30.0") == 1.0
    q = {"tenant": "alice", "pool": "default", "gpu_model": ""}
    assert at("gpupool_quota_used_gpus", **q) == 2.0 and at("gpupool_quota_nominal_gpus", **q) == 2.0
    assert at("gpupool_quota_borrowed_gpus", **q) == 0.0
    assert at("gpupool_job_submits_total") == 2.0 and at("gpupool_placements_total") == 1.0
    assert at("gpupool_build_info", version=__version__, python=platform.python_version()) == 1.0
    assert ("process_cpu_seconds_total", frozenset()) in got


def test_tenant_gpu_seconds_is_a_counter_that_only_grows(api: Api) -> None:
    alice = api.tenant("alice")
    api.register("gpu-01", gpus=4)
    api.client.post("/v1/jobs", json={**JOB, "gpus_per_task": 2}, headers=alice)
    assert api.srv.loop.run_cycle().placed == 1
    seen = []
    for step in (10, 100, 200, 5):  # across the settling watermark (120 s) and back inside it
        api.clock.t += step
        seen.append(_alice_gpu_seconds(api))
    # 2 GPUs for 10, 110, 310, 315 s: the total is exact whichever part came from the cached watermark.
    assert seen == [20.0, 220.0, 620.0, 630.0]
    # Eight scrapes at once, the watermark due to move: it moves once, and each reads the same total.
    api.clock.t += 500
    with ThreadPoolExecutor(8) as pool:
        totals = set(pool.map(lambda _: _alice_gpu_seconds(api), range(8)))
    assert totals == {1630.0}


def _alice_gpu_seconds(api: Api) -> float:
    (total,) = [
        v
        for (name, labels), v in _samples(_scrape(api)).items()
        if name == "gpupool_tenant_gpu_seconds_total" and ("tenant", "alice") in labels
    ]
    return total


def test_promtool_check_metrics_passes_on_a_scrape(api: Api) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: install Debian's prometheus package (.ci/run does)"
    node = api.register("gpu-01", gpus=4, hcas=2)
    _heartbeat_with_samples(api, "gpu-01", node)
    api.client.post("/v1/jobs", json=JOB, headers=api.tenant("alice"))
    api.srv.loop.run_cycle()
    r = subprocess.run([promtool, "check", "metrics"], input=_scrape(api), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_dashboards_and_alerts_read_only_series_the_server_exposes(api: Api) -> None:
    """Every ``gpupool_`` name in deploy/grafana's queries and deploy/prometheus's alert rules is a sample name
    of a real scrape (``_bucket``, ``_total`` and all), after a beat with samples and a cycle."""
    exposed = {name for name, _ in _samples(_loaded(api))}
    deploy = Path(__file__).resolve().parents[3] / "deploy"
    queries = [
        t["expr"]
        for d in (deploy / "grafana").glob("*.json")
        for p in json.loads(d.read_text())["panels"]
        for t in p["targets"]
    ]
    rules = yaml.safe_load((deploy / "prometheus" / "alerts.yml").read_text())["groups"]
    queries += [r["expr"] for g in rules for r in g["rules"]]
    named = {n for q in queries for n in re.findall(r"\bgpupool_[a-z_]+", q)}
    assert len(named) > 25 and named <= exposed, sorted(named - exposed)


def test_a_replica_that_is_not_the_leader_reports_none_of_the_leaders_series(api: Api) -> None:
    leader_only = ("gpupool_jobs", "gpupool_queue_depth", "gpupool_quota_used_gpus", "gpupool_gpus_free")
    assert {name for name, _ in _samples(_loaded(api))} >= set(leader_only)
    api.srv.metrics.set_leader(False)  # what the loop's thread does on a cycle that finds the lease lost
    got = _samples(_scrape(api))
    assert not {name for name, _ in got} & set(leader_only)
    assert got[("gpupool_leader", frozenset())] == 0.0
    assert got[("gpupool_gpu_temperature_celsius", frozenset({"node": "gpu-01", "gpu": "0"}.items()))] == 60.0


def test_a_scrape_shows_the_last_cycle_however_many_ran_since_the_previous_scrape(api: Api) -> None:
    """The scheduling series are computed from the latest cycle's snapshot when scraped (not every cycle): the
    cycles between two scrapes leave no trace of their own, and a lease lost after a cycle shows none."""
    alice = api.tenant("alice")
    api.register("gpu-01", gpus=2)
    depth = ("gpupool_queue_depth", frozenset({"pool": "default", "priority": "normal"}.items()))
    for _ in range(3):  # jobs of 2 GPUs: the first is placed, the others wait
        api.client.post("/v1/jobs", json={**JOB, "gpus_per_task": 2}, headers=alice)
        api.srv.loop.run_cycle()
    assert _samples(_scrape(api))[depth] == 2.0
    api.client.post("/v1/jobs", json={**JOB, "gpus_per_task": 2}, headers=alice)
    api.srv.loop.run_cycle()
    assert _samples(_scrape(api))[depth] == 3.0
    api.client.post("/v1/jobs", json={**JOB, "gpus_per_task": 2}, headers=alice)
    api.srv.loop.run_cycle()  # offered to the next scrape...
    api.srv.metrics.set_leader(False)  # ...which comes after the lease was lost: nothing of it is shown
    assert depth not in _samples(_scrape(api))
