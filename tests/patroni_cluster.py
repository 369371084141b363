"""A PostgreSQL high-availability cluster of real processes on loopback, from the recipe in ``deploy/patroni``:
one etcd (Debian ``etcd-server``) and three PostgreSQL 15 members under Patroni (Debian ``patroni``), each with
its own data directory and free ports, synchronous replication. The test of the recipe
(``tests/ha/test_patroni_failover.py``) and its benchmark (``benchmarks/patroni_failover.py``) build on it.

The configuration files are the recipe's own templates with their ``${...}`` filled in, so what is tested is
what the docs tell an operator to install. As root (CI) the members run as the ``postgres`` user, which
PostgreSQL requires; their directories sit in a fresh folder under the system's temporary directory, which
that user can enter (a test's ``tmp_path`` is private to root).

Faults: ``switchover`` (Patroni's planned hand-over to the synchronous standby, through its REST API) and
``kill9`` (the member's Patroni, its postmaster and every backend killed at once: the machine crashed).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any

import httpx
import psycopg

from ledger import Ledger, longest_silence, paced
from procs import free_port, until

RECIPE = Path(__file__).resolve().parents[1] / "deploy" / "patroni"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
HOST = "127.0.0.1"


def missing() -> str | None:
    """Why the cluster cannot run on this machine (a test skips with it), or None."""
    for tool in ("etcd", "patroni"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: etcd-server, patroni; .ci/run installs them)"
    if not (PG_BIN / "postgres").exists():
        return f"PostgreSQL 15 is not at {PG_BIN} (Debian: postgresql-15)"
    return None


@dataclass
class Member:
    name: str
    pg_port: int
    rest_port: int
    state_dir: Path
    config: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    killed: bool = False

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def rest(self) -> str:
        return f"http://{HOST}:{self.rest_port}"

    def postgres_pids(self) -> list[int]:
        """The postmaster (from its pid file) and its children; empty when none runs."""
        try:
            postmaster = int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return []
        pids = [postmaster]
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                if int(stat.read_text().rpartition(")")[2].split()[1]) == postmaster:
                    pids.append(int(stat.parent.name))
        return pids


@dataclass
class PatroniCluster:
    """``start()`` it, ``url()`` is what gpupool servers connect to, ``close()`` always."""

    members: int = 3
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpupool-patroni-")))
    scope: str = field(default_factory=lambda: f"gpupool-{secrets.token_hex(3)}")
    password: str = field(default_factory=lambda: secrets.token_hex(12))  # the gpupool role's
    nodes: list[Member] = field(default_factory=list)
    etcd: subprocess.Popen[bytes] | None = None
    started_s: float = 0.0  # seconds from start() until every member ran and a standby was synchronous

    def __post_init__(self) -> None:
        self._secrets = {k: secrets.token_hex(12) for k in ("SUPERUSER", "REPLICATION", "REWIND")}
        self._user = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        self.root.chmod(0o755)
        self.etcd_port = free_port()

    def start(self, timeout_s: float = 120) -> PatroniCluster:
        began = time.monotonic()
        self._start_etcd()
        for i in range(1, self.members + 1):
            self.nodes.append(self._member(f"pg{i}"))
        for m in self.nodes:
            self._launch(m)
        until(self.healthy, timeout_s, "a primary and a synchronous standby, every member running")
        self._create_gpupool_database()
        self.started_s = time.monotonic() - began
        return self

    # -- set-up -------------------------------------------------------------------------------------------------

    def _start_etcd(self) -> None:
        peer = free_port()
        values = {
            "ETCD_NAME": "etcd1",
            "ETCD_DATA_DIR": str(self.root / "etcd"),
            "ETCD_HOST": HOST,
            "ETCD_CLIENT_PORT": str(self.etcd_port),
            "ETCD_PEER_PORT": str(peer),
            "ETCD_INITIAL_CLUSTER": f"etcd1=http://{HOST}:{peer}",
            "ETCD_CLUSTER_TOKEN": self.scope,
        }
        config = self.root / "etcd.yml"
        config.write_text(Template((RECIPE / "etcd.yml").read_text()).substitute(values))
        log = (self.root / "etcd.log").open("ab")
        self.etcd = subprocess.Popen(["etcd", "--config-file", str(config)], stdout=log, stderr=subprocess.STDOUT)
        until(self._etcd_healthy, 30, "etcd answers /health")

    def _etcd_healthy(self) -> bool:
        assert self.etcd is not None
        if self.etcd.poll() is not None:
            raise AssertionError(f"etcd exited: {(self.root / 'etcd.log').read_text()[-2000:]}")
        try:
            return httpx.get(f"http://{HOST}:{self.etcd_port}/health", timeout=2).json().get("health") == "true"
        except (httpx.HTTPError, ValueError):
            return False

    def _member(self, name: str) -> Member:
        state = self.root / name
        state.mkdir(mode=0o700)
        m = Member(name, free_port(), free_port(), state, state / "patroni.yml", self.root / f"{name}.log")
        values = {
            "SCOPE": self.scope,
            "NAME": name,
            "HOST": HOST,
            "REST_PORT": str(m.rest_port),
            "PG_PORT": str(m.pg_port),
            "ETCD_HOSTS": f"{HOST}:{self.etcd_port}",
            "DATA_DIR": str(m.data_dir),
            "STATE_DIR": str(state),
            "CLIENT_NET": f"{HOST}/32",
            "REPLICATION_USER": "replicator",
            "SUPERUSER_PASSWORD": self._secrets["SUPERUSER"],
            "REPLICATION_PASSWORD": self._secrets["REPLICATION"],
            "REWIND_PASSWORD": self._secrets["REWIND"],
        }
        m.config.write_text(Template((RECIPE / "patroni.yml").read_text()).substitute(values))
        if self._user is not None:
            for path in (state, m.config):
                os.chown(path, self._user.pw_uid, self._user.pw_gid)
        return m

    def _launch(self, m: Member) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        log = m.log.open("ab")
        kw: dict[str, Any] = {}
        if self._user is not None:
            kw = {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}
            env["HOME"] = str(m.state_dir)
        m.proc = subprocess.Popen(
            ["patroni", str(m.config)], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **kw
        )
        m.killed = False

    def _create_gpupool_database(self) -> None:
        with psycopg.connect(self._superuser_dsn("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE gpupool LOGIN PASSWORD '{self.password}'")
            conn.execute("CREATE DATABASE gpupool OWNER gpupool")

    def _superuser_dsn(self, database: str) -> str:
        hosts = ",".join(HOST for _ in self.nodes)
        ports = ",".join(str(m.pg_port) for m in self.nodes)
        return (
            f"host={hosts} port={ports} dbname={database} user=postgres password={self._secrets['SUPERUSER']} "
            "target_session_attrs=read-write connect_timeout=3"
        )

    # -- what gpupool is given ------------------------------------------------------------------------------

    def url(self) -> str:
        """The gpupool servers' database URL: every member, libpq keeps the one that takes writes."""
        hosts = ",".join(f"{HOST}:{m.pg_port}" for m in self.nodes)
        return f"postgresql+psycopg://gpupool:{self.password}@{hosts}/gpupool?target_session_attrs=read-write"

    def connect(self) -> psycopg.Connection[Any]:
        """A superuser session on the primary, in the gpupool database (checks read the jobs through it)."""
        return psycopg.connect(self._superuser_dsn("gpupool"), autocommit=True)

    # -- state ----------------------------------------------------------------------------------------------

    def cluster(self) -> list[dict[str, Any]]:
        """Patroni's view of the members (its /cluster), from the first live member that answers; [] if none."""
        for m in self.nodes:
            if m.killed:
                continue
            with contextlib.suppress(httpx.HTTPError, ValueError):
                return list(httpx.get(f"{m.rest}/cluster", timeout=2).json()["members"])
        return []

    def role(self, role: str) -> str | None:
        return next((m["name"] for m in self.cluster() if m.get("role") == role), None)

    def primary(self) -> str | None:
        return self.role("leader")

    def healthy(self) -> bool:
        """A primary, a synchronous standby, and every member not killed running."""
        for m in self.nodes:
            if m.proc is not None and m.proc.poll() is not None and not m.killed:
                raise AssertionError(f"patroni {m.name} exited: {m.log.read_text()[-3000:]}")
        live = {m.name for m in self.nodes if not m.killed}
        members = {m["name"]: m for m in self.cluster()}
        if set(members) < live or not all(members[n].get("state") in ("running", "streaming") for n in live):
            return False
        roles = [members[n].get("role") for n in live]
        return "leader" in roles and ("sync_standby" in roles or len(live) == 1)

    def member(self, name: str) -> Member:
        return next(m for m in self.nodes if m.name == name)

    # -- faults ---------------------------------------------------------------------------------------------

    def switchover(self) -> tuple[str, str]:
        """Patroni's planned switchover from the primary to its synchronous standby: (from, to)."""
        leader, candidate = self.primary(), self.role("sync_standby")
        assert leader is not None and candidate is not None, self.cluster()
        r = httpx.post(
            f"{self.member(leader).rest}/switchover", json={"leader": leader, "candidate": candidate}, timeout=30
        )
        assert r.status_code == 200, r.text
        return leader, candidate

    def kill9(self, name: str) -> None:
        """The member's machine crashes: its Patroni, postmaster and backends all get SIGKILL at once."""
        m = self.member(name)
        assert m.proc is not None
        pids = [m.proc.pid, *m.postgres_pids()]
        m.killed = True
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        m.proc.wait(10)

    def new_primary_after(self, old: str, timeout_s: float = 60) -> str:
        got = until(lambda: (p := self.primary()) not in (None, old) and p, timeout_s, f"a primary other than {old}")
        return str(got)

    def close(self) -> None:
        """Everything killed at once: the data is thrown away, so no member needs a clean shutdown (a primary's
        takes seconds, waiting for its standbys)."""
        for m in self.nodes:
            if m.proc is not None and m.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(m.proc.pid, signal.SIGKILL)
            for pid in m.postgres_pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if m.proc is not None:
                m.proc.wait(10)
        if self.etcd is not None and self.etcd.poll() is None:
            self.etcd.kill()
            self.etcd.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)

    def logs(self) -> str:
        """The tail of every log, for a failing assertion's message."""
        out = []
        for log in sorted(self.root.glob("*.log")):
            out.append(f"--- {log.name}\n{log.read_text(errors='replace')[-2500:]}")
        return "\n".join(out)


