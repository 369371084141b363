"""The runtime's end of the launcher (``agent/launcher.py``): fork one, hand it a launch, read its answer.

A launcher needs nothing of its launch to start: the launch (one JSON object) and the rank's stdout and
stderr (two descriptors, SCM_RIGHTS) come over its socket. So ``Launchers`` can keep one forked in advance
(``warm``), waiting on its socket, and a launch does not wait for a Python to start. ``hand_over`` gives a
launcher its launch and returns at once; ``Pending.collect`` reads the answer later: end-of-file alone means
it exec'd the workload, a JSON object says why not (the step and errno), and a launcher that has done
neither within ``LAUNCH_TIMEOUT_S`` is killed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpupool.agent.cgroups import JobCgroup

LAUNCHER = Path(__file__).with_name("launcher.py")
LAUNCH_TIMEOUT_S = 30.0  # from fork to exec; a launcher stuck longer is killed and the launch fails
_STEPS = {"cgroup": "joining its cgroup", "user": "becoming its user", "chdir": "entering its working directory"}

Launcher = tuple[subprocess.Popen[bytes], socket.socket]


def start_failure(argv: Sequence[str], why: str) -> str:
    """One line saying why a command did not start, for the job's reason (never the whole argv: it may be
    megabytes, or hold a secret)."""
    return f"cannot start {(argv[0][:200] if argv else '')!r}: {why}"


def _refusal(reply: bytes) -> OSError:
    try:
        why = json.loads(reply)
        step = _STEPS.get(why.get("step", ""), "")
        return OSError(int(why.get("errno", 0)), f"{step}: {why['message']}" if step else str(why["message"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return OSError(0, f"the launcher answered {reply[:200]!r}")


@dataclass(slots=True)
class Pending:
    """A launch its launcher has not answered yet. Once ``collect`` is True: ``failure`` None means the
    workload was exec'd, else why it was not (and the launcher has exited)."""

    child: subprocess.Popen[bytes]
    sock: socket.socket
    program: str  # argv[0], for the reason of a refusal
    deadline: float  # monotonic
    reply: bytearray = field(default_factory=bytearray)
    failure: OSError | None = None

    def collect(self, wait: bool) -> bool:
        """Read what the launcher sent so far (``wait``: until it is settled); True once it is."""
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.child.kill()
                self.child.wait()
                return self._settle(
                    OSError(errno.ETIMEDOUT, f"the launcher did not exec within {LAUNCH_TIMEOUT_S:g} s")
                )
            self.sock.settimeout(left if wait else 0.0)
            try:
                chunk = self.sock.recv(1 << 16)
            except (BlockingIOError, TimeoutError):
                if wait:
                    continue
                return False
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                break
            self.reply += chunk
        if not self.reply:
            return self._settle(None)
        self.child.wait()
        return self._settle(_refusal(bytes(self.reply)))

    def _settle(self, failure: OSError | None) -> bool:
        self.sock.close()
        self.failure = failure
        return True


class Launchers:
    """Forks launchers with ``python``; with ``warm``, keeps the next one forked and waiting."""

    def __init__(self, python: str, warm: bool) -> None:
        self.python, self.warm = python, warm
        self._spare: Launcher | None = None

    @property
    def spare_pid(self) -> int | None:
        """The launcher started in advance for the next launch, if one waits."""
        return self._spare[0].pid if self._spare is not None else None

    def _fork(self, cgroup: JobCgroup | None) -> Launcher:
        launcher = [self.python, "-I", "-S", "-X", "utf8", str(LAUNCHER)]
        ours, theirs = socket.socketpair()
        try:
            child = subprocess.Popen(  # an argv list and no shell; the tenant's env never reaches it
                [*(cgroup.wrap(launcher) if cgroup else launcher), str(theirs.fileno())],
                env={},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # until its launch hands it the rank's own files
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                pass_fds=(theirs.fileno(),),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return child, ours

    def _take(self, cgroup: JobCgroup | None) -> Launcher:
        """The spare when one waits and fits (a cgroup that a wrapper such as ``systemd-run`` creates needs a
        launcher started inside it), else a new one."""
        if cgroup is not None and cgroup.wrap([]):
            return self._fork(cgroup)
        spare, self._spare = self._spare, None
        if spare is not None and spare[0].poll() is None:
            return spare
        if spare is not None:
            spare[1].close()
        return self._fork(None)

    def hand_over(
        self, spec: Mapping[str, object], program: str, logs: tuple[int, int], cgroup: JobCgroup | None
    ) -> Pending:
        """Give a launcher ``spec`` and ``logs`` (the rank's stdout and stderr); its answer comes later."""
        child, ours = self._take(cgroup)
        data = json.dumps(spec).encode()
        ours.settimeout(LAUNCH_TIMEOUT_S)
        try:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # it died: its answer says why
                sent = socket.send_fds(ours, [data], list(logs))
                ours.sendall(data[sent:])
                ours.shutdown(socket.SHUT_WR)
        except TimeoutError:
            child.kill()
            child.wait()
            ours.close()
            raise OSError(errno.ETIMEDOUT, f"the launcher did not read its launch in {LAUNCH_TIMEOUT_S:g} s") from None
        if self.warm:
            self._spare = self._fork(None)  # ready for the next launch before it comes
        return Pending(child, ours, program, time.monotonic() + LAUNCH_TIMEOUT_S)

    def close(self) -> None:
        """Let the spare go: it exits 0 when its socket closes unused."""
        spare, self._spare = self._spare, None
        if spare is not None:
            spare[1].close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                spare[0].wait(timeout=5)
