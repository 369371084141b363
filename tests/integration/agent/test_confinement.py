"""Workloads confined for real: their own Unix user, private working directory and cgroup (v1 here; v2's
kill-the-tree on the cgroup2 mount beside it), a device rule, a memory limit, stop reaching every process.

Real child processes, real cgroups, real users (made for the test and deleted after). The GPU device nodes
are stand-ins made with mknod on this GPU-less machine: "nvidia0" is /dev/fuse's 10:229, "nvidia1" /dev/net/
tun's 10:200 and "nvidiactl" /dev/kmsg's 1:11, devices an unprivileged process may open, so a refusal can
only be the device rule. Waits poll a condition with a deadline.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpupool.agent.cgroups import CgroupV1, CgroupV2, Limits
from gpupool.agent.identity import RunAs
from gpupool.agent.isolation import Isolation
from gpupool.agent.runtime import Confinement, WorkloadHandle, WorkloadRuntime, WorkloadState, process_start_ticks
from isolation_support import (
    V2_MOUNT,
    mknod,
    needs_v1,
    needs_v2,
    open_dir,
    python_for_others,
    remove_cgroups,
    throwaway_users,
)
from procs import until as poll_until

PATH = {"PATH": "/usr/bin:/bin"}


def until(cond: Callable[[], object], timeout_s: float = 10.0, what: str = "condition") -> None:
    poll_until(cond, timeout_s, what, every_s=0.01)


def gone(pid: int) -> bool:
    st = process_start_ticks(pid)
    return st is None or st[1] == "Z"


def out_json(h: WorkloadHandle) -> dict[str, object]:
    until(lambda: h.stdout_path.read_text().endswith("\n"), what="the job's report")
    return dict(json.loads(h.stdout_path.read_text().splitlines()[0]))


@pytest.fixture(scope="module")
def users() -> Iterator[list[RunAs]]:
    if os.geteuid() != 0:
        pytest.skip("switching users needs the tests to run as root")
    with throwaway_users(2) as made:
        yield made


@pytest.fixture
def place() -> Iterator[Path]:
    with open_dir() as d:
        yield d


@pytest.fixture
def v1() -> Iterator[CgroupV1]:
    parent = f"gpupool-test-{secrets.token_hex(4)}"
    try:
        yield CgroupV1(parent=parent)
    finally:
        remove_cgroups(parent)


def hold(user: RunAs, place: Path, limits: Limits | None = None) -> Confinement:
    return Confinement(user, place / "work", limits or Limits(devices=()), umask=0o077, no_new_privs=True)


REPORT = """
import json, os, stat
st = os.stat('.')
status = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)
print(json.dumps({
    'uid': os.getuid(), 'euid': os.geteuid(), 'gid': os.getgid(), 'groups': os.getgroups(),
    'cwd': os.getcwd(), 'cwd_mode': stat.S_IMODE(st.st_mode), 'cwd_owner': st.st_uid,
    'umask': os.umask(0), 'no_new_privs': status['NoNewPrivs'].strip(),
    'cgroups': open('/proc/self/cgroup').read(), 'env': dict(os.environ),
}), flush=True)
"""


@needs_v1
def test_a_job_runs_as_its_user_in_a_private_directory_and_its_own_cgroup(
    users: list[RunAs], place: Path, v1: CgroupV1
) -> None:
    rt = WorkloadRuntime(place / "state", cgroups=v1)
    user = users[0]
    h = rt.launch("a1", [python_for_others(), "-c", REPORT], {**PATH, "X": "1"}, confine=hold(user, place))
    got = out_json(h)
    assert (got["uid"], got["euid"], got["gid"], got["groups"]) == (user.uid, user.uid, user.gid, [])
    assert got["cwd"] == str(place / "work" / "a1") and got["cwd_owner"] == user.uid and got["cwd_mode"] == 0o700
    assert got["umask"] == 0o077 and got["no_new_privs"] == "1"
    assert got["env"] == {**PATH, "X": "1"} or got["env"] == {**PATH, "X": "1", "LC_CTYPE": "C.UTF-8"}
    lines = dict(line.split(":", 2)[1:] for line in str(got["cgroups"]).splitlines())
    for c in ("memory", "pids", "devices", "freezer"):
        assert lines[c].endswith("/a1"), lines  # in its own cgroup of every hierarchy
    # The agent's side stays the agent's: its records and the logs are root's, mode 0700.
    assert stat.S_IMODE((place / "state").stat().st_mode) == 0o700
    assert stat.S_IMODE((place / "state" / "a1").stat().st_mode) == 0o700
    assert stat.S_IMODE((place / "work").stat().st_mode) == 0o711  # enter your own, list nobody's
    until(lambda: rt.poll()["a1"].state is WorkloadState.EXITED)
    # Over: its cgroup and its scratch directory are gone.
    until(lambda: not (place / "work" / "a1").exists(), what="working directory removed")
    assert not any((d / "a1").exists() for d in v1.parents.values())


@needs_v1
def test_the_tenants_env_never_reaches_the_root_launcher(users: list[RunAs], place: Path, v1: CgroupV1) -> None:
    """LD_PRELOAD is the tenant's to set for its own program; the launcher, still root when it starts, gets a
    clean environment, so the loader complains once (for the workload), not twice."""
    rt = WorkloadRuntime(place / "state", cgroups=v1)
    env = {**PATH, "LD_PRELOAD": "/nonexistent/evil.so"}
    h = rt.launch("pre", [python_for_others(), "-c", "print('ran')"], env, confine=hold(users[0], place))
    until(lambda: rt.poll()["pre"].state is WorkloadState.EXITED)
    assert h.stdout_path.read_text() == "ran\n"
    assert h.stderr_path.read_text().count("evil.so") == 1


@needs_v1
def test_a_job_opens_only_its_own_gpu_device(users: list[RunAs], place: Path, v1: CgroupV1) -> None:
    dev = place / "dev"
    dev.mkdir()
    dev.chmod(0o755)
    mknod(dev / "nvidia0", 10, 229)
    mknod(dev / "nvidia1", 10, 200)
    mknod(dev / "nvidiactl", 1, 11)
    probe = (
        "import json, os, sys\n"
        "out = {}\n"
        "for p in sys.argv[1:]:\n"
        "    try:\n"
        "        os.close(os.open(p, os.O_WRONLY)); out[p] = 'ok'\n"
        "    except OSError as e:\n"
        "        out[p] = e.strerror\n"
        "print(json.dumps(out), flush=True)\n"
    )
    nodes = [str(dev / n) for n in ("nvidia0", "nvidia1", "nvidiactl")]
    devices = Isolation(dev_dir=dev).devices([0])  # the job was given GPU 0 (minor number 0)
    assert [d.path for d in devices] == [nodes[0], nodes[2]]
    user = users[0]
    h = rt_launch(
        place, v1, "dev", [python_for_others(), "-c", probe, *nodes], hold(user, place, Limits(devices=devices))
    )
    assert out_json(h) == {nodes[0]: "ok", nodes[1]: "Operation not permitted", nodes[2]: "ok"}
    # The same user outside the job's cgroup opens GPU 1's node: only the device rule refused it.
    done = subprocess.run(
        ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", python_for_others(), "-c", probe, nodes[1]],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(done.stdout) == {nodes[1]: "ok"}


def rt_launch(place: Path, cg: CgroupV1, aid: str, argv: list[str], confine: Confinement) -> WorkloadHandle:
    return WorkloadRuntime(place / "state", cgroups=cg).launch(aid, argv, PATH, confine=confine)


HOG = (
    "import time\nprint('ready', flush=True)\nx = bytearray(400 << 20)\nprint('survived', flush=True)\ntime.sleep(60)\n"
)


@needs_v1
def test_going_over_the_memory_limit_kills_only_that_job(users: list[RunAs], place: Path, v1: CgroupV1) -> None:
    rt = WorkloadRuntime(place / "state", cgroups=v1)
    py = python_for_others()
    calm = rt.launch("calm", [py, "-c", "import time; print('ready', flush=True); time.sleep(60)"], PATH,
                     confine=hold(users[1], place, Limits(memory_mib=64, devices=())))  # fmt: skip
    rt.launch("hog", [py, "-c", HOG], PATH, confine=hold(users[0], place, Limits(memory_mib=64, devices=())))
    until(lambda: rt.poll()["hog"].state is WorkloadState.EXITED, 20, "the hog killed")
    st = rt.poll()["hog"]
    assert st.exit_code == -signal.SIGKILL and st.reason == "killed by the kernel: over its memory limit of 64 MiB"
    until(lambda: "ready" in calm.stdout_path.read_text())
    assert rt.poll()["calm"].state is WorkloadState.RUNNING  # the neighbour, under the same limit, lives on
    assert rt.stop("calm", 1.0).exit_code == -signal.SIGTERM


# A leader whose child leaves the session (setsid) and whose grandchild is orphaned (double fork): neither is
# in the leader's process group any more; both ignore SIGTERM.
ESCAPE = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
a = subprocess.Popen([sys.executable, '-c', code], start_new_session=True)
r, w = os.pipe()
if os.fork() == 0:
    b = subprocess.Popen([sys.executable, '-c', code], start_new_session=True)
    os.write(w, str(b.pid).encode()); os._exit(0)
os.wait()
print(a.pid, os.read(r, 32).decode(), flush=True)
"""
ESCAPER = ESCAPE + "time.sleep(120)\n"  # ... and stays


