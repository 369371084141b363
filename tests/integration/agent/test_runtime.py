"""WorkloadRuntime with real child processes: env, logs, exit codes, SIGTERM then SIGKILL, idempotency, restart.

No sleeping to wait for a child: every wait polls a condition with a short deadline.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpupool.agent.runtime import WorkloadRuntime, WorkloadState, process_start_ticks
from gpupool.domain.errors import InputError, ParseError
from gpupool.domain.workload import workload_env
from procs import until as poll_until

PY = sys.executable
BASE = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def until(cond: Callable[[], object], timeout_s: float = 5.0, what: str = "condition") -> None:
    poll_until(cond, timeout_s, what, every_s=0.005)


def finished(rt: WorkloadRuntime, aid: str) -> bool:
    return rt.poll()[aid].state is not WorkloadState.RUNNING


# Prints "ready" once its handler is installed, so a test never signals a child that cannot handle it yet.
TERM_HANDLER = (
    "import signal, sys, time\n"
    "def bye(*_):\n"
    "    print('got SIGTERM', flush=True); sys.exit(3)\n"
    "signal.signal(signal.SIGTERM, bye)\n"
    "print('ready', flush=True)\n"
    "while True: time.sleep(0.01)\n"
)
IGNORE_TERM = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "while True: time.sleep(0.01)\n"
)


def ready(rt: WorkloadRuntime, aid: str) -> None:
    h = rt.handle(aid)
    assert h is not None
    until(lambda: "ready" in h.stdout_path.read_text())


def test_workload_env_builds_exactly_the_gang_variables() -> None:
    env = workload_env(
        "job-7",
        9,
        16,
        1,
        [4, 5, 6, 7],
        ["mlx5_4:1", "mlx5_5:1"],
        "10.0.0.1",
        29500,
        "eth0",
        local_world_size=2,
        node_rank=4,
        nnodes=8,
        attempt=3,
    )
    assert env == {
        "GPUPOOL_JOB_ID": "job-7",
        "CUDA_VISIBLE_DEVICES": "4,5,6,7",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "NCCL_IB_HCA": "mlx5_4:1,mlx5_5:1",
        "NCCL_SOCKET_IFNAME": "eth0",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
        "RANK": "9",
        "WORLD_SIZE": "16",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "NODE_RANK": "4",
        "NNODES": "8",
        "GPUPOOL_ATTEMPT": "3",
    }
    with pytest.raises(InputError):
        workload_env("j", 1, 2, 1, [0], "", "h", 29500, "", local_world_size=1)  # local rank past its host's ranks
    with pytest.raises(InputError):
        workload_env("j", 16, 16, 0, [0], "=mlx5_0:1", "h", 29500, "eth0")
    with pytest.raises(InputError):
        workload_env("j", 0, 1, 0, [0], "=mlx5_0:1", "h", 70000, "eth0")


def test_child_gets_the_env_asked_for_and_logs_hold_its_output(tmp_path: Path) -> None:
    rt = WorkloadRuntime(tmp_path)
    env = {**BASE, **workload_env("job-1", 0, 2, 0, [0, 1], "=mlx5_0:1", "127.0.0.1", 29500, "lo")}
    code = "import os, json, sys; print(json.dumps(dict(os.environ))); print('oops', file=sys.stderr)"
    h = rt.launch("a1", [PY, "-c", code], env, cwd=tmp_path)
    until(lambda: finished(rt, "a1"))
    st = rt.poll()["a1"]
    assert (st.state, st.exit_code) == (WorkloadState.EXITED, 0)
    seen = json.loads(h.stdout_path.read_text())
    seen.pop("LC_CTYPE", None)  # Python's C-locale coercion may add it in the child itself
    assert seen == env
    assert h.stderr_path.read_text() == "oops\n"
    assert h.stdout_path.parent == tmp_path / "a1"


def test_exit_codes_and_signals(tmp_path: Path) -> None:
    rt = WorkloadRuntime(tmp_path)
    rt.launch("ok", [PY, "-c", "pass"], BASE)
    rt.launch("fail", [PY, "-c", "raise SystemExit(7)"], BASE)
    rt.launch("killed", [PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], BASE)
    until(lambda: all(s.state is WorkloadState.EXITED for s in rt.poll().values()))
    assert {a: s.exit_code for a, s in rt.poll().items()} == {"fail": 7, "killed": -signal.SIGKILL, "ok": 0}


def test_stop_runs_the_sigterm_handler(tmp_path: Path) -> None:
    rt = WorkloadRuntime(tmp_path)
    h = rt.launch("t", [PY, "-c", TERM_HANDLER], BASE)
    ready(rt, "t")
    st = rt.stop("t", grace_s=5.0)
    assert (st.state, st.exit_code) == (WorkloadState.EXITED, 3)
    assert "got SIGTERM" in h.stdout_path.read_text()


def test_stop_kills_a_child_that_ignores_sigterm_after_the_grace(tmp_path: Path) -> None:
    rt = WorkloadRuntime(tmp_path)
    rt.launch("stubborn", [PY, "-c", IGNORE_TERM], BASE)
    ready(rt, "stubborn")
    t0 = time.monotonic()
    st = rt.stop("stubborn", grace_s=0.3)
    took = time.monotonic() - t0
    assert (st.state, st.exit_code) == (WorkloadState.EXITED, -signal.SIGKILL)
    assert 0.3 <= took < 3.0


def test_stop_reaches_the_whole_process_group(tmp_path: Path) -> None:
    rt = WorkloadRuntime(tmp_path)
    # The leader starts a grandchild that ignores SIGTERM; stopping must not leave it behind.
    code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', {IGNORE_TERM!r}])\n"
        "print(p.pid, flush=True)\n"
        "while True: time.sleep(0.01)\n"
    )
    h = rt.launch("gang", [PY, "-c", code], BASE)
    until(lambda: h.stdout_path.read_text().count("\n") >= 2)  # grandchild pid, then its "ready"
    grandchild = int(h.stdout_path.read_text().split()[0])
    rt.stop("gang", grace_s=0.3)
    until(lambda: (s := process_start_ticks(grandchild)) is None or s[1] == "Z")


def test_launch_is_idempotent_per_assignment(tmp_path: Path) -> None:
    rt = WorkloadRuntime(tmp_path)
    marker = tmp_path / "count"
    code = f"open({str(marker)!r}, 'a').write('x')"
    first = rt.launch("once", [PY, "-c", code], BASE)
    assert rt.launch("once", [PY, "-c", code], BASE) == first  # while running (or just done)
    until(lambda: finished(rt, "once"))
    assert rt.launch("once", [PY, "-c", code], BASE) == first  # after it finished
    assert WorkloadRuntime(tmp_path).launch("once", [PY, "-c", code], BASE) == first  # after a restart
    assert marker.read_text() == "x"


def test_restart_reattaches_to_running_children_and_reports_the_rest(tmp_path: Path) -> None:
    old = WorkloadRuntime(tmp_path)
    old.launch("long", [PY, "-c", TERM_HANDLER], BASE)
    old.launch("short", [PY, "-c", "pass"], BASE)
    old.launch("vanishes", [PY, "-c", IGNORE_TERM], BASE)
    ready(old, "long")
    ready(old, "vanishes")
    until(lambda: finished(old, "short"))
    # "vanishes" dies while no agent watches (the old one is gone, the new one not started yet).
    vanishes = old.handle("vanishes")
    assert vanishes is not None
    os.kill(vanishes.pid, signal.SIGKILL)
    until(lambda: (s := process_start_ticks(vanishes.pid)) is None or s[1] == "Z")

    new = WorkloadRuntime(tmp_path)
    status = new.poll()
    assert status["long"].state is WorkloadState.RUNNING
    assert (status["short"].state, status["short"].exit_code) == (WorkloadState.EXITED, 0)
    assert status["vanishes"].state is WorkloadState.LOST
    st = new.stop("long", grace_s=5.0)
    # Not the new runtime's child: it can stop it but cannot learn how it ended.
    assert st.state is WorkloadState.LOST
    h = new.handle("long")
    assert h is not None and "got SIGTERM" in h.stdout_path.read_text()


def test_a_reused_pid_is_not_mistaken_for_our_child(tmp_path: Path) -> None:
    rt = WorkloadRuntime(tmp_path)
    rt.launch("x", [PY, "-c", "pass"], BASE)
    until(lambda: finished(rt, "x"))
    d = tmp_path / "x"
    (d / "exit.json").unlink()
    # Pretend the recorded pid now belongs to another process: this test's own, with another start time.
    me = process_start_ticks(os.getpid())
    assert me is not None
    meta = json.loads((d / "launch.json").read_text())
    (d / "launch.json").write_text(json.dumps({**meta, "pid": os.getpid(), "start_ticks": me[0] + 1}))
    assert WorkloadRuntime(tmp_path).poll()["x"].state is WorkloadState.LOST


def test_unsafe_ids_and_unknown_assignments_are_refused(tmp_path: Path) -> None:
    rt = WorkloadRuntime(tmp_path)
    with pytest.raises(InputError):
        rt.launch("../escape", [PY, "-c", "pass"], BASE)
    with pytest.raises(InputError):
        rt.launch("empty", [], BASE)
    with pytest.raises(InputError):
        rt.stop("nobody", grace_s=0.1)


def test_a_corrupt_launch_record_is_a_parse_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "launch.json").write_text("{not json")
    with pytest.raises(ParseError) as e:
        WorkloadRuntime(tmp_path)
    assert e.value.source == str(tmp_path / "bad" / "launch.json")


def gated_python(tmp_path: Path) -> tuple[str, Path]:
    """A "python" for the runtime's launcher that waits for a file to exist before it starts: a launcher held
    between fork and exec for as long as the test likes."""
    gate = tmp_path / "gate"
    script = tmp_path / "gated-python"
    script.write_text(f'#!/bin/sh\nwhile [ ! -e {gate} ]; do sleep 0.01; done\nexec {PY} "$@"\n')
    script.chmod(0o755)
    return str(script), gate


def test_start_returns_before_the_exec_and_poll_collects_the_launchers_answer(tmp_path: Path) -> None:
    python, gate = gated_python(tmp_path)
    rt = WorkloadRuntime(tmp_path / "state", python=python)
    h = rt.start("ok", [PY, "-c", "print('ran', flush=True)"], BASE)
    rt.start("nope", ["/no/such/program"], BASE)
    # Both launchers are held before their exec, and start() came back: neither is running nor refused yet.
    assert {a: s.state for a, s in rt.poll().items()} == {"ok": WorkloadState.STARTING, "nope": WorkloadState.STARTING}
    gate.touch()
    until(lambda: rt.poll()["nope"].state is WorkloadState.EXITED)
    refused = rt.poll()["nope"]
    assert (refused.exit_code, refused.reason) == (127, "cannot start '/no/such/program': No such file or directory")
    until(lambda: rt.poll()["ok"].state is WorkloadState.EXITED)
    assert rt.poll()["ok"].exit_code == 0 and h.stdout_path.read_text() == "ran\n"


def test_a_stop_while_the_launcher_has_not_exec_d_ends_it(tmp_path: Path) -> None:
    python, _gate = gated_python(tmp_path)
    rt = WorkloadRuntime(tmp_path / "state", python=python)
    rt.start("held", [PY, "-c", "print('ran')"], BASE)
    assert rt.poll()["held"].state is WorkloadState.STARTING
    st = rt.stop("held", grace_s=2.0)
    assert (st.state, st.exit_code) == (WorkloadState.EXITED, -signal.SIGTERM)
    assert rt.handle("held") is not None and rt.handle("held").stdout_path.read_text() == ""  # type: ignore[union-attr]


def test_a_warm_launcher_waits_for_the_next_launch_and_goes_when_closed(tmp_path: Path) -> None:
    rt = WorkloadRuntime(tmp_path / "state", warm_launcher=True)
    first = rt.launch("a", [PY, "-c", "pass"], BASE)
    spare = rt.spare_pid
    assert spare is not None and spare != first.pid and process_start_ticks(spare) is not None
    # The next launch is the launcher started before it was asked for: no Python start-up on its path.
    second = rt.launch("b", [PY, "-c", "print('b', flush=True)"], BASE)
    assert second.pid == spare and rt.spare_pid not in (None, spare)
    until(lambda: rt.poll()["b"].state is WorkloadState.EXITED)
    assert rt.poll()["b"].exit_code == 0 and second.stdout_path.read_text() == "b\n"
    last = rt.spare_pid
    assert last is not None
    rt.close()  # its socket closes unused: it exits 0 and leaves nothing behind
    assert rt.spare_pid is None
    until(lambda: (s := process_start_ticks(last)) is None or s[1] == "Z")
