"""End to end, on the real server and emulated agents: ``gpupool acct`` has one record per run (a job retried
twice has three), and its rows' GPU-hours sum to ``gpupool usage`` of the same window, per tenant, model and
pool; ``gpupool acct statement`` prices that usage with the server's rate card."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from e2e_cluster import ADMIN, HOSTS, Cluster, running
from procs import until

AGENTS = HOSTS[:2]
RATES = """currency: EUR
default: 1.0
rates:
  - gpu_model: H100
    per_gpu_hour: 2.5
  - gpu_model: H100
    pool: research
    per_gpu_hour: 2.0
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("acct")
    (root / "rates.yaml").write_text(RATES)
    with running(root, AGENTS, GPUPOOL_RATE_CARD_PATH=str(root / "rates.yaml")) as c:
        yield c


def gpupool(c: Cluster, *args: str) -> str:
    env = {**os.environ, "GPUPOOL_SERVER": c.url, "GPUPOOL_TOKEN": ADMIN, "GPUPOOL_CONFIG": "/nonexistent"}
    r = subprocess.run([sys.executable, "-m", "gpupool", *args], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def test_acct_rows_sum_to_usage_and_a_statement_prices_them(cluster: Cluster) -> None:
    c = cluster
    t0 = float(int(time.time()))
    failing = c.submit("import time, sys; time.sleep(0.5); sys.exit(3)", tasks=1, gpus=2, retry={"count": 2})
    gang = c.submit("import time; time.sleep(1)", tasks=2, gpus=4, pool="research")
    running = c.submit("import time; time.sleep(300)", tasks=1, gpus=1)
    until(lambda: c.job(failing)["state"] == "failed" and c.job(gang)["state"] == "finished", 120, "both ended")
    until(lambda: c.job(running)["state"] == "running", 60, "the long job running")
    t1 = float(int(time.time()) + 1)  # a fixed end: the running job's open interval is clipped to it
    until(lambda: time.time() > t1, 5, "the window's end passed")

    rows = json.loads(gpupool(c, "acct", "-f", "json", "--since", iso(t0), "--until", iso(t1)))
    usage = json.loads(gpupool(c, "usage", "-f", "json", "--from", str(t0), "--to", str(t1)))["usage"]
    runs = [(r["job_id"], r["attempt"], r["state"]) for r in rows if r["job_id"] == failing]
    assert runs == [(failing, 1, "failed"), (failing, 2, "failed"), (failing, 3, "failed")]
    assert all(r["exit_code"] == 3 and r["gpus"] == 2 for r in rows if r["job_id"] == failing)
    (g,) = [r for r in rows if r["job_id"] == gang]
    assert g["gpus"] == 8 and g["pool"] == "research" and g["state"] == "finished" and g["elapsed_s"] > 0
    assert 1 <= len(g["hosts"]) == len(set(g["hosts"])) <= 2  # each host once
    summed: dict[tuple[str, str, str], float] = defaultdict(float)
    for r in rows:
        summed[(r["tenant"], r["gpu_model"], r["pool"])] += r["gpu_hours"] * 3600
    expected = {(u["tenant"], u["gpu_model"], u["pool"]): u["gpu_seconds"] for u in usage}
    assert summed.keys() == expected.keys()
    for k, v in expected.items():
        assert summed[k] == pytest.approx(v, rel=1e-9, abs=1e-6), k
    assert gpupool(c, "acct", "-f", "csv", "--since", iso(t0), "--until", iso(t1)).count("\n") == len(rows) + 1

    month = datetime.fromtimestamp(t0, UTC).strftime("%Y-%m")
    out = json.loads(gpupool(c, "acct", "statement", "--month", month, "-f", "json"))
    (acme,) = [t for t in out["tenants"] if t["tenant"] == "acme"]
    prices = {(ln["gpu_model"], ln["pool"]): ln["per_gpu_hour"] for ln in acme["lines"]}
    model = c.nodes()[AGENTS[0]]["gpu_model"]
    assert prices[(model, "research")] == (2.0 if model == "H100" else 1.0)
    assert out["currency"] == "EUR" and acme["unpriced"] is False
    assert acme["total"] == pytest.approx(sum(ln["cost"] for ln in acme["lines"]))
    assert "total" in gpupool(c, "acct", "statement", "--month", month)