def escaped(h: WorkloadHandle) -> list[int]:
    until(lambda: h.stdout_path.read_text().endswith("\n"), what="the escapers' pids")
    pids = [int(p) for p in h.stdout_path.read_text().split()]
    assert all(os.getpgid(p) != h.pid for p in pids)  # out of the job's process group
    return pids


@needs_v1
def test_stop_kills_every_process_the_job_forked_even_one_that_called_setsid(
    users: list[RunAs], place: Path, v1: CgroupV1
) -> None:
    rt = WorkloadRuntime(place / "state", cgroups=v1)
    h = rt.launch("esc", [python_for_others(), "-c", ESCAPER], PATH, confine=hold(users[0], place))
    pids = escaped(h)
    st = rt.stop("esc", grace_s=0.3)
    assert (st.state, st.exit_code) == (WorkloadState.EXITED, -signal.SIGKILL)
    until(lambda: all(gone(p) for p in pids), 5, "every escaper killed")
    assert h.cgroup is not None and h.cgroup.pids() == set()


@needs_v1
def test_an_agent_restarted_meanwhile_still_kills_the_whole_tree(users: list[RunAs], place: Path, v1: CgroupV1) -> None:
    """The agent died and came back: the new runtime is not the job's parent, but the job's cgroup, named in
    its launch record, still says who belongs to it."""
    old = WorkloadRuntime(place / "state", cgroups=v1)
    h = old.launch("esc", [python_for_others(), "-c", ESCAPER], PATH, confine=hold(users[0], place))
    pids = escaped(h)
    new = WorkloadRuntime(place / "state", cgroups=v1)
    assert new.poll()["esc"].state is WorkloadState.RUNNING
    new.stop("esc", grace_s=0.3)
    until(lambda: all(gone(p) for p in [h.pid, *pids]), 5, "every process killed")
    old.poll()  # reap the old parent's zombie


