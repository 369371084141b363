"""``gpupool admin tenants|quotas|pools|calendars|apply`` as real processes against a real server: each change
is what the API then answers and what the audit log records (naming the admin), a delete the store refuses
(a tenant with jobs, a pool quotas name) is one line, exit 2, and leaves everything as it was."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cli_server import ADMIN, cli_server, run, tenant_token

from gpupool.store import Store

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("srv")


@pytest.fixture(scope="module")
def url(data: Path) -> Iterator[str]:
    with cli_server(data) as u:
        yield u


def api(url: str, path: str) -> object:
    r = httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def ok(url: str, *args: str) -> str:
    code, out, err = run(url, ADMIN, "admin", *args)
    assert code == 0, err
    return out


def refused(url: str, *args: str, names: str) -> None:
    code, _, err = run(url, ADMIN, "admin", *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and names in lines[0], err


def test_tenants_create_list_update_delete(url: str) -> None:
    assert ok(url, "tenants", "create", "t-alpha", "--weight", "2").strip() == "tenant t-alpha created (weight 2)"
    assert ok(url, "tenants", "update", "t-alpha", "--weight", "3.5").strip() == "tenant t-alpha: weight 3.5"
    listed = json.loads(ok(url, "tenants", "list", "--format", "json"))
    assert {"name": "t-alpha", "weight": 3.5} in listed
    refused(url, "tenants", "create", "t-alpha", names="already exists")
    ok(url, "quotas", "set", "t-alpha", "--pool", "p-any", "--nominal", "4")
    token = ok(url, "tokens", "create", "--tenant", "t-alpha").strip()
    assert ok(url, "tenants", "delete", "t-alpha").strip() == "tenant t-alpha deleted"
    assert "t-alpha" not in ok(url, "tenants", "list")
    assert api(url, "/v1/tenants/t-alpha/quotas") == {"quotas": []}  # its quotas went with it
    code, _, err = run(url, token, "jobs")  # and so did its token
    assert code == 2 and "refused the token" in err
    refused(url, "tenants", "update", "t-alpha", "--weight", "1", names="t-alpha")


def test_a_tenant_with_jobs_is_not_deleted(url: str) -> None:
    token = tenant_token(url, "t-busy")
    code, _, err = run(url, token, "submit", "--gpus", "1", "--", "/bin/true")
    assert code == 0, err
    refused(url, "tenants", "delete", "t-busy", names="has jobs")
    assert "t-busy" in ok(url, "tenants", "list")
    assert run(url, token, "jobs")[0] == 0  # its token still works


def test_quotas_set_list_delete_with_borrowing(url: str) -> None:
    ok(url, "tenants", "create", "t-q")
    out = ok(url, "quotas", "set", "t-q", "--pool", "train", "--gpu-model", "H100", "--nominal", "16",
             "--cohort", "lab", "--borrowing-limit", "8", "--lending-limit", "4")  # fmt: skip
    assert out.strip() == "quota t-q/train/H100: 16 GPUs, borrow 8, lend 4, cohort lab"
    ok(url, "quotas", "set", "t-q", "--pool", "train", "--nominal", "2")
    (row,) = [ln for ln in ok(url, "quotas", "list", "--tenant", "t-q").splitlines() if "H100" in ln]
    assert row.split() == ["t-q", "train", "H100", "16", "8", "4", "lab"]
    every = json.loads(ok(url, "quotas", "list", "--format", "json"))
    assert {(q["tenant"], q["pool"], q["gpu_model"]) for q in every} >= {("t-q", "train", "H100"), ("t-q", "train", "")}
    assert ok(url, "quotas", "delete", "t-q", "--pool", "train", "--gpu-model", "H100").strip() == (
        "quota t-q/train/H100 deleted"
    )
    assert [q["gpu_model"] for q in api(url, "/v1/tenants/t-q/quotas")["quotas"]] == [""]  # type: ignore[index]
    refused(url, "quotas", "delete", "t-q", "--pool", "train", "--gpu-model", "H100", names="no quota")


def test_pools_and_calendars(url: str, tmp_path: Path) -> None:
    assert ok(url, "pools", "set", "p-train").strip() == "pool p-train set (version 1)"
    refused(url, "calendars", "set", "p-nope", str(EXAMPLES / "calendar.toml"), names="p-nope")
    assert ok(url, "calendars", "set", "p-train", str(EXAMPLES / "calendar.toml")).strip() == (
        "pool p-train calendar set (version 2)"
    )
    assert ok(url, "calendars", "show", "p-train") == (EXAMPLES / "calendar.toml").read_text()
    # 2026-12-07 is a Monday: at 10:00 in Shanghai inference holds 3/4 of SU 1 since 08:00, until 22:00.
    now = json.loads(ok(url, "calendars", "now", "p-train", "--at", "2026-12-07T10:00+08:00", "--format", "json"))
    inference = next(r for r in now["rules"] if r["pool"] == "inference")
    assert (inference["share_now"], inference["since_s"]) == (0.75, 1796601600.0)  # 08:00 +08:00
    assert now["next_change_s"] == 1796608800.0 + 9 * 3600  # 19:00: interactive's window closes first
    table = ok(url, "calendars", "now", "p-train", "--at", "2026-12-07T23:00+08:00")
    assert "next change 2026-12-08 08:00 CST" in table.splitlines()[0]
    listed = ok(url, "pools", "list").splitlines()
    assert [ln.split() for ln in listed if ln.startswith("p-train")] == [
        ["p-train", "2", "Asia/Shanghai", "training", "2"]
    ]
    assert ok(url, "calendars", "clear", "p-train").strip() == "pool p-train calendar cleared (version 3)"
    assert ok(url, "calendars", "show", "p-train").strip() == ""
    ok(url, "tenants", "create", "t-p")
    ok(url, "quotas", "set", "t-p", "--pool", "p-train", "--nominal", "1")
    refused(url, "pools", "delete", "p-train", names="has quotas")
    ok(url, "quotas", "delete", "t-p", "--pool", "p-train")
    assert ok(url, "pools", "delete", "p-train").strip() == "pool p-train deleted"
    assert "p-train" not in ok(url, "pools", "list")


def test_a_bad_calendar_is_refused_with_its_line_and_nothing_changes(url: str, tmp_path: Path) -> None:
    ok(url, "pools", "set", "p-cal")
    bad = tmp_path / "bad.toml"
    bad.write_text('timezone = "UTC"\n[[pool]]\nname = "x"\nsus = [1]\nshare = 1.5\n')
    refused(url, "calendars", "set", "p-cal", str(bad), names="bad.toml:5")
    refused(url, "calendars", "check", str(bad), names="share must be a number from 0 to 1")
    refused(url, "pools", "set", "p-cal", "--calendar", str(bad), names="bad.toml:5")
    (p,) = [p for p in api(url, "/v1/pools")["pools"] if p["name"] == "p-cal"]  # type: ignore[index]
    assert (p["version"], p["calendar_toml"]) == (1, "")


def test_every_change_is_audited_naming_the_admin(url: str, data: Path) -> None:
    """One audit event per change, in order, each naming the admin token (read from the server's own database)."""
    store = Store(f"sqlite:///{data / 'gpupool.db'}")
    start = max((e.id for e in store.list_audit(limit=100_000)), default=0)
    ok(url, "tenants", "create", "t-audit")
    ok(url, "tenants", "update", "t-audit", "--weight", "2")
    ok(url, "quotas", "set", "t-audit", "--pool", "p-audit", "--nominal", "1")
    ok(url, "quotas", "delete", "t-audit", "--pool", "p-audit")
    ok(url, "pools", "set", "p-audit")
    ok(url, "pools", "delete", "p-audit")
    ok(url, "tenants", "delete", "t-audit")
    events = store.list_audit(after_id=start, limit=100)
    assert [(e.action, e.subject) for e in events] == [
        ("tenant.created", "tenant/t-audit"),
        ("tenant.weight", "tenant/t-audit"),
        ("quota.set", "tenant/t-audit"),
        ("quota.deleted", "tenant/t-audit"),
        ("pool.put", "pool/p-audit"),
        ("pool.deleted", "pool/p-audit"),
        ("tenant.deleted", "tenant/t-audit"),
    ]
    assert {e.actor.split(":")[0] for e in events} == {"admin"}
