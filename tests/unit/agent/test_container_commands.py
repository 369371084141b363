"""The container command lines (agent/containers.py) and the rules a job's container must pass (domain)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.agent.cgroups import Limits
from gpupool.agent.containers import (
    ENV_FILE,
    ContainerRuntime,
    NodeDevices,
    Rank,
    RuntimeKind,
    build,
    find_runtime,
    probe_devices,
)
from gpupool.agent.identity import RunAs
from gpupool.domain.containers import Container, Mount, check_container, container_from_json, container_to_json
from gpupool.domain.errors import InputError

PODMAN = ContainerRuntime(RuntimeKind.PODMAN, "/usr/bin/podman", {"PATH": "/usr/bin"})
APPTAINER = ContainerRuntime(RuntimeKind.APPTAINER, "/usr/bin/apptainer", {"PATH": "/usr/bin"})
ENROOT = ContainerRuntime(RuntimeKind.ENROOT, "/usr/bin/enroot", {"PATH": "/usr/bin"})
USER = RunAs("gp-acme", 2001, 2001, (2001, 44))
ENV = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_3:1"}
GPUS = (("GPU-aaaa", 0), ("GPU-bbbb", 3))
ALL_DEVICES = frozenset(
    {
        *("/dev/nvidia0", "/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"),
        *("/dev/nvidia-modeset", "/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"),
    }
)


def rank(container: Container | None = None, **kw: object) -> Rank:
    args: dict[str, object] = {
        "assignment_id": "j-1.1.0",
        "container": container or Container("registry.local/train:1.2", (Mount("/data", "/data", True),)),
        "env": ENV,
        "gpus": GPUS,
        "workdir": "/var/lib/gpupool/agent-work/j-1.1.0",
        "state_dir": "/var/lib/gpupool/agent/workloads/j-1.1.0",
        "run_as": USER,
    }
    args.update(kw)
    return Rank(**args)  # type: ignore[arg-type]


def pairs(argv: tuple[str, ...], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_podman_runs_the_rank_as_its_user_on_the_host_network_with_its_mounts_and_gpus_by_cdi() -> None:
    out = build(PODMAN, rank(), NodeDevices(True, frozenset()), ["python", "train.py"])
    argv = out.argv
    assert argv[:3] == ("/usr/bin/podman", "run", "--rm")
    assert argv[-3:] == ("registry.local/train:1.2", "python", "train.py")
    assert pairs(argv, "--name") == ["gpupool-j-1.1.0"] and "--init" in argv
    assert pairs(argv, "--network") == ["host"]
    assert pairs(argv, "--user") == ["2001:2001"] and pairs(argv, "--group-add") == ["44"]
    assert pairs(argv, "--security-opt") == ["no-new-privileges"]
    work = "/var/lib/gpupool/agent-work/j-1.1.0"
    assert pairs(argv, "--volume") == [f"{work}:{work}", "/data:/data:ro"]
    assert pairs(argv, "--workdir") == [work]
    assert pairs(argv, "--device") == ["nvidia.com/gpu=GPU-aaaa", "nvidia.com/gpu=GPU-bbbb"]
    # The variables go in a file of the agent's, never on a command line anyone may read.
    assert pairs(argv, "--env-file") == [f"/var/lib/gpupool/agent/workloads/j-1.1.0/{ENV_FILE}"]
    assert "10.0.0.1" not in " ".join(argv)
    assert out.env_file.splitlines() == [f"{k}={v}" for k, v in sorted(ENV.items())]
    assert out.env == {"PATH": "/usr/bin"}  # the runtime's own environment: none of the job's variables
    assert out.hold.runtime_as_root
    assert out.hold.teardown == ("/usr/bin/podman", "rm", "--force", "--ignore", "--time", "0", "gpupool-j-1.1.0")
    assert out.notes == ()


def test_podman_without_cdi_passes_the_device_nodes_that_exist_and_says_which_do_not() -> None:
    out = build(PODMAN, rank(), NodeDevices(False, ALL_DEVICES), ["true"])
    devices = pairs(out.argv, "--device")
    assert devices[:2] == ["/dev/nvidia0", "/dev/nvidia3"]
    assert {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"} <= set(devices)
    assert "/dev/nvidia1" not in devices and out.notes == ()
    emulated = build(PODMAN, rank(), NodeDevices(False, frozenset()), ["true"])
    assert pairs(emulated.argv, "--device") == []
    (note,) = emulated.notes
    assert "/dev/nvidia0" in note and "/dev/nvidiactl" in note and "not passed" in note


def test_podman_takes_the_ranks_limits_and_a_custom_workdir() -> None:
    limits = Limits(cpu_millicores=2500, memory_mib=4096, pids_max=512)
    c = Container("img", (), "/workspace")
    argv = build(PODMAN, rank(c, limits=limits), NodeDevices(True, frozenset()), ["true"]).argv
    assert pairs(argv, "--cpus") == ["2.5"] and pairs(argv, "--memory") == ["4096m"]
    assert pairs(argv, "--pids-limit") == ["512"] and pairs(argv, "--workdir") == ["/workspace"]


def test_podman_without_a_mapped_user_runs_rootless_as_the_agent_or_as_the_image_says() -> None:
    rootless = build(PODMAN, rank(run_as=None, agent_uid=1000), NodeDevices(True, frozenset()), ["true"]).argv
    assert pairs(rootless, "--userns") == ["keep-id"] and "--user" not in rootless
    rootful = build(PODMAN, rank(run_as=None, agent_uid=0), NodeDevices(True, frozenset()), ["true"]).argv
    assert "--user" not in rootful and "--userns" not in rootful


def test_apptainer_binds_and_passes_variables_through_its_environment() -> None:
    out = build(APPTAINER, rank(), NodeDevices(False, ALL_DEVICES), ["python", "train.py"])
    argv = out.argv
    assert argv[:4] == ("/usr/bin/apptainer", "exec", "--cleanenv", "--contain") and "--nv" in argv
    work = "/var/lib/gpupool/agent-work/j-1.1.0"
    assert pairs(argv, "--bind") == [f"{work}:{work}", "/data:/data:ro", "/dev/infiniband"]
    assert pairs(argv, "--pwd") == [work]
    assert argv[-3:] == ("registry.local/train:1.2", "python", "train.py")
    assert out.env["APPTAINERENV_RANK"] == "1" and out.env["PATH"] == "/usr/bin"
    assert "10.0.0.1" not in " ".join(argv)
    assert not out.hold.runtime_as_root and out.hold.teardown == ()  # the launcher makes it the job's user


def test_enroot_mounts_exports_by_name_and_refuses_a_workdir() -> None:
    out = build(ENROOT, rank(), NodeDevices(False, frozenset()), ["python"])
    argv = out.argv
    assert argv[:3] == ("/usr/bin/enroot", "start", "--rw")
    assert "/data:/data:none:x-create=auto,rbind,ro" in pairs(argv, "--mount")
    assert set(pairs(argv, "--env")) == {*ENV, "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"}
    assert out.env["NVIDIA_VISIBLE_DEVICES"] == "GPU-aaaa,GPU-bbbb" and out.env["RANK"] == "1"
    assert argv[-2:] == ("registry.local/train:1.2", "python")
    with pytest.raises(InputError, match="working-directory") as e:
        build(ENROOT, rank(Container("img.sqsh", (), "/w")), NodeDevices(False, frozenset()), ["true"])
    assert e.value.source == "workdir"


@pytest.mark.parametrize(
    ("container", "env", "field"),
    [
        (Container("-v"), {}, "image"),
        (Container("has space"), {}, "image"),
        (Container("img", (Mount("data", "/data"),)), {}, "mounts[0].source"),
        (Container("img", (Mount("/data", "/a:b"),)), {}, "mounts[0].target"),
        (Container("img", (Mount("/d,x", "/d"),)), {}, "mounts[0].source"),
        (Container("img", (Mount("/data/../etc", "/d"),)), {}, "mounts[0].source"),
        (Container("img", (Mount("/data", "/"),)), {}, "mounts[0].target"),
        (Container("img", (Mount("/a", "/d"), Mount("/b", "/d/"))), {}, "mounts[1].target"),
        (Container("img", (), "work"), {}, "workdir"),
        (Container("img"), {"NOTE": "two\nlines"}, "env.NOTE"),
    ],
)
def test_a_container_that_no_runtime_can_take_as_given_is_refused_naming_the_field(
    container: Container, env: dict[str, str], field: str
) -> None:
    with pytest.raises(InputError) as e:
        check_container(container, env)
    assert e.value.source == field
    with pytest.raises(InputError):  # the agent checks again before it builds anything
        build(PODMAN, rank(container, env=env), NodeDevices(True, frozenset()), ["true"])


def test_the_stored_form_round_trips_and_a_bad_one_names_where() -> None:
    c = Container("docker.io/library/busybox:1.36", (Mount("/data", "/data", True),), "/w")
    assert container_from_json(container_to_json(c), "x") == c
    with pytest.raises(InputError) as e:
        container_from_json({"mounts": []}, "launch of job j-1")
    assert e.value.source == "launch of job j-1"


def test_the_runtime_is_found_on_path_or_named_and_a_missing_one_is_refused() -> None:
    on_path = {"apptainer": "/opt/bin/apptainer", "enroot": "/usr/bin/enroot"}

    def which(name: str, path: str | None) -> str | None:
        return on_path.get(name)

    env = {"PATH": "/opt/bin:/usr/bin", "CONTAINERS_CONF": "/etc/c.conf", "LD_PRELOAD": "x.so"}
    auto = find_runtime("auto", env, which)
    assert auto == ContainerRuntime(RuntimeKind.APPTAINER, "/opt/bin/apptainer", {k: env[k] for k in list(env)[:2]})
    assert find_runtime("enroot", env, which) is not None and find_runtime("none", env, which) is None
    with pytest.raises(InputError, match="not on PATH") as e:
        find_runtime("podman", env, which)
    assert e.value.source == "--container-runtime"
    with pytest.raises(InputError, match="auto, podman"):
        find_runtime("docker", env, which)
    assert find_runtime("auto", env, lambda n, p: None) is None


def test_devices_are_probed_from_the_dev_dir_and_cdi_specs(tmp_path: Path) -> None:
    dev, cdi = tmp_path / "dev", tmp_path / "cdi"
    (dev / "infiniband").mkdir(parents=True)
    cdi.mkdir()
    for name in ("nvidia0", "nvidiactl", "infiniband/uverbs0"):
        (dev / name).touch()
    node = probe_devices(dev, (tmp_path / "nvidia.yaml", cdi))
    assert not node.cdi
    assert node.present == {str(dev / n) for n in ("nvidia0", "nvidiactl", "infiniband/uverbs0")}
    (cdi / "nvidia.yaml").write_text("cdiVersion: 0.5.0\n")
    assert probe_devices(dev, (tmp_path / "nvidia.yaml", cdi)).cdi
