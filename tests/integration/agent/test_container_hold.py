"""WorkloadRuntime with a ContainerHold, on real child processes: the runtime's teardown (what removes a
container its runtime keeps outside the process group) runs once the rank is over and after a SIGKILL, never
while the rank runs, and survives an agent restart in the launch record."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from gpupool.agent.runtime import Confinement, ContainerHold, WorkloadRuntime, WorkloadState
from procs import until

PY = sys.executable
IGNORE_TERM = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(60)\n"
)


def hold(marker: Path) -> Confinement:
    """A teardown that notes each of its runs in ``marker``."""
    note = f"open({str(marker)!r}, 'a').write('removed\\n')"
    return Confinement(work_root=marker.parent / "work", container=ContainerHold((PY, "-c", note), {}))


def test_the_teardown_runs_once_when_the_rank_is_over_and_not_before(tmp_path: Path) -> None:
    marker = tmp_path / "teardowns"
    rt = WorkloadRuntime(tmp_path / "state")
    h = rt.launch("a1", [PY, "-c", "print(1)"], {}, confine=hold(marker))
    until(lambda: rt.poll()["a1"].state is WorkloadState.EXITED, 10, "the rank exited")
    until(lambda: marker.is_file(), 10, "the teardown ran")
    rt.poll()
    rt.poll()
    assert marker.read_text() == "removed\n"
    assert h.workdir is not None and not h.workdir.exists()  # cleaned up after the teardown succeeded
    running = rt.launch("a2", [PY, "-c", IGNORE_TERM], {}, confine=hold(tmp_path / "running"))
    until(lambda: "ready" in running.stdout_path.read_text(), 10, "the second rank ready")
    rt.poll()
    assert not (tmp_path / "running").exists()  # never while it runs
    again = WorkloadRuntime(tmp_path / "state")  # an agent restart reads the hold back from launch.json
    recovered = again.handle("a2")
    assert recovered is not None and recovered.container == running.container
    again.send_signal("a2", signal.SIGKILL)
    assert (tmp_path / "running").read_text() == "removed\n"  # SIGKILL: the runtime's container is removed too


def test_a_stop_that_escalates_to_sigkill_removes_the_container(tmp_path: Path) -> None:
    marker = tmp_path / "teardowns"
    rt = WorkloadRuntime(tmp_path / "state")
    h = rt.launch("a1", [PY, "-c", IGNORE_TERM], {}, confine=hold(marker))
    until(lambda: "ready" in h.stdout_path.read_text(), 10, "ready")
    st = rt.stop("a1", grace_s=0.2)
    assert st.state is WorkloadState.EXITED and st.exit_code == -signal.SIGKILL
    assert marker.read_text() == "removed\n"  # once: the end of the rank does not remove it again


def test_the_runtimes_own_exit_code_gets_its_meaning_and_last_error_line_as_reason(tmp_path: Path) -> None:
    rt = WorkloadRuntime(tmp_path / "state")
    failing = ContainerHold((), {}, failures={125: "podman could not run the container"})
    write = "import sys; sys.stderr.write('pulling\\nError: image not known\\n\\n'); sys.exit({})"
    for aid, code in (("a125", 125), ("a3", 3)):
        rt.launch(aid, [PY, "-c", write.format(code)], {}, confine=Confinement(container=failing))
        until(lambda a=aid: rt.poll()[a].state is WorkloadState.EXITED, 10, f"{aid} exited")
    st = rt.poll()
    assert st["a125"].reason == "podman could not run the container (exit 125): Error: image not known"
    assert st["a3"].exit_code == 3 and st["a3"].reason == ""  # the workload's own exit: no runtime reason
    assert WorkloadRuntime(tmp_path / "state").poll()["a125"].reason == st["a125"].reason  # kept across a restart
