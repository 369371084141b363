"""Workload runtime: start a task's argv confined as asked, log it, stop it, and survive agent restarts.

Each assignment gets ``state_dir/<assignment_id>/`` (mode 0700: the agent's, never the workload's) with
``launch.json`` (argv, pid, the process's start time from ``/proc/<pid>/stat``, its cgroup and working
directory), ``stdout.log``, ``stderr.log`` and, once known, ``exit.json``. A new ``WorkloadRuntime`` on the
same directory reads them back: a pid whose start time still matches is our child (reattached), anything
else is reported lost; a pid number reused by another process is not ours.

A ``Confinement`` says how a workload is held: as which user (``RunAs``), in a working directory of its own
(``<work_root>/<assignment_id>``, mode 0700, owned by that user, removed when the rank is over), in a cgroup
with ``Limits`` (when the runtime has a cgroup backend). Every workload starts through the launcher
(``agent/launcher.py``), which joins the cgroup, drops privileges and execs; never through a shell: argv is
a list and is executed as given. With a cgroup, stopping signals every process in it and SIGKILL goes
through the cgroup, so nothing a workload forked (or ``setsid``-ed away) survives its stop.

A workload in a container (``agent/containers.py``) is its runtime's process (``podman run``), started the
same way; its ``ContainerHold`` says whether the launcher keeps root for it and how the container, which
the runtime keeps outside the process group and cgroup, is removed: after the workload ends, and with its
SIGKILL.

``start`` does not wait for the exec (``agent/launching.py``): the assignment is STARTING until its launcher
answers, which ``poll`` collects (exec'd: RUNNING; refused: EXITED 127 with the launcher's reason), so an
agent given several launches at once starts them all without one Python start-up after another. With
``warm_launcher`` a launcher is forked in advance and waits for the next launch, so a launch does not wait
for a Python to start at all (placed -> process started: ``benchmarks/launch_latency.py``). ``launch`` is
``start`` and then a wait for that answer, raising OSError when the workload could not be started.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from gpupool.agent.cgroups import CgroupBackend, JobCgroup, Limits, cgroup_from_record
from gpupool.agent.identity import RunAs
from gpupool.agent.launching import Launchers, Pending, start_failure
from gpupool.domain.errors import InputError, ParseError

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_POLL_S = 0.01
_KILL_WAIT_S = 1.0  # the agent loop waits this long for SIGKILLed processes to go, then looks again later
_TEARDOWN_TIMEOUT_S = 60.0  # a container runtime's removal of one container
_TEARDOWN_RETRY_S = 5.0  # a failed removal is tried again at most this often (each try blocks the agent loop)


class WorkloadState(StrEnum):
    STARTING = "starting"  # forked: its launcher has not exec'd the workload yet
    RUNNING = "running"
    EXITED = "exited"  # exit_code says how: >= 0 its own exit status, < 0 the signal that ended it
    LOST = "lost"  # gone while no agent watched: how it ended cannot be known


@dataclass(frozen=True, slots=True)
class Confinement:
    """How one workload is held. The defaults hold nothing: the agent's user, its cwd, no cgroup."""

    run_as: RunAs | None = None
    work_root: Path | None = None  # its working directory is <work_root>/<assignment_id>
    limits: Limits | None = None  # None: no cgroup of its own
    umask: int | None = None
    no_new_privs: bool = False
    container: ContainerHold | None = None  # argv starts a container runtime, which holds the workload


@dataclass(frozen=True, slots=True)
class ContainerHold:
    """A container runtime between the launcher and the workload (``agent/containers.py`` builds it).

    ``runtime_as_root``: the launcher execs the runtime as the agent's user (root), not as ``run_as``: a
    rootful Podman switches to the job's user itself (``--user``) and needs root to create the container.
    ``teardown`` (run with ``env``) removes what the runtime keeps outside the workload's process group and
    cgroup (Podman's conmon and container), idempotently: after the workload's end, and after its SIGKILL.
    ``failures``: the runtime's own exit codes (Podman's 125) with what they mean; such an exit's
    reason is that and the last line of its stderr (the runtime's error).
    """

    teardown: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    runtime_as_root: bool = False
    failures: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WorkloadHandle:
    assignment_id: str
    pid: int
    start_ticks: int  # field 22 of /proc/<pid>/stat: with the pid, identifies this process
    stdout_path: Path
    stderr_path: Path
    workdir: Path | None = None
    cgroup: JobCgroup | None = None
    memory_mib: int = 0  # its limit, for the reason when the kernel kills it over it
    container: ContainerHold | None = None


