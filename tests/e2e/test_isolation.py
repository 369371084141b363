"""Tenants apart on a shared node: the real server and a real ``gpupool agent`` process (an emulated DGX H100)
isolating as a production node does, with two tenants whose jobs land side by side.

The agent runs each job as its tenant's Unix user (made for the test, mapped with ``--user-map``), in a
cgroup of its own (cgroup v1 on the build machines). Jobs print what they could and could not do; the test
reads their logs in the agent's state directory. GPU device nodes are stand-ins (see test_confinement.py).
Needs root; skips, saying so, without it. Waits poll with a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpupool.agent.identity import RunAs
from gpupool.agent.runtime import process_start_ticks
from gpupool.fabric import jsonio
from gpupool.fabric.generators import superpod
from isolation_support import mknod, needs_v1, open_dir, python_for_others, remove_cgroups, throwaway_users
from procs import PY, SERVER, free_port, healthy, stop, until

pytestmark = needs_v1

ADMIN = "iso-admin"
HOST = "dgx001"


@dataclass
class Node:
    root: Path  # pytest's: the server's data and the agent's state (root's, private)
    place: Path  # enterable by the jobs' users: their working directories and the stand-in /dev
    http: httpx.Client
    server: subprocess.Popen[bytes]
    agent: subprocess.Popen[bytes]
    join: str
    users: dict[str, RunAs]  # tenant -> its user
    tokens: dict[str, str]  # tenant -> its API token

    @property
    def state(self) -> Path:
        return self.root / HOST / "workloads"

    def submit(self, tenant: str, code: str, *args: str, **kw: Any) -> str:
        body = {"command": [python_for_others(), "-c", code, *args], "gpus_per_task": 1, **kw}
        r = self.http.post("/v1/jobs", json=body, headers={"Authorization": f"Bearer {self.tokens[tenant]}"})
        assert r.status_code == 201, r.text
        return str(r.json()["job"]["id"])

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(self.http.get(f"/v1/jobs/{job_id}").json())

    def assignment(self, job_id: str) -> Path | None:
        for f in self.state.glob("*/assignment.json"):
            if json.loads(f.read_text())["job_id"] == job_id:
                return f.parent
        return None

    def report(self, job_id: str) -> dict[str, Any]:
        """The first line the job printed, as JSON."""
        d = until(lambda: self.assignment(job_id), what=f"{job_id} launched")

        def line() -> str | None:
            log = d / "stdout.log"  # assignment.json comes first, the log when the process starts
            text = log.read_text() if log.exists() else ""
            return text.partition("\n")[0] if "\n" in text else None

        return dict(json.loads(until(line, what=f"{job_id} reported")))

    def cancel(self, job_id: str) -> None:
        self.http.post(f"/v1/jobs/{job_id}/cancel")
        until(lambda: self.job(job_id)["state"] in ("cancelled", "failed", "finished"), what=f"{job_id} over")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    root = tmp_path_factory.mktemp("iso")
    parent = f"gpupool-test-{secrets.token_hex(4)}"
    with throwaway_users(2) as made, open_dir() as place, contextlib.ExitStack() as stack:
        users = {"alice": made[0], "bob": made[1]}
        (place / "users.toml").write_text("".join(f'{t} = "{u.user}"\n' for t, u in users.items()))
        dev = place / "dev"
        dev.mkdir(mode=0o755)
        mknod(dev / "nvidia0", 10, 229)
        mknod(dev / "nvidia1", 10, 200)
        mknod(dev / "nvidiactl", 1, 11)
        fabric = root / "fabric.json"
        jsonio.save(superpod(1), fabric)
        port = free_port()
        env = dict(os.environ, GPUPOOL_DATA_DIR=str(root / "data"), GPUPOOL_ADMIN_TOKEN=ADMIN,
                   GPUPOOL_PORT=str(port), GPUPOOL_HEARTBEAT_INTERVAL_S="0.2", GPUPOOL_NODE_LOST_AFTER_S="10",
                   GPUPOOL_SCHEDULE_PERIOD_S="0.2", GPUPOOL_STOP_GRACE_S="1.0")  # fmt: skip
        (root / "data").mkdir()
        server = subprocess.Popen([PY, "-c", SERVER], env=env)
        stack.callback(stop, server)
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {ADMIN}"})
        stack.callback(http.close)
        until(lambda: healthy(http), 60, "server up")
        r = http.put("/v1/fabric", content=fabric.read_text(), headers={"Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        join = http.post("/v1/join-tokens", json={}).json()["token"]
        tokens = {}
        for tenant in users:
            assert http.post("/v1/tenants", json={"name": tenant}).status_code == 201
            tokens[tenant] = http.post("/v1/tokens", json={"tenant": tenant}).json()["token"]
        argv = [PY, "-m", "gpupool", "agent", "--server", str(http.base_url), "--join-token", join, "--host", HOST,
                "--state-dir", str(root / HOST), "--work-dir", str(place / "work"), "--emulate",
                "--fabric", str(fabric), "--user-map", str(place / "users.toml"), "--no-create-users",
                "--dev-dir", str(dev), "--cgroup-parent", parent, "--stop-workloads-on-exit"]  # fmt: skip
        agent = subprocess.Popen(argv)
        stack.callback(remove_cgroups, parent)
        stack.callback(stop, agent)
        nodes = lambda: http.get("/v1/nodes").json()["nodes"]  # noqa: E731
        until(lambda: [n["state"] for n in nodes()] == ["up"], 60, "the node up")
        yield Node(root, place, http, server, agent, join, users, tokens)
        assert agent.poll() is None, "the agent exited"


# Bob's job: a file in its working directory, a line in its log, a variable in its environment.
BOB = """
import json, os, time
open('secret.txt', 'w').write('bob-file-secret')
print(json.dumps({'cwd': os.getcwd(), 'pid': os.getpid(), 'mine': open('secret.txt').read()}), flush=True)
print('bob-log-secret', flush=True)
time.sleep(300)
"""

# Alice's job: tries every way in it can think of; prints what each attempt got.
ALICE = """
import json, os, sys
bob_cwd, bob_log, bob_pid, agent_pid, state = sys.argv[1:6]
def attempt(f):
    try:
        return 'ok: ' + str(f())[:200]
    except OSError as e:
        return e.strerror