@needs_v1
def test_a_leader_that_exits_takes_what_it_left_running_with_it(users: list[RunAs], place: Path, v1: CgroupV1) -> None:
    rt = WorkloadRuntime(place / "state", cgroups=v1)
    h = rt.launch("left", [python_for_others(), "-c", ESCAPE], PATH, confine=hold(users[0], place))
    pids = escaped(h)
    until(lambda: rt.poll()["left"].state is WorkloadState.EXITED)
    assert rt.poll()["left"].exit_code == 0
    until(lambda: all(gone(p) for p in pids), 5, "what it left behind killed")


@needs_v1
def test_a_job_that_cannot_start_leaves_nothing_behind(users: list[RunAs], place: Path, v1: CgroupV1) -> None:
    rt = WorkloadRuntime(place / "state", cgroups=v1)
    with pytest.raises(FileNotFoundError, match="No such file or directory"):
        rt.launch("nope", ["/no/such/program"], PATH, confine=hold(users[0], place))
    assert not (place / "work" / "nope").exists()
    assert not any((d / "nope").exists() for d in v1.parents.values())


@needs_v2
def test_cgroup_v2_kills_the_tree_through_its_own_cgroup(users: list[RunAs], place: Path) -> None:
    """On the cgroup2 mount of this machine (no controller is attached to it here: limits are v1's; the
    tree, its membership and cgroup.kill are v2's own)."""
    assert V2_MOUNT is not None
    parent = f"gpupool-test-{secrets.token_hex(4)}"
    try:
        cg = CgroupV2(V2_MOUNT, parent)
        rt = WorkloadRuntime(place / "state", cgroups=cg)
        h = rt.launch("esc", [python_for_others(), "-c", ESCAPER], PATH, confine=hold(users[0], place))
        pids = escaped(h)
        assert h.cgroup is not None and h.cgroup.pids() == {h.pid, *pids}
        rt.stop("esc", grace_s=0.2)
        until(lambda: all(gone(p) for p in pids), 5, "every escaper killed")
        until(lambda: not (cg.parent / "esc").exists(), 5, "its cgroup removed")
    finally:
        remove_cgroups(parent)