@dataclass(frozen=True, slots=True)
class WorkloadStatus:
    assignment_id: str
    state: WorkloadState
    exit_code: int | None = None
    reason: str = ""


def process_start_ticks(pid: int) -> tuple[int, str] | None:
    """(start time in clock ticks since boot, state letter) of ``pid``; None if there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[19]), fields[0]  # fields 22 and 3 of the full line


def _hold_from_record(raw: object) -> ContainerHold | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise TypeError(f"container: {raw!r}")
    env = {str(k): str(v) for k, v in raw["env"].items()}
    failures = {int(k): str(v) for k, v in raw.get("failures", {}).items()}
    return ContainerHold(tuple(str(a) for a in raw["teardown"]), env, failures=failures)


def _hold_record(hold: ContainerHold | None) -> dict[str, object] | None:
    if hold is None:
        return None
    return {
        "teardown": list(hold.teardown),
        "env": dict(hold.env),
        "failures": {str(k): v for k, v in hold.failures.items()},
    }


def _last_line(path: Path, limit: int = 300) -> str:
    """The last non-empty line of a log (its last 4 KiB read), at most ``limit`` characters."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            tail = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


def _write_json(path: Path, data: Mapping[str, object]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)  # mkdir's mode is masked by the umask, and an existing directory keeps its own


