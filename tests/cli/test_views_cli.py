"""``gpupool jobs``, ``job``, ``nodes`` and ``pools`` against a real server (issue 17): active jobs by default,
newest first; filters, search, columns and ``--noheader``; ``--watch`` prints again until stopped; a job's
view has human times, its ranks and never ``None`` or an epoch float; nodes show GPUs allocated and free and
why a node is drained; pools show what they own and the calendar's share."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cli_server import ADMIN, cli_server, run, tenant_token

EPOCH_FLOAT = re.compile(r"\b1\d{9}\.\d")  # an epoch time printed raw


def register(url: str, host: str, gpus: int = 8) -> None:
    admin = {"Authorization": f"Bearer {ADMIN}"}
    join = httpx.post(f"{url}/v1/join-tokens", json={}, headers=admin).json()["token"]
    body = {
        "host": host,
        "cpu_millicores": 64_000,
        "memory_mib": 512_000,
        "gpus": [{"index": i, "model": "NVIDIA H100 80GB HBM3", "memory_mib": 81559} for i in range(gpus)],
        "hcas": [{"name": "mlx5_0", "rate_gbps": 400.0}],
    }
    r = httpx.post(f"{url}/v1/agents/register", json=body, headers={"Authorization": f"Bearer {join}"})
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    # Nodes without agents: placed jobs stay placed (nobody reports them lost within the test).
    with cli_server(tmp_path_factory.mktemp("srv"), node_lost_after_s=3600.0) as url:
        for h in ("gpu-01", "gpu-02"):
            register(url, h)
        yield url, tenant_token(url, "team-a")


def ok(url: str, token: str, *args: str) -> str:
    code, out, err = run(url, token, *args)
    assert code == 0, err
    return out


def submit(url: str, token: str, *args: str) -> str:
    return ok(url, token, "submit", *args, "--", "sleep", "600").split()[0]


def until(what: Any, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_jobs_lists_active_first_newest_first_with_filters_and_columns(server: tuple[str, str]) -> None:
    url, token = server
    old = submit(url, token, "--name", "Train-old", "--gpus", "8")
    new = submit(url, token, "--name", "eval-new", "--gpus", "4")
    # 8 GPUs on one host: never placed beside the two above (a placed job cancelled here would stay active,
    # its ranks releasing until an agent, which these nodes lack, confirmed them gone).
    gone = submit(url, token, "--name", "train-gone", "--gpus", "8")
    ok(url, token, "cancel", gone)
    until(lambda: json.loads(ok(url, token, "job", old, "-f", "json"))["state"] == "placed")
    lines = ok(url, token, "jobs", "-o", "id,state,name", "--noheader").splitlines()
    ids = [ln.split()[0] for ln in lines]
    assert ids.index(new) < ids.index(old) and gone not in ids  # active only, newest first
    every = ok(url, token, "jobs", "--all", "-o", "id", "--noheader").split()
    assert gone in every and every.index(gone) > every.index(old)  # the cancelled one after the active ones
    assert ok(url, token, "jobs", "--state", "cancelled", "-o", "id", "--noheader").split() == [gone]
    assert set(ok(url, token, "jobs", "--all", "-q", "TRAIN", "-o", "id", "--noheader").split()) == {old, gone}
    assert ok(url, token, "jobs", "--until", "2000-01-01", "-o", "id", "--noheader").strip() == ""
    assert new in ok(url, token, "jobs", "--since", "now-1h", "-o", "id")
    header = ok(url, token, "jobs", "-o", "id,gpus,position").splitlines()[0].split()
    assert header == ["id", "gpus", "position"]
    rows = json.loads(ok(url, token, "jobs", "--all", "-f", "json"))
    assert {r["id"] for r in rows} >= {old, new, gone}


def test_job_shows_human_times_ranks_and_no_none(server: tuple[str, str]) -> None:
    url, token = server
    job = submit(url, token, "--name", "shown", "--gpus", "2", "--tasks", "2", "--time-limit", "1h30m")
    until(lambda: json.loads(ok(url, token, "job", job, "-f", "json"))["state"] == "placed")
    out = ok(url, token, "job", job)
    assert "None" not in out and not EPOCH_FLOAT.search(out), out
    assert re.search(r"submitted\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d \(\d+s ago\)", out), out
    assert re.search(r"time limit\s+01:30:00", out) and re.search(r"gpus\s+4 \(2 task\(s\) x 2\)", out), out
    ranks = [ln.split() for ln in out.splitlines() if re.match(r"\s+\d+\s+gpu-0\d", ln)]
    assert len(ranks) == 2 and all(r[3] == "placed" for r in ranks), out
    assert "events:" in out and "job.placed" in out


def test_watch_prints_the_list_again_until_stopped(server: tuple[str, str]) -> None:
    url, token = server
    env = {**os.environ, "GPUPOOL_SERVER": url, "GPUPOOL_TOKEN": token, "GPUPOOL_CONFIG": "/nonexistent"}
    cmd = [sys.executable, "-m", "gpupool", "jobs", "-o", "id,state", "--watch", "0.2"]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) as proc:
        try:
            assert proc.stdout is not None
            frames, deadline = 0, time.monotonic() + 30
            while frames < 2:
                assert time.monotonic() < deadline, "no second frame"
                line = proc.stdout.readline()
                frames += line.strip() == "id     state" or line.startswith("id ")
        finally:
            proc.kill()


def test_nodes_show_allocated_free_and_why_drained(server: tuple[str, str]) -> None:
    url, token = server
    submit(url, token, "--name", "fill", "--gpus", "8")
    code, _, err = run(url, ADMIN, "drain", "gpu-02", "--reason", "fan failure, ticket 42")
    assert code == 0, err
    rows = json.loads(ok(url, token, "nodes", "-f", "json"))
    by = {n["name"]: n for n in rows}
    assert by["gpu-02"]["state"] == "drained" and by["gpu-02"]["state_reason"] == "fan failure, ticket 42"
    assert by["gpu-02"]["gpus_free"] == 0
    assert by["gpu-01"]["gpus_allocated"] + by["gpu-01"]["gpus_free"] == 8
    table = ok(url, token, "nodes")
    assert table.splitlines()[0].split()[:5] == ["node", "state", "gpus", "alloc", "free"]
    assert "fan failure, ticket 42" in table
    assert ok(url, token, "nodes", "--state", "drained", "--noheader").split()[0] == "gpu-02"
    assert run(url, ADMIN, "undrain", "gpu-02")[0] == 0


def test_pools_show_owned_used_and_the_calendars_share(server: tuple[str, str]) -> None:
    url, token = server
    calendar = (
        'timezone = "UTC"\ndefault_pool = "default"\n\n[[pool]]\nname = "inference"\nhosts = ["gpu-02"]\nshare = 1.0\n'
    )
    r = httpx.put(
        f"{url}/v1/pools/default", json={"calendar_toml": calendar}, headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert r.status_code == 200, r.text
    pools: dict[str, Any] = {}

    def cycled() -> bool:
        pools.update({p["pool"]: p for p in _csv(ok(url, token, "pools", "-f", "csv"))})
        return pools.get("inference", {}).get("gpus") == "8"

    until(cycled)
    assert pools["default"]["gpus"] == "8" and pools["inference"]["share"] == "100%"
    assert pools["default"]["calendar"] == "v1"


def _csv(text: str) -> list[dict[str, str]]:
    head, *rows = [ln.split(",") for ln in text.splitlines()]
    return [dict(zip(head, r, strict=True)) for r in rows]
