"""The pure parts of node isolation: tenant -> user names, cgroup paths and records, the systemd-run line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.agent.cgroups import (
    Device,
    Limits,
    V1Group,
    V2Group,
    cgroup_from_record,
    own_cgroups,
    systemd_run_argv,
)
from gpupool.agent.identity import USER_NAME, UserMap, load_user_map
from gpupool.domain.errors import InputError


def test_tenants_map_to_distinct_valid_user_names() -> None:
    m = UserMap({"Vision": "svc-vision"})
    assert m.name_for("Vision") == "svc-vision"  # the admin's map wins
    assert m.name_for("acme") == "gpupool-acme"
    assert m.name_for("a-b-1") == "gpupool-a-b-1"
    # Not a user name as it stands (capitals, dots, '_', too long): a hash, which never collides with a plain
    # name because a plain one has no '_' after the prefix.
    odd = ["Acme", "acme.io", "a_b", "x" * 30, "gpupool_"]
    names = [m.name_for(t) for t in odd]
    assert all(n.startswith("gpupool_") and len(n) == 32 and USER_NAME.fullmatch(n) for n in names)
    assert len(set(names)) == len(odd)
    assert m.name_for("Acme") == UserMap().name_for("Acme")  # stable: the same on every node
    assert UserMap(prefix="gp").name_for("acme") == "gpacme"


def test_a_prefix_that_cannot_start_a_user_name_is_refused() -> None:
    for bad in ("", "-", "Gp-", "g" * 20):
        with pytest.raises(InputError):
            UserMap(prefix=bad)


def test_the_user_map_file(tmp_path: Path) -> None:
    f = tmp_path / "users.toml"
    f.write_text('acme = "svc-acme"\n"Big.Co" = "bigco"\n')
    assert load_user_map(f) == {"acme": "svc-acme", "Big.Co": "bigco"}
    f.write_text('acme = "root:x"\n')
    with pytest.raises(InputError, match="not a Unix user name"):
        load_user_map(f)
    f.write_text("acme = \n")
    with pytest.raises(InputError, match="not TOML"):
        load_user_map(f)


def test_no_tenant_or_root_is_refused() -> None:
    with pytest.raises(InputError, match="names no tenant"):
        UserMap().resolve("")
    with pytest.raises(InputError, match="root"):
        UserMap({"ops": "root"}).resolve("ops")


def test_own_cgroups_reads_v1_controllers_and_the_v2_path() -> None:
    text = "9:name=systemd:/\n4:memory:/process_api/x\n1:cpu,cpuacct:/a\n0::/system.slice/gpupool-agent.service\n"
    v1, v2 = own_cgroups(text)
    assert v1 == {"name=systemd": "/", "memory": "/process_api/x", "cpu": "/a", "cpuacct": "/a"}
    assert v2 == "/system.slice/gpupool-agent.service"


def test_a_cgroup_record_brings_the_same_cgroup_back() -> None:
    g1 = V1Group({"memory": Path("/sys/fs/cgroup/memory/p/a1"), "pids": Path("/sys/fs/cgroup/pids/p/a1")})
    assert cgroup_from_record(g1.record()) == g1
    g2 = V2Group(Path("/sys/fs/cgroup/gpupool.slice/gpupool-a1.scope"), kind="systemd")
    assert cgroup_from_record(g2.record()) == g2
    with pytest.raises(InputError):
        cgroup_from_record({"kind": "v3"})


def test_device_rules() -> None:
    assert Device("c", 195, 3).rule() == "c 195:3 rw"
    assert Device("c", 136, None).rule() == "c 136:* rw"


def test_systemd_scope_command_line() -> None:
    limits = Limits(1500, 64, 100, (Device("c", 195, 0, "/dev/nvidia0"), Device("c", 195, 255, "/dev/nvidiactl")))
    assert systemd_run_argv("systemd-run", "gpupool-a1.scope", "gpupool.slice", limits) == [
        "systemd-run", "--scope", "--quiet", "--collect", "--unit=gpupool-a1.scope", "--slice=gpupool.slice",
        "-p", "MemoryMax=67108864", "-p", "MemorySwapMax=0", "-p", "CPUQuota=150%", "-p", "TasksMax=100",
        "-p", "DevicePolicy=closed", "-p", "DeviceAllow=/dev/nvidia0 rw", "-p", "DeviceAllow=/dev/nvidiactl rw",
        "--",
    ]  # fmt: skip
    bare = systemd_run_argv("systemd-run", "u.scope", "s.slice", Limits())
    assert bare == ["systemd-run", "--scope", "--quiet", "--collect", "--unit=u.scope", "--slice=s.slice", "--"]
