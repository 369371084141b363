"""Workload runtime: run a task's argv as its own process group, log it, stop it, and survive agent restarts.

Each assignment gets ``state_dir/<assignment_id>/`` with ``launch.json`` (argv, pid, the process's start
time from ``/proc/<pid>/stat``), ``stdout.log``, ``stderr.log`` and, once known, ``exit.json``. A new
``WorkloadRuntime`` on the same directory reads them back: a pid whose start time still matches is our
child (reattached), anything else is reported lost; a pid number reused by another process is not ours.
Never through a shell: argv is a list and is executed as given.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from gpupool.domain.errors import InputError, ParseError

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_POLL_S = 0.01


class WorkloadState(StrEnum):
    RUNNING = "running"
    EXITED = "exited"  # exit_code says how: >= 0 its own exit status, < 0 the signal that ended it
    LOST = "lost"  # gone while no agent watched: how it ended cannot be known


@dataclass(frozen=True, slots=True)
class WorkloadHandle:
    assignment_id: str
    pid: int
    start_ticks: int  # field 22 of /proc/<pid>/stat: with the pid, identifies this process
    stdout_path: Path
    stderr_path: Path


@dataclass(frozen=True, slots=True)
class WorkloadStatus:
    assignment_id: str
    state: WorkloadState
    exit_code: int | None = None


def process_start_ticks(pid: int) -> tuple[int, str] | None:
    """(start time in clock ticks since boot, state letter) of ``pid``; None if there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[19]), fields[0]  # fields 22 and 3 of the full line


def _write_json(path: Path, data: Mapping[str, object]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


class WorkloadRuntime:
    """The agent's children. Not thread-safe: one agent loop owns it."""

    def __init__(self, state_dir: str | Path) -> None:
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._handles: dict[str, WorkloadHandle] = {}
        self._status: dict[str, WorkloadStatus] = {}
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
            h = WorkloadHandle(aid, int(meta["pid"]), int(meta["start_ticks"]), d / "stdout.log", d / "stderr.log")
        except (ValueError, KeyError, TypeError) as e:
            raise ParseError(f"not a launch record: {e}", source=str(d / "launch.json"), line=1) from e
        self._handles[aid] = h
        if (d / "exit.json").is_file():
            try:
                ex = json.loads((d / "exit.json").read_text(encoding="utf-8"))
                state, code = WorkloadState(ex["state"]), ex.get("exit_code")
            except (ValueError, KeyError, TypeError) as e:
                raise ParseError(f"not an exit record: {e}", source=str(d / "exit.json"), line=1) from e
            self._status[aid] = WorkloadStatus(aid, state, code)
        elif self._alive(h):
            self._status[aid] = WorkloadStatus(aid, WorkloadState.RUNNING)
        else:
            self._finish(aid, WorkloadState.LOST, None)

    @staticmethod
    def _alive(h: WorkloadHandle) -> bool:
        """Still the process we started (same start time) and not merely a zombie awaiting its parent."""
        now = process_start_ticks(h.pid)
        return now is not None and now[0] == h.start_ticks and now[1] != "Z"

    def _finish(self, aid: str, state: WorkloadState, code: int | None) -> None:
        self._status[aid] = WorkloadStatus(aid, state, code)
        self._children.pop(aid, None)
        _write_json(self.state_dir / aid / "exit.json", {"state": state.value, "exit_code": code})

    def launch(
        self, assignment_id: str, argv: Sequence[str], env: Mapping[str, str], cwd: str | Path | None = None
    ) -> WorkloadHandle:
        """Start ``argv`` with exactly ``env`` (the caller adds PATH and the rest); a known id starts nothing."""
        d = self._dir(assignment_id)
        known = self._handles.get(assignment_id)
        if known is not None:
            return known
        if not argv:
            raise InputError("empty argv", source=assignment_id)
        d.mkdir(parents=True, exist_ok=True)
        with (d / "stdout.log").open("ab") as out, (d / "stderr.log").open("ab") as err:
            child = subprocess.Popen(  # an argv list and no shell: nothing in it is interpreted
                list(argv),
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                close_fds=True,
            )
        stat = process_start_ticks(child.pid)
        h = WorkloadHandle(assignment_id, child.pid, stat[0] if stat else -1, d / "stdout.log", d / "stderr.log")
        _write_json(d / "launch.json", {"argv": list(argv), "pid": h.pid, "start_ticks": h.start_ticks})
        self._children[assignment_id] = child
        self._handles[assignment_id] = h
        self._status[assignment_id] = WorkloadStatus(assignment_id, WorkloadState.RUNNING)
        return h

    def handle(self, assignment_id: str) -> WorkloadHandle | None:
        return self._handles.get(assignment_id)

    def _check(self, aid: str) -> WorkloadStatus:
        st = self._status.get(aid)
        if st is None:
            raise InputError(f"no assignment {aid!r} in {self.state_dir}", source=aid)
        if st.state is not WorkloadState.RUNNING:
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

    def _wait(self, aid: str, deadline: float) -> bool:
        """Poll until the assignment's whole process group is gone or ``deadline`` (monotonic) passes."""
        pgid = self._handles[aid].pid  # start_new_session: the leader's pid is the group id
        while True:
            leader_done = self._check(aid).state is not WorkloadState.RUNNING
            if leader_done and not self._group_alive(pgid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)

    def stop(self, assignment_id: str, grace_s: float) -> WorkloadStatus:
        """SIGTERM to the group, SIGKILL to what is left after ``grace_s``; returns the final status."""
        st = self._check(assignment_id)
        pgid = self._handles[assignment_id].pid
        # A lost assignment's pid may belong to someone else by now: only a group we know is ours is signalled.
        if st.state is not WorkloadState.LOST and self._group_alive(pgid):
            self._signal(pgid, signal.SIGTERM)
            if not self._wait(assignment_id, time.monotonic() + grace_s):
                self._signal(pgid, signal.SIGKILL)
                self._wait(assignment_id, time.monotonic() + 5.0)
        return self._check(assignment_id)

    def group_alive(self, assignment_id: str) -> bool:
        """Whether any process of the assignment's group still runs (a lost assignment's group is not ours)."""
        if self._check(assignment_id).state is WorkloadState.LOST:
            return False
        return self._group_alive(self._handles[assignment_id].pid)

    def send_signal(self, assignment_id: str, sig: signal.Signals) -> bool:
        """Signal the assignment's whole group without waiting; False when nothing of ours is left to signal.

        For callers that cannot block for a grace period (the agent loop keeps beating meanwhile): SIGTERM
        now, then ``send_signal(.., SIGKILL)`` once their own deadline passes while ``group_alive`` holds.
        """
        if not self.group_alive(assignment_id):
            return False
        self._signal(self._handles[assignment_id].pid, sig)
        return True

    def _signal(self, pgid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):  # already gone: nothing to stop
            os.killpg(pgid, sig)