class WorkloadRuntime:
    """The agent's children. Not thread-safe: one agent loop owns it."""

    def __init__(
        self,
        state_dir: str | Path,
        cgroups: CgroupBackend | None = None,
        python: str = sys.executable,
        warm_launcher: bool = False,
    ) -> None:
        self.state_dir = Path(state_dir)
        _private_dir(self.state_dir)
        self.cgroups = cgroups
        self.launchers = Launchers(python, warm_launcher)
        self._starting: dict[str, Pending] = {}  # launched, its launcher's answer not read yet
        self._failures: dict[str, OSError] = {}  # why a launcher refused, for ``launch`` to raise
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._handles: dict[str, WorkloadHandle] = {}
        self._status: dict[str, WorkloadStatus] = {}
        self._stopping: set[str] = set()  # asked to stop: its processes get their grace period
        self._cleaned: set[str] = set()  # over, and its cgroup and working directory are gone
        self._torn: set[str] = set()  # its container removed (ContainerHold.teardown ran and succeeded)
        self._teardown_at: dict[str, float] = {}  # a failed teardown's next try (monotonic)
        for d in sorted(p for p in self.state_dir.iterdir() if (p / "launch.json").is_file()):
            self._recover(d)

    def _dir(self, assignment_id: str) -> Path:
        if not _ID_RE.match(assignment_id):
            raise InputError(f"assignment id {assignment_id!r} is not a safe directory name", source="launch")
        return self.state_dir / assignment_id

    def _recover(self, d: Path) -> None:
        aid = d.name
        try:
            meta = json.loads((d / "launch.json").read_text(encoding="utf-8"))
            cg = meta.get("cgroup")
            h = WorkloadHandle(
                aid,
                int(meta["pid"]),
                int(meta["start_ticks"]),
                d / "stdout.log",
                d / "stderr.log",
                Path(meta["workdir"]) if meta.get("workdir") else None,
                cgroup_from_record(cg) if cg else None,
                int(meta.get("memory_mib", 0)),
                _hold_from_record(meta.get("container")),
            )
        except (ValueError, KeyError, TypeError, InputError) as e:
            raise ParseError(f"not a launch record: {e}", source=str(d / "launch.json"), line=1) from e
        self._handles[aid] = h
        if (d / "exit.json").is_file():
            try:
                ex = json.loads((d / "exit.json").read_text(encoding="utf-8"))
                state, code = WorkloadState(ex["state"]), ex.get("exit_code")
            except (ValueError, KeyError, TypeError) as e:
                raise ParseError(f"not an exit record: {e}", source=str(d / "exit.json"), line=1) from e
            self._status[aid] = WorkloadStatus(aid, state, code, str(ex.get("reason", "")))
        elif self._alive(h):
            self._status[aid] = WorkloadStatus(aid, WorkloadState.RUNNING)
        else:
            self._finish(aid, WorkloadState.LOST, None)

    @staticmethod
    def _alive(h: WorkloadHandle) -> bool:
        """Still the process we started (same start time) and not merely a zombie awaiting its parent."""
        now = process_start_ticks(h.pid)
        return now is not None and now[0] == h.start_ticks and now[1] != "Z"

    def _finish(self, aid: str, state: WorkloadState, code: int | None, reason: str = "") -> None:
        h = self._handles[aid]
        if not reason and h.cgroup is not None and h.cgroup.oom_killed():
            reason = f"killed by the kernel: over its memory limit of {h.memory_mib} MiB"
        elif h.container is not None and code is not None and code in h.container.failures:
            reason = f"{h.container.failures[code]} (exit {code}): {_last_line(h.stderr_path)}"
        self._status[aid] = WorkloadStatus(aid, state, code, reason)
        self._children.pop(aid, None)
        _write_json(self.state_dir / aid / "exit.json", {"state": state.value, "exit_code": code, "reason": reason})
        self._cleanup(aid)

    def _cleanup(self, aid: str) -> None:
        """Once nothing of the rank runs: remove its cgroup and its working directory (scratch space)."""
        h = self._handles[aid]
        if h.cgroup is not None:
            if h.cgroup.pids():
                if aid in self._stopping:
                    return  # its processes have their grace period; the stop's SIGKILL comes after it
                # The leader is done, so the rank is: what it left running would hold its GPUs unseen.
                if not h.cgroup.kill(_KILL_WAIT_S):
                    return
            try:
                h.cgroup.remove()
            except OSError:
                return  # just-killed tasks not yet released: the next poll removes it
        elif (h.workdir is not None or h.container is not None) and self._group_alive(h.pid):
            return
        if not self._teardown(aid):
            return
        if h.workdir is not None:
            shutil.rmtree(h.workdir, ignore_errors=True)  # never follows a symlink the workload left there
        self._cleaned.add(aid)

    def _teardown(self, aid: str) -> bool:
        """Remove the rank's container (if its runtime keeps one); False while that has not succeeded."""
        hold = self._handles[aid].container
        if hold is None or not hold.teardown or aid in self._torn:
            return True
        if time.monotonic() < self._teardown_at.get(aid, 0.0):
            return False
        try:
            done = subprocess.run(
                hold.teardown,
                env=dict(hold.env),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=_TEARDOWN_TIMEOUT_S,
                check=False,
            )
            ok = done.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if not ok:
            self._teardown_at[aid] = time.monotonic() + _TEARDOWN_RETRY_S
            return False
        self._torn.add(aid)
        return True

    def _workdir(self, aid: str, confine: Confinement) -> Path | None:
        if confine.work_root is None:
            return None
        confine.work_root.mkdir(parents=True, exist_ok=True)
        os.chmod(confine.work_root, 0o711)  # each job may enter its own directory, none may list the others
        w = confine.work_root / aid
        _private_dir(w)
        if confine.run_as is not None:
            os.chown(w, confine.run_as.uid, confine.run_as.gid)
        return w

    def _write_files(self, where: Path, files: Mapping[str, str], confine: Confinement) -> None:
        for name, text in files.items():
            path = where / name
            if path.parent != where:
                raise InputError(f"file name {name!r} is not a plain name", source=str(where))
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            if confine.run_as is not None:
                os.chown(path, confine.run_as.uid, confine.run_as.gid)

    def launch(
        self,
        assignment_id: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str | Path | None = None,
        confine: Confinement | None = None,
        files: Mapping[str, str] | None = None,
    ) -> WorkloadHandle:
        """``start``, then wait for the launcher's answer: raises OSError when the workload could not be
        started (the launcher's reason; the assignment is then EXITED 127 with it)."""
        h = self.start(assignment_id, argv, env, cwd, confine, files)
        if assignment_id in self._starting:
            self._collect(assignment_id, wait=True)
        failure = self._failures.pop(assignment_id, None)
        if failure is not None:
            raise failure
        return h

    def start(
        self,
        assignment_id: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str | Path | None = None,
        confine: Confinement | None = None,
        files: Mapping[str, str] | None = None,
    ) -> WorkloadHandle:
        """Start ``argv`` with exactly ``env`` (the caller adds PATH and the rest), held as ``confine`` says,
        in ``cwd`` (default: its own working directory when ``confine`` gives one), with ``files`` (name ->
        text, readable by the workload only) written first into its working directory (else its state
        directory); return once its launcher has the launch, without waiting for the exec (``poll`` says how
        it went). A known id starts nothing. Raises OSError when no launcher took the launch, InputError for
        an unsafe id or an empty argv."""
        d = self._dir(assignment_id)
        known = self._handles.get(assignment_id)
        if known is not None:
            return known
        if not argv:
            raise InputError("empty argv", source=assignment_id)
        confine = confine or Confinement()
        _private_dir(d)
        workdir = self._workdir(assignment_id, confine)
        cgroup = None
        try:
            if files:
                self._write_files(workdir or d, files, confine)
            if self.cgroups is not None and confine.limits is not None:
                cgroup = self.cgroups.create(assignment_id, confine.limits)
            pending = self._spawn(d, argv, env, cwd or workdir, confine, cgroup)
        except BaseException:
            if cgroup is not None:
                cgroup.kill(_KILL_WAIT_S)
                with contextlib.suppress(OSError):
                    cgroup.remove()
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
            raise
        child = pending.child
        stat = process_start_ticks(child.pid)
        mem = confine.limits.memory_mib if confine.limits is not None else 0
        h = WorkloadHandle(
            assignment_id,
            child.pid,
            stat[0] if stat else -1,
            d / "stdout.log",
            d / "stderr.log",
            workdir,
            cgroup,
            mem,
            confine.container,
        )
        hold = confine.container
        record = {
            "argv": list(argv),
            "pid": h.pid,
            "start_ticks": h.start_ticks,
            "workdir": str(workdir) if workdir else None,
            "cgroup": cgroup.record() if cgroup else None,
            "memory_mib": mem,
            "container": _hold_record(hold),
        }
        _write_json(d / "launch.json", record)
        self._children[assignment_id] = child
        self._handles[assignment_id] = h
        self._status[assignment_id] = WorkloadStatus(assignment_id, WorkloadState.STARTING)
        self._starting[assignment_id] = pending
        return h

    def _spawn(
        self,
        d: Path,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str | Path | None,
        confine: Confinement,
        cgroup: JobCgroup | None,
    ) -> Pending:
        """Hand the launch to a launcher, with the rank's log files; its answer comes later."""
        as_root = confine.container is not None and confine.container.runtime_as_root
        run_as = None if as_root else confine.run_as
        spec = {
            "argv": list(argv),
            "env": dict(env),
            "cwd": str(cwd) if cwd is not None else None,
            "join": [str(p) for p in cgroup.join_files()] if cgroup else [],
            "uid": run_as.uid if run_as else None,
            "gid": run_as.gid if run_as else None,
            "groups": list(run_as.groups) if run_as else [],
            "umask": confine.umask,
            "no_new_privs": confine.no_new_privs and not as_root,
        }
        with (d / "stdout.log").open("ab") as out, (d / "stderr.log").open("ab") as err:
            return self.launchers.hand_over(spec, argv[0], (out.fileno(), err.fileno()), cgroup)

    def _collect(self, aid: str, wait: bool) -> bool:
        """Read a STARTING assignment's launcher's answer; True once settled (RUNNING, or EXITED 127 with the
        launcher's reason)."""
        pending = self._starting[aid]
        if not pending.collect(wait):
            return False
        del self._starting[aid]
        if pending.failure is None:
            self._status[aid] = WorkloadStatus(aid, WorkloadState.RUNNING)
            return True
        self._failures[aid] = pending.failure
        why = start_failure([pending.program], str(pending.failure.strerror or pending.failure))
        self._finish(aid, WorkloadState.EXITED, 127, why)
        return True

    @property
    def starting(self) -> tuple[str, ...]:
        """The assignments whose launcher has not answered yet (as of the last ``poll``)."""
        return tuple(self._starting)

    @property
    def spare_pid(self) -> int | None:
        """The launcher started in advance for the next launch, if one waits."""
        return self.launchers.spare_pid

    def close(self) -> None:
        """Let the spare launcher go."""
        self.launchers.close()

    def handle(self, assignment_id: str) -> WorkloadHandle | None:
        return self._handles.get(assignment_id)

    def _check(self, aid: str) -> WorkloadStatus:
        st = self._status.get(aid)
        if st is None:
            raise InputError(f"no assignment {aid!r} in {self.state_dir}", source=aid)
        if aid in self._starting and not self._collect(aid, wait=False):
            return st  # STARTING: its launcher has not answered yet
        st = self._status[aid]
        if st.state is not WorkloadState.RUNNING:
            if aid not in self._cleaned:
                self._cleanup(aid)
            return st
        child = self._children.get(aid)
        if child is not None:
            code = child.poll()
            if code is not None:
                self._finish(aid, WorkloadState.EXITED, code)
        elif not self._alive(self._handles[aid]):
            # Reattached: not our child any more, so its exit status went to whoever adopted it.
            self._finish(aid, WorkloadState.LOST, None)
        return self._status[aid]

    def poll(self) -> dict[str, WorkloadStatus]:
        """Every assignment this state directory knows, with its state and exit code."""
        return {aid: self._check(aid) for aid in sorted(self._status)}

    @staticmethod
    def _group_alive(pgid: int) -> bool:
        """Any process of the group that is not a zombie. ``killpg(pgid, 0)`` would count zombies, which
        linger until their parent reaps them and would make every stop wait out its grace period."""
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                raw = Path(entry.path, "stat").read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue  # exited while we looked
            fields = raw[raw.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
        return False

    def _any_alive(self, aid: str) -> bool:
        if aid in self._starting:
            return True  # its launcher, ours, perhaps not yet in its cgroup
        h = self._handles[aid]
        return bool(h.cgroup.pids()) if h.cgroup is not None else self._group_alive(h.pid)

    def _wait(self, aid: str, deadline: float) -> bool:
        """Poll until every process of the assignment is gone or ``deadline`` (monotonic) passes."""
        while True:
            leader_done = self._check(aid).state is not WorkloadState.RUNNING
            if leader_done and not self._any_alive(aid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)

    def stop(self, assignment_id: str, grace_s: float) -> WorkloadStatus:
        """SIGTERM to all of it, SIGKILL to what is left after ``grace_s``; returns the final status."""
        if self.send_signal(assignment_id, signal.SIGTERM) and not self._wait(
            assignment_id, time.monotonic() + grace_s
        ):
            self.send_signal(assignment_id, signal.SIGKILL)
            self._wait(assignment_id, time.monotonic() + 5.0)
        return self._check(assignment_id)

    def group_alive(self, assignment_id: str) -> bool:
        """Whether any process of the assignment still runs (a lost assignment's group is not ours, unless
        its cgroup says who is in)."""
        if self._check(assignment_id).state is WorkloadState.LOST and self._handles[assignment_id].cgroup is None:
            return False
        return self._any_alive(assignment_id)

    def send_signal(self, assignment_id: str, sig: signal.Signals) -> bool:
        """Signal the assignment without waiting; False when nothing of ours is left to signal.

        SIGTERM and SIGKILL reach every process of its cgroup (its process group without one); other
        signals (SIGUSR1, the checkpoint request) go to its process group, as the workload arranged it.
        For callers that cannot block for a grace period (the agent loop keeps beating meanwhile): SIGTERM
        now, then ``send_signal(.., SIGKILL)`` once their own deadline passes while ``group_alive`` holds.
        """
        if not self.group_alive(assignment_id):
            return False
        h = self._handles[assignment_id]
        if sig in (signal.SIGTERM, signal.SIGKILL):
            self._stopping.add(assignment_id)
        if assignment_id in self._starting:
            with contextlib.suppress(ProcessLookupError):  # the launcher alone, in the group it leads
                os.killpg(h.pid, sig)
        elif h.cgroup is not None and sig is signal.SIGKILL:
            h.cgroup.kill(_KILL_WAIT_S)
            self._teardown(assignment_id)  # a container outside the cgroup: its runtime's conmon holds it
        elif h.cgroup is not None and sig is signal.SIGTERM:
            h.cgroup.signal_all(sig)
        else:
            with contextlib.suppress(ProcessLookupError):  # already gone: nothing to stop
                os.killpg(h.pid, sig)  # start_new_session: the leader's pid is the group id
            if sig is signal.SIGKILL:
                self._teardown(assignment_id)  # the runtime is killed: its container is not, remove it
        return True