out = {
    'uid': os.getuid(),
    'list work root': attempt(lambda: os.listdir(os.path.dirname(bob_cwd))),
    'read bob file': attempt(lambda: open(os.path.join(bob_cwd, 'secret.txt')).read()),
    'list bob cwd': attempt(lambda: os.listdir(bob_cwd)),
    'read bob log': attempt(lambda: open(bob_log).read()),
    'list agent state': attempt(lambda: os.listdir(state)),
    'read bob environ': attempt(lambda: open(f'/proc/{bob_pid}/environ', 'rb').read()),
    'read agent environ': attempt(lambda: open(f'/proc/{agent_pid}/environ', 'rb').read()),
    'agent cmdline': open(f'/proc/{agent_pid}/cmdline', 'rb').read().decode(errors='replace'),
    'signal bob': attempt(lambda: os.kill(int(bob_pid), 0)),
}
print(json.dumps(out), flush=True)
"""


def test_a_job_cannot_read_another_tenants_files_logs_or_environment_nor_the_agents_tokens(node: Node) -> None:
    bob = node.submit("bob", BOB, env={"SECRET": "bob-env-secret"})
    seen = node.report(bob)
    assert seen["mine"] == "bob-file-secret"  # bob reads his own
    bob_dir = node.assignment(bob)
    assert bob_dir is not None
    bob_log = bob_dir / "stdout.log"
    until(lambda: "bob-log-secret" in bob_log.read_text())
    alice = node.submit(
        "alice", ALICE, seen["cwd"], str(bob_log), str(seen["pid"]), str(node.agent.pid), str(node.root)
    )
    got = node.report(alice)
    assert got["uid"] == node.users["alice"].uid and node.users["alice"].uid != node.users["bob"].uid
    denied = {k: v for k, v in got.items() if k not in ("uid", "agent cmdline")}
    assert denied == {
        "list work root": "Permission denied",
        "read bob file": "Permission denied",
        "list bob cwd": "Permission denied",
        "read bob log": "Permission denied",
        "list agent state": "Permission denied",
        "read bob environ": "Permission denied",
        "read agent environ": "Permission denied",
        "signal bob": "Operation not permitted",
    }
    # The join token left the agent's command line (it re-executed itself with the token in its environment).
    assert node.join not in got["agent cmdline"] and "--join-token" not in got["agent cmdline"]
    assert node.join not in (Path("/proc") / str(node.agent.pid) / "cmdline").read_text()
    # Bob runs as bob, and his job is still there, untouched.
    assert (node.root / HOST / "workloads").stat().st_mode & 0o777 == 0o700
    # The server learns that bob's process started from the agent's report, which may trail the process on a
    # loaded machine (CI saw "placed" here once, seconds after bob printed): wait until it has heard, then bob's
    # job must be running, not ended by anything alice did.
    state = until(lambda: (s := node.job(bob)["state"]) != "placed" and s, what=f"{bob}'s start reported")
    assert state == "running"
    node.cancel(bob)


FETCH = """
import sys, urllib.error, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1]).read().decode()[-200:], flush=True)
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip(), flush=True)
"""


def test_a_job_cannot_fetch_another_jobs_log_from_the_agents_log_server(node: Node) -> None:
    bob = node.submit("bob", BOB)
    node.report(bob)
    bob_dir = node.assignment(bob)
    assert bob_dir is not None
    until(lambda: "bob-log-secret" in (bob_dir / "stdout.log").read_text())
    url = node.http.get("/v1/nodes").json()["nodes"][0]["agent_url"]
    alice = node.submit("alice", FETCH, f"{url}/logs/{bob_dir.name}")
    try:
        d = until(lambda: node.assignment(alice))
        until(lambda: node.job(alice)["state"] in ("finished", "failed"))
        got = (d / "stdout.log").read_text()
        assert "bob-log-secret" not in got
        assert got.startswith("401 no X-Gpupool-Signature header"), got  # refused, not merely missed
        # Through the server: bob reads his own log, alice gets a 404 for it (as for a job that is not there).
        path, tokens = f"/v1/jobs/{bob}/logs", node.tokens
        mine = node.http.get(path, headers={"Authorization": f"Bearer {tokens['bob']}"})
        assert mine.status_code == 200 and "bob-log-secret" in mine.json()["text"], mine.text
        assert node.http.get(path, headers={"Authorization": f"Bearer {tokens['alice']}"}).status_code == 404
    finally:
        node.cancel(bob)


DEVICES = """
import json, os, sys
out = {}
for name in ('nvidia0', 'nvidia1', 'nvidiactl'):
    try:
        os.close(os.open(os.path.join(sys.argv[1], name), os.O_WRONLY)); out[name] = 'ok'
    except OSError as e:
        out[name] = e.strerror
