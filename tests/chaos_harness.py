"""The chaos harness: real server and agent processes, a seeded schedule of faults, invariants checked all along.

Two ``gpupool server`` replicas share a PostgreSQL schema behind a round-robin ``TcpProxy``; four emulated
agents (``e2e_cluster.Cluster``, one SU's first hosts, 32 GPUs) reach them only through the proxy, and so do
the clients, which submit a stream of jobs for two tenants with quotas (single-GPU jobs, whole nodes and
2x8 gangs whose ranks end at different times), retrying with their Idempotency-Key (``ledger.Ledger``).

Faults, drawn from ``numpy.random.default_rng(seed)`` with the gaps between them and their targets (the leader or the
standby, which host):

- ``kill9_server``: SIGKILL of a replica (the leader more often than not), restarted a moment later;
- ``kill9_agent``: SIGKILL of an agent, restarted on its state directory (it reattaches its workloads);
- ``sigstop_leader``: the leader paused (SIGSTOP) for 25 s, then woken (SIGCONT);
- ``cut``: the proxy drops every open connection between agents or clients and the servers;
- ``gang_restart``: a gang with one rank exited and the other still running sees both replicas killed and
  restarted (its second rank ends after the restart).

The stream also cancels a running job now and then; a third of the jobs ignore SIGTERM, so a cancelled one
lives on until the agent's SIGKILL and its GPUs must stay held until then.

Invariants, checked every half second from the database and the agents' launch records:

- ``lost``: every acknowledged job is stored, under the id it was acknowledged with;
- ``gpu_twice``: no (host, GPU) is used by two live processes at once (launch.json's pid and start time,
  assignment.json's GPUs), and the stored allocations never give one GPU more than 1000 milli;
- ``quota``: a tenant's placed and running jobs never hold more GPUs than its quota;
- ``two_leaders``: the lease token of every stored placement (``job.placed`` audit events, in commit order)
  never goes down: once a newer leader placed, an older leader's placement was never accepted;
- at the end, ``stuck``: every job reaches a terminal state and every GPU is free again.

Leader takeover is timed from the fault (kill or pause of the leader) to the other replica's /healthz saying
it leads.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg
from sqlalchemy.engine import make_url

from e2e_cluster import ADMIN, HOSTS, Cluster
from gpupool.agent.runtime import process_start_ticks
from isolation_support import python_for_others
from ledger import Ledger, percentile
from procs import until

KINDS = ("kill9_server", "kill9_agent", "sigstop_leader", "cut", "gang_restart")
WEIGHTS = {"kill9_server": 3, "kill9_agent": 3, "sigstop_leader": 1, "cut": 3, "gang_restart": 1}
PAUSE_S = 25.0
QUOTAS = {"acme": 24, "beta": 16}  # whole GPUs in pool default; 40 > the 32 there are, so the two contend
TERMINAL = frozenset({"finished", "failed", "cancelled"})


def workload(seconds_by_rank: list[float], stubborn: bool = False) -> str:
    """A job whose rank r sleeps seconds_by_rank[r] (the last entry for higher ranks), then exits 0. A
    ``stubborn`` one ignores SIGTERM: stopped, it lives on until the agent's SIGKILL (``stop_grace_s``)."""
    ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if stubborn else ""
    pick = "d[min(int(os.environ.get('RANK', '0')), len(d) - 1)]"
    return f"import os, signal, time\n{ignore}d = {seconds_by_rank!r}\ntime.sleep({pick})\n"


@dataclass
class Injected:
    kind: str
    target: str
    at_s: float  # since the run began
    takeover_s: float | None = None  # kill or pause of the leader: until the other replica led
    note: str = ""


@dataclass
class Violation:
    at_s: float
    invariant: str
    detail: str