@dataclass
class Fault:
    kind: str  # "switchover" or "kill9": of the primary
    after_acks: int  # injected once this many submissions are acknowledged
    moved: str = ""  # "pg1->pg2": the primary before and after
    at_s: float = 0.0  # monotonic
    outage_s: float = 0.0  # the longest time after it without an acknowledged submit


@dataclass
class BurstResult:
    ledger: Ledger
    faults: list[Fault]
    stored: dict[str, str]  # idempotency key -> job id, as the primary has them after the burst
    rows: int  # job rows in the database
    wall_s: float

    @property
    def lost(self) -> list[str]:
        return self.ledger.lost(self.stored)

    @property
    def duplicates(self) -> int:
        return self.rows - len(set(self.stored))


def failover_burst(
    cluster: PatroniCluster,
    bases: list[str],
    token: str,
    *,
    jobs: int,
    rate_per_s: float,
    workers: int,
    faults: list[Fault],
) -> BurstResult:
    """``jobs`` submissions at ``rate_per_s`` round-robin over the servers at ``bases`` while ``faults`` hit the
    primary in turn; each fault waits for the previous one to be over (submits acknowledged again, a
    synchronous standby in place). Returns what the clients were told and what the database holds."""
    ledger = Ledger()
    stop = threading.Event()
    clients = [httpx.Client(base_url=b, headers={"Authorization": f"Bearer {token}"}, timeout=30) for b in bases]
    began = time.monotonic()

    def work(i: int) -> None:
        body = {"command": ["true"], "gpus_per_task": 1, "name": f"burst-{i}"}
        ledger.submit(clients[i % len(clients)], f"burst-{i}", body, give_up_s=120, stop=stop)

    failed: list[BaseException] = []

    def inject() -> None:
        try:
            inject_all()
        except BaseException as e:  # the test fails with it, after the submitters are stopped
            failed.append(e)
            stop.set()

    def inject_all() -> None:
        for f in faults:
            until(lambda f=f: len(ledger.acked) >= f.after_acks, 300, f"{f.after_acks} acknowledged submits")
            until(cluster.healthy, 120, "a primary with a synchronous standby before the fault")
            old = cluster.primary()
            assert old is not None
            f.at_s = time.monotonic()
            if f.kind == "switchover":
                cluster.switchover()
            else:
                cluster.kill9(old)
            f.moved = f"{old}->{cluster.new_primary_after(old)}"
            until(lambda f=f: any(t > f.at_s for t in ledger.ack_times()), 120, f"a submit acknowledged after {f.kind}")

    injector = threading.Thread(target=inject, daemon=True)
    injector.start()
    try:
        paced(rate_per_s, jobs, workers, work, stop)
        injector.join(300)
    finally:
        stop.set()
        for c in clients:
            c.close()
    if failed:
        raise failed[0]
    wall = time.monotonic() - began
    for k, f in enumerate(faults):
        end = faults[k + 1].at_s if k + 1 < len(faults) else time.monotonic()
        f.outage_s = longest_silence(ledger.ack_times(), f.at_s, end)
    with cluster.connect() as conn:
        rows = conn.execute("SELECT idempotency_key, id FROM jobs").fetchall()
    return BurstResult(ledger, faults, {str(k): str(v) for k, v in rows}, len(rows), wall)