print(json.dumps(out), flush=True)
"""


def test_a_job_opens_only_its_own_gpus_device_node(node: Node) -> None:
    job = node.submit("alice", DEVICES, str(node.place / "dev"))
    got = node.report(job)
    d = node.assignment(job)
    assert d is not None
    (gpu,) = json.loads((d / "assignment.json").read_text())["gpus"]
    want = {f"nvidia{g}": "ok" if g == gpu else "Operation not permitted" for g in (0, 1)}
    assert got == {**want, "nvidiactl": "ok"}
    assert "Operation not permitted" in got.values()


HOG = "import time\nprint('{}', flush=True)\nx = bytearray(400 << 20)\nprint('survived', flush=True)\ntime.sleep(60)\n"


def test_going_over_its_memory_limit_kills_only_that_job(node: Node) -> None:
    calm = node.submit("bob", "import time\nprint('{}', flush=True)\ntime.sleep(300)\n", memory_mib=64)
    node.report(calm)
    hog = node.submit("alice", HOG, memory_mib=64)
    until(lambda: node.job(hog)["state"] == "failed", what="the hog failed")
    assert node.job(hog)["reason"].endswith("exited with -9: killed by the kernel: over its memory limit of 64 MiB")
    assert node.job(calm)["state"] == "running" and node.agent.poll() is None
    node.cancel(calm)


ESCAPER = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
a = subprocess.Popen([sys.executable, '-c', code], start_new_session=True)
r, w = os.pipe()
if os.fork() == 0:
    b = subprocess.Popen([sys.executable, '-c', code], start_new_session=True)
    os.write(w, str(b.pid).encode()); os._exit(0)
os.wait()
print('{"escapers": [%d, %s]}' % (a.pid, os.read(r, 32).decode()), flush=True)
time.sleep(300)
"""


def test_cancelling_a_job_kills_every_process_it_forked_even_one_that_called_setsid(node: Node) -> None:
    job = node.submit("alice", ESCAPER)
    escapers = node.report(job)["escapers"]
    assert all(os.getsid(p) == p for p in escapers)  # each leads a session of its own
    node.cancel(job)

    def gone(pid: int) -> bool:
        st = process_start_ticks(pid)
        return st is None or st[1] == "Z"

    until(lambda: all(gone(p) for p in escapers), 15, "every escaper killed")


def test_a_tenant_with_no_user_on_the_node_gets_a_failed_job_with_the_reason(node: Node) -> None:
    tenant = f"t{secrets.token_hex(4)}"
    assert node.http.post("/v1/tenants", json={"name": tenant}).status_code == 201
    node.tokens[tenant] = node.http.post("/v1/tokens", json={"tenant": tenant}).json()["token"]
    job = node.submit(tenant, "print('never')")
    until(lambda: node.job(job)["state"] == "failed", what="failed")
    reason = node.job(job)["reason"]
    assert f"no Unix user 'gpupool-{tenant}' for tenant '{tenant}' on this node" in reason, reason
    assert node.agent.poll() is None