@dataclass
class Report:
    seed: int
    faults: list[Injected]
    violations: list[Violation]
    jobs: Counter[str]  # final state -> count
    gangs: Counter[str]
    acked: int
    wall_s: float
    drained_s: float | None
    states: dict[str, str] = field(default_factory=dict)  # job id -> its final state
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        takeovers = sorted(f.takeover_s for f in self.faults if f.takeover_s is not None)
        paused = sorted(f.takeover_s for f in self.faults if f.kind == "sigstop_leader" and f.takeover_s)
        return {
            "seed": self.seed,
            "faults": len(self.faults),
            "by_kind": dict(Counter(f.kind for f in self.faults)),
            "violations": len(self.violations),
            "violations_by_invariant": dict(Counter(v.invariant for v in self.violations)),
            "takeovers": len(takeovers),
            "takeover_p50_s": round(percentile(takeovers, 0.5), 2) if takeovers else None,
            "takeover_p99_s": round(percentile(takeovers, 0.99), 2) if takeovers else None,
            "takeover_max_s": round(max(takeovers), 2) if takeovers else None,
            "paused_takeover_max_s": round(max(paused), 2) if paused else None,
            "acked": self.acked,
            "jobs": dict(self.jobs),
            "gangs": dict(self.gangs),
            "drained_s": None if self.drained_s is None else round(self.drained_s, 1),
            "wall_s": round(self.wall_s, 1),
            **self.extra,
        }


