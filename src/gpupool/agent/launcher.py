"""The first moments of a workload: join its cgroup, become its user, then exec the tenant's argv.

Run by the agent as ``python -I -S launcher.py FD`` (stdlib only, never imported by gpupool): the agent
forks it with a clean environment and sends the launch over the socket ``FD`` as one JSON object, with the
rank's stdout and stderr files as two descriptors beside it (SCM_RIGHTS), so the tenant's variables
(``LD_PRELOAD`` among them) never reach this process while it is root. Because nothing of the launch is
needed to start it, the agent keeps one launcher started in advance, waiting on its socket, and a launch
does not wait for a Python to start; a launcher whose socket closes before any launch came exits 0. In order:

1. write its pid into each cgroup ``join`` file (root is needed for that on cgroup v2, so this comes first,
   and nothing the workload starts can begin outside its cgroup);
2. drop to ``uid``/``gid``/``groups`` and set no-new-privileges (no setuid binary gives root back);
3. set the umask, enter ``cwd``, reset the signals Python ignores (SIGPIPE, SIGXFSZ) to their defaults;
4. exec ``argv`` with exactly ``env``.

Any failure is sent back over ``FD`` as ``{"errno", "step", "message"}`` and the launcher exits 127. The
socket is close-on-exec: when the exec succeeds the agent reads end-of-file and knows the workload runs.
Why not ``Popen(user=...)``: it drops privileges before the exec, and on cgroup v2 moving a process between
cgroups needs write access to their common ancestor, which only root has; ``preexec_fn`` is not safe in
the agent, which runs threads.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import sys

_PR_SET_NO_NEW_PRIVS = 38


def _fail(fd: int, step: str, e: OSError) -> None:
    reply = {"errno": e.errno or 0, "step": step, "message": e.strerror or str(e)}
    try:
        os.write(fd, json.dumps(reply).encode())
    finally:
        os._exit(127)


def _receive(sock: socket.socket) -> bytes:
    """The launch's JSON, with stdout and stderr put in place; exit 0 when the agent closed the socket unused."""
    first, fds, _flags, _addr = socket.recv_fds(sock, 1 << 16, 2)
    if not first:
        os._exit(0)
    for target, fd in zip((1, 2), fds, strict=False):
        os.dup2(fd, target)
        os.close(fd)
    chunks = [first]
    while chunk := sock.recv(1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def main(fd: int) -> None:
    sock = socket.socket(fileno=fd)  # kept referenced until the exec: collecting it would close fd
    spec = json.loads(_receive(sock))
    step = "cgroup"
    try:
        for path in spec.get("join", ()):
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        step = "user"
        if spec.get("uid") is not None:
            os.setgroups(spec.get("groups", []))
            os.setresgid(spec["gid"], spec["gid"], spec["gid"])
            os.setresuid(spec["uid"], spec["uid"], spec["uid"])
        if spec.get("no_new_privs"):
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))
        if spec.get("umask") is not None:
            os.umask(spec["umask"])
        step = "chdir"
        if spec.get("cwd"):
            os.chdir(spec["cwd"])
        step = "exec"
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        os.set_inheritable(fd, False)
        argv = spec["argv"]
        os.execvpe(argv[0], argv, spec["env"])
    except OSError as e:
        _fail(fd, step, e)


if __name__ == "__main__":
    main(int(sys.argv[1]))