class Chaos:
    def __init__(self, root: Path, database_url: str, seed: int, *, job_every_s: float = 1.0) -> None:
        self.seed = seed
        self.rng = np.random.default_rng(seed)  # the fault schedule
        self.jobs_rng = np.random.default_rng(seed + 1)  # the job stream, apart so it does not shift the faults
        self.job_every_s = job_every_s
        self.libpq = make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)
        self.c = Cluster(
            root,
            replicas=2,
            GPUPOOL_DATABASE_URL=database_url,
            GPUPOOL_NODE_LOST_AFTER_S="10",  # a paused leader's held beats and agent back-offs stay well inside
            GPUPOOL_LEADER_RETRY_S="0.5",
            GPUPOOL_LOG_LEVEL="warning",
        )
        self.began = time.monotonic()
        self.ledger = Ledger()
        self.faults: list[Injected] = []
        self.violations: list[Violation] = []
        self.gangs: set[str] = set()
        self.cancelled: set[str] = set()  # job ids the stream cancelled (while they ran)
        self.protected: set[str] = set()  # fault targets whose end the run checks: the stream never cancels them
        self._stop = threading.Event()
        self._submitting = threading.Event()
        self._audit_after = 0
        self._last_token = 0
        self._threads: list[threading.Thread] = []
        self.checks = 0
        self._unsettled_noted = 0.0
        self.peak_live_gpus = 0

    # -- set-up ---------------------------------------------------------------------------------------------
    def start(self) -> Chaos:
        for host in HOSTS:
            self.c.start_agent(host)
        until(self._nodes_up, 120, "every agent's node up")
        h = {"Authorization": f"Bearer {ADMIN}"}
        with httpx.Client(base_url=self.c.url, headers=h, timeout=10) as admin:
            assert admin.post("/v1/tenants", json={"name": "beta"}).status_code == 201
            self.tokens = {}
            for tenant, gpus in QUOTAS.items():
                r = admin.put(f"/v1/tenants/{tenant}/quotas", json={"pool": "default", "nominal_gpus": gpus})
                assert r.status_code == 200, r.text
                self.tokens[tenant] = admin.post("/v1/tokens", json={"tenant": tenant}).json()["token"]
        for target in (self._submit_forever, self._check_forever):
            t = threading.Thread(target=target, daemon=True)
            t.start()
            self._threads.append(t)
        self._submitting.set()
        return self

    def now(self) -> float:
        return time.monotonic() - self.began

    # -- the job stream -------------------------------------------------------------------------------------
    def _submit_forever(self) -> None:
        clients = {
            t: httpx.Client(base_url=self.c.url, headers={"Authorization": f"Bearer {tok}"}, timeout=10)
            for t, tok in self.tokens.items()
        }
        try:
            self._stream(clients)
        except Exception as e:  # a stream that stopped would leave the faults nothing to break
            self._violate("submitter", repr(e))
        finally:
            for c in clients.values():
                c.close()

    def _stream(self, clients: dict[str, httpx.Client]) -> None:
        n = 0
        while not self._stop.is_set():
            self._stop.wait(self.job_every_s)  # the stream's pace
            if not self._submitting.is_set() or self._open_jobs() > 12:
                continue  # a bounded queue: the run is about faults, not backlog
            n += 1
            tenant = "acme" if n % 3 else "beta"
            kind = str(self.jobs_rng.choice(["small", "small", "node", "gang"]))
            tasks, gpus, runs = {
                "small": (1, int(self.jobs_rng.choice([1, 2, 4])), [float(self.jobs_rng.uniform(1, 4))]),
                "node": (1, 8, [float(self.jobs_rng.uniform(2, 5))]),
                "gang": (2, 8, [float(self.jobs_rng.uniform(0.5, 2)), float(self.jobs_rng.uniform(3, 6))]),
            }[kind]
            key = f"chaos-{self.seed}-{n}"
            stubborn = self.jobs_rng.random() < 0.3
            body = self._body(tasks, gpus, runs, f"{kind}-{n}", stubborn)
            if kind == "gang":
                self.gangs.add(key)
            self.ledger.submit(clients[tenant], key, body, give_up_s=300, stop=self._stop)
            if self.jobs_rng.random() < 0.15:
                self._cancel_one(clients)

    def _cancel_one(self, clients: dict[str, httpx.Client]) -> None:
        """Cancel a running job (its GPUs must not be handed over before its processes are gone)."""
        with self.connect() as conn:
            running = conn.execute("SELECT id, tenant FROM jobs WHERE state = 'running' ORDER BY id").fetchall()
        running = [(j, t) for j, t in running if str(j) not in self.protected]
        if not running:
            return
        job_id, tenant = running[int(self.jobs_rng.integers(len(running)))]
        try:
            r = clients[tenant].post(f"/v1/jobs/{job_id}/cancel")
        except httpx.HTTPError:
            return  # the fault of the moment; the job runs on
        if r.status_code == 200:
            self.cancelled.add(str(job_id))

    @staticmethod
    def _body(tasks: int, gpus: int, runs: list[float], name: str, stubborn: bool = False) -> dict[str, Any]:
        code = workload([round(r, 2) for r in runs], stubborn)
        return {"command": [python_for_others(), "-c", code], "tasks": tasks, "gpus_per_task": gpus, "name": name}

    def _open_jobs(self) -> int:
        with self.connect() as conn:
            row = conn.execute("SELECT count(*) FROM jobs WHERE state NOT IN ('finished','failed','cancelled')")
            return int(row.fetchone()[0])  # type: ignore[index]

    # -- invariants -----------------------------------------------------------------------------------------
    def connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.libpq, autocommit=True, connect_timeout=5)

    def _check_forever(self) -> None:
        while not self._stop.is_set():
            try:
                self.check()
            except psycopg.Error as e:  # the test's own read failed: not the system's fault, tried again
                self._note(f"check skipped: {e}")
            except Exception as e:  # a checker that stopped looking would pass every run: fail this one
                self._violate("checker", repr(e))
            self._stop.wait(0.5)  # the checker's period

    def _note(self, what: str) -> None:
        with contextlib.suppress(OSError), (self.c.root / "chaos.log").open("a") as f:
            f.write(f"{self.now():8.2f} {what}\n")

    def _violate(self, invariant: str, detail: str) -> None:
        self.violations.append(Violation(round(self.now(), 2), invariant, detail))
        self._note(f"VIOLATION {invariant}: {detail}")

    def check(self) -> None:
        """One look at every invariant; each breach found is recorded as a Violation."""
        with self.ledger.lock:  # before the read: a job acknowledged after it began may not be in it yet
            acked = {k: a.job_id for k, a in self.ledger.acked.items()}
        live = self._live_gpus()
        with self.connect() as conn:
            jobs = conn.execute("SELECT idempotency_key, id, tenant, state FROM jobs").fetchall()
            allocs = conn.execute(
                "SELECT a.job_id, a.host, a.gpus, a.milli_gpu, a.releasing_s, j.state, j.tenant "
                "FROM allocations a JOIN jobs j ON j.id = a.job_id"
            ).fetchall()
            placed = conn.execute(
                "SELECT id, data FROM audit_events WHERE action = 'job.placed' AND id > %s ORDER BY id",
                [self._audit_after],
            ).fetchall()
        self.checks += 1
        stored = {str(k): str(i) for k, i, _, _ in jobs if k is not None}
        for key, job_id in acked.items():
            if stored.get(key) != job_id:
                self._violate("lost", f"acknowledged {key} ({job_id}) is not stored as such: {stored.get(key)}")
        milli: dict[tuple[str, int], int] = defaultdict(int)
        held: dict[str, float] = defaultdict(float)
        holders: dict[str, list[str]] = defaultdict(list)  # tenant -> "job state host:gpus", for a breach's detail
        for job, host, gpus, m, releasing, state, tenant in allocs:
            for g in json.loads(gpus):
                milli[(host, g)] += m
                if releasing is None and state in ("placed", "running"):
                    held[tenant] += m / 1000
            if releasing is None and state in ("placed", "running"):
                holders[tenant].append(f"{job} {state} {host}:{gpus}")
        for (host, g), m in milli.items():
            if m > 1000:
                self._violate("gpu_twice", f"stored allocations give {m} milli of GPU {g} of {host}")
        for tenant, gpus in held.items():
            if gpus > QUOTAS.get(tenant, float("inf")) + 1e-9:
                held_by = "; ".join(sorted(holders[tenant]))
                self._violate("quota", f"{tenant} holds {gpus:g} GPUs, its quota is {QUOTAS[tenant]}: {held_by}")
        for (host, g), users in live.items():
            if len(users) > 1:
                self._violate("gpu_twice", f"GPU {g} of {host} used by live processes of {sorted(users)}")
        self.peak_live_gpus = max(self.peak_live_gpus, len(live))
        for audit_id, data in placed:
            token = json.loads(data).get("leader_token")
            if token is not None and token < self._last_token:
                self._violate("two_leaders", f"placement {audit_id} under token {token} after token {self._last_token}")
            self._last_token = max(self._last_token, token or 0)
            self._audit_after = audit_id

    def _live_gpus(self) -> dict[tuple[str, int], set[str]]:
        """(host, GPU) -> the assignments whose process is alive on it now, from the agents' own records."""
        out: dict[tuple[str, int], set[str]] = defaultdict(set)
        for host in HOSTS:
            for d in (self.c.root / host / "workloads").glob("*"):
                try:
                    launch = json.loads((d / "launch.json").read_text())
                    gpus = json.loads((d / "assignment.json").read_text())["gpus"]
                except (OSError, ValueError, KeyError):
                    continue  # not launched yet, or being written
                now = process_start_ticks(int(launch["pid"]))
                if now is not None and now[0] == launch["start_ticks"] and now[1] not in ("Z", "X"):
                    for g in gpus:
                        out[(host, int(g))].add(d.name)
        return out

    # -- the cluster's state --------------------------------------------------------------------------------
    def _nodes_up(self) -> bool:
        try:
            with self.connect() as conn:
                rows = conn.execute("SELECT name, state FROM nodes").fetchall()
        except psycopg.Error:
            return False
        return {n for n, s in rows if s == "up"} >= set(HOSTS)

    def health(self, i: int) -> dict[str, Any] | None:
        try:
            r = httpx.get(f"{self.c.server_urls[i]}/healthz", timeout=1.0)
        except httpx.HTTPError:
            return None
        return dict(r.json()) if r.status_code in (200, 503) else None

    def leader(self) -> int | None:
        got = [i for i in range(len(self.c.servers)) if (h := self.health(i)) is not None and h.get("leader")]
        return got[0] if len(got) == 1 else None

    def one_leader(self) -> int:
        """The leader, waited for: on a loaded machine a lease can lapse between ``settled`` and the fault, and
        a replica leads again within a lease's length."""
        return int(until(lambda: (lead := self.leader()) is not None and (lead,), 60, "one leader")[0])

    def settled(self, standby: bool = True, nodes: bool = True) -> bool:
        """One replica leads; with ``standby`` the other answers too (a fault on the leader needs one to take
        over), with ``nodes`` every node is up. A replica or an agent still starting after its kill holds up
        only the faults that need it."""
        for i, p in enumerate(self.c.servers):
            if p.poll() is not None:
                raise AssertionError(f"replica {i} exited with {p.returncode}")
        for host, p in self.c.agents.items():
            if p.poll() is not None:
                raise AssertionError(f"the agent of {host} exited with {p.returncode}")
        health = [self.health(i) for i in range(len(self.c.servers))]
        leaders = sum(1 for h in health if h is not None and h.get("leader"))
        up = all(h is not None for h in health) or not standby
        ok = up and leaders == 1 and (not nodes or self._nodes_up())
        if not ok and self.now() - self._unsettled_noted > 2:
            self._unsettled_noted = self.now()
            self._note(f"not settled: health {health}, nodes up {self._nodes_up()}")
        return ok

    def _takeover(self, old: int, timeout_s: float = 30.0) -> float | None:
        """Seconds from now until a replica other than ``old`` leads; None if none did within ``timeout_s``."""
        start = time.monotonic()
        others = [i for i in range(len(self.c.servers)) if i != old]
        while time.monotonic() - start < timeout_s:
            if any((h := self.health(i)) is not None and h.get("leader") for i in others):
                return time.monotonic() - start
            self._stop.wait(0.1)  # polling /healthz, bounded by timeout_s
        return None

    # -- faults ---------------------------------------------------------------------------------------------
    def inject(self, kind: str) -> Injected:
        standby = kind in ("kill9_server", "sigstop_leader")
        nodes = kind == "gang_restart"  # its gang needs two whole nodes
        until(
            lambda: self.settled(standby, nodes), 180, f"ready for {kind}: one leader, standby {standby}, nodes {nodes}"
        )
        fault = getattr(self, f"_{kind}")()
        self.faults.append(fault)
        self._note(f"fault {fault}")
        if kind in ("kill9_server", "sigstop_leader") and fault.target == "leader" and fault.takeover_s is None:
            self._violate("no_takeover", f"{kind}: no other replica led within 30 s")
        return fault

    def _kill9_server(self) -> Injected:
        lead = self.one_leader()
        target = lead if self.rng.random() < 0.6 else 1 - lead
        fault = Injected("kill9_server", "leader" if target == lead else "standby", self.now())
        self.c.servers[target].send_signal(signal.SIGKILL)
        self.c.servers[target].wait(10)
        if target == lead:
            fault.takeover_s = self._takeover(target)
        self._stop.wait(self.rng.uniform(0.5, 3))  # down a while before it is restarted
        self.c.restart(target, wait=False)
        return fault

    def _kill9_agent(self) -> Injected:
        host = str(self.rng.choice(list(HOSTS)))
        fault = Injected("kill9_agent", host, self.now())
        self.c.agents[host].send_signal(signal.SIGKILL)
        self.c.agents[host].wait(10)
        self._stop.wait(self.rng.uniform(0.5, 4))  # down a while before it is restarted
        self.c.start_agent(host)
        return fault

    def _sigstop_leader(self) -> Injected:
        lead = self.one_leader()
        fault = Injected("sigstop_leader", "leader", self.now())
        p = self.c.servers[lead]
        p.send_signal(signal.SIGSTOP)
        try:
            fault.takeover_s = self._takeover(lead)
            self._stop.wait(max(0.0, PAUSE_S - (self.now() - fault.at_s)))  # the rest of its 25 s pause
        finally:
            p.send_signal(signal.SIGCONT)
        return fault

    def _cut(self) -> Injected:
        assert self.c.proxy is not None
        n = self.c.proxy.cut()
        return Injected("cut", "proxy", self.now(), note=f"{n} connections dropped")

    def _gang_restart(self) -> Injected:
        """A gang with one rank exited, the other running, when both replicas are killed and restarted."""
        key = f"chaos-{self.seed}-gang-restart-{len(self.faults)}"
        self.gangs.add(key)
        with httpx.Client(base_url=self.c.url, headers={"Authorization": f"Bearer {self.tokens['acme']}"}) as c:
            ack = self.ledger.submit(c, key, self._body(2, 8, [0.3, 8.0], key), give_up_s=60)
        assert ack is not None, f"the gang of {key} was not acknowledged"
        self.protected.add(str(ack.job_id))  # its end is the fault's outcome: the stream's cancels leave it alone
        fault = Injected("gang_restart", ack.job_id, self.now())

        def half_done() -> bool:
            with self.connect() as conn:
                rows = conn.execute(
                    "SELECT task_index, exited_s FROM allocations WHERE job_id = %s AND releasing_s IS NULL",
                    [ack.job_id],
                ).fetchall()
            return len(rows) == 2 and [e is not None for _, e in sorted(rows)] == [True, False]

        self._submitting.clear()  # no new work in its way: the gang needs two whole nodes
        try:
            until(half_done, 90, f"gang {ack.job_id}: rank 0 exited, rank 1 running")
        except AssertionError:
            fault.note = "the gang never had one rank exited and one running (not placed in time)"
            return fault
        finally:
            self._submitting.set()
        for p in self.c.servers:
            p.send_signal(signal.SIGKILL)
        for p in self.c.servers:
            p.wait(10)
        self._stop.wait(self.rng.uniform(0.5, 2))  # the control plane down a while
        for i in range(len(self.c.servers)):
            self.c.restart(i, wait=False)
        fault.note = "rank 0 exited before both replicas were killed; rank 1 ends after the restart"
        return fault

    # -- a run ----------------------------------------------------------------------------------------------
    def run(self, kinds: list[str] | None = None, faults: int = 0) -> None:
        """The faults ``kinds`` in that order, or ``faults`` faults drawn by the seed (WEIGHTS)."""
        weights = np.array(list(WEIGHTS.values()), dtype=float)
        drawn = self.rng.choice(list(WEIGHTS), size=faults, p=weights / weights.sum()) if faults else []
        schedule = kinds or [str(k) for k in drawn]
        for kind in schedule:
            self._stop.wait(self.rng.uniform(1.0, 4.0))  # the seeded gap before the next fault
            self.inject(kind)

    def finish(self, drain_s: float = 180.0) -> Report:
        """Stop submitting, let every job end, look once more, stop the checker; the run's report."""
        self._submitting.clear()
        until(lambda: self.settled(standby=False), 180, "one leader, every node up after the last fault")
        t0 = time.monotonic()
        drained: float | None = None
        while time.monotonic() - t0 < drain_s:
            if self._drained():
                drained = time.monotonic() - t0
                break
            self._stop.wait(0.5)  # polling the database, bounded by drain_s
        self._stop.set()
        for t in self._threads:
            t.join(30)
        self.check()
        with self.connect() as conn:
            final = conn.execute("SELECT idempotency_key, id, state FROM jobs").fetchall()
            open_jobs = conn.execute(
                "SELECT id, state, reason FROM jobs WHERE state NOT IN ('finished','failed','cancelled')"
            ).fetchall()
            allocs = conn.execute("SELECT job_id, host, gpus, releasing_s FROM allocations").fetchall()
        if open_jobs or allocs:
            self._violate("stuck", f"not terminal: {open_jobs[:10]}; GPUs still held: {allocs[:10]}")
        states = {str(k): str(st) for k, _, st in final}
        return Report(
            seed=self.seed,
            faults=self.faults,
            violations=self.violations,
            jobs=Counter(states.values()),
            gangs=Counter(states.get(k, "missing") for k in self.gangs),
            states={str(i): str(st) for _, i, st in final},
            acked=len(self.ledger.acked),
            wall_s=self.now(),
            drained_s=drained,
            extra={"checks": self.checks, "cancelled": len(self.cancelled), "clients_saw": dict(self.ledger.seen)},
        )

    def _drained(self) -> bool:
        with self.connect() as conn:
            left = conn.execute(
                "SELECT (SELECT count(*) FROM jobs WHERE state NOT IN ('finished','failed','cancelled')),"
                " (SELECT count(*) FROM allocations)"
            ).fetchone()
        return left is not None and left[0] == 0 and left[1] == 0

    def close(self) -> None:
        self._stop.set()
        for p in self.c.servers:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGCONT)  # a paused replica must be able to stop
        self.c.close()


def run_chaos(root: Path, database_url: str, seed: int, *, kinds: list[str] | None = None, faults: int = 0) -> Report:
    chaos = Chaos(root, database_url, seed)
    try:
        chaos.start()
        chaos.run(kinds=kinds, faults=faults)
        return chaos.finish()
    finally:
        chaos.close()
