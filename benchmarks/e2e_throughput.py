"""End to end: submit -> committed placement -> launch acknowledged, on a real ``gpupool server`` process with
``--nodes`` emulated 8-GPU nodes (default 1,000) driven over HTTP by ``--clients`` processes (no process per
node or per workload; ``e2e_nodes.py``), on SQLite or PostgreSQL (``--backend postgresql``: the URL in
GPUPOOL_TEST_POSTGRES_URL, in a fresh schema dropped after).

Setup: the server starts at its default settings (log level warning); a SuperPOD fabric (``superpod(32)``, 1,023
DGX H100 hosts, the first ``--nodes`` of them registered) is stored first, so placement follows the topology;
each client process registers its share of the nodes through ``/v1/agents/register``, then keeps each node's
commands long-poll open, acknowledges every launch with a report of ``running`` at once, reports ``exited 0``
after the job's duration and beats at the server's interval; a client process keeps as many keep-alive
connections for beats and reports as it has nodes (each agent has its own), with the agent's 5 s timeout.
Then a submitter process streams ``--rate`` jobs per second for ``--seconds`` as job arrays (the bulk submit:
one request per shape per 0.1 s), a mix of 1-GPU (70%), 8-GPU (20%), 2x8 (7%) and 4x8 (3%) jobs running
``--min/max-duration-s`` each, so capacity recycles.

One JSON line: placements committed per second while the stream ran (the server's
``gpupool_placements_total``), rank launches acknowledged and jobs launched (every rank acknowledged) per
second over the same window, p50/p99/max submit -> launched (the array request's send time to its job's last
rank acknowledged, both on this machine's clock), p50/p99 of a report's answer (running or exited: an ended
rank's GPUs are held until its report is stored), jobs never launched within ``--drain-s``, client errors and
timeouts, server and clients' CPU seconds and the server's peak resident memory (``/proc``), load average.
Stops by itself; only 127.0.0.1.

    .venv/bin/python benchmarks/e2e_throughput.py                                    # 1,000 nodes, 30 s at 1,000/s
    .venv/bin/python benchmarks/e2e_throughput.py --nodes 100 --rate 100 --seconds 20   # a quick look
    .venv/bin/python benchmarks/e2e_throughput.py --backend postgresql
    ... --profile   # and the server under cProfile (GPUPOOL_PROFILE_PATH): the top functions on stderr
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from gpupool.fabric import jsonio
from gpupool.fabric.generators import superpod
from procs import ADMIN, PG, ServerProc, cpu_s

HERE = Path(__file__).resolve().parent


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory so far (``VmHWM``), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def percentile(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3) if ordered else None


@contextmanager
def database(backend: str, tmp: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp}/gpupool.db"
        return
    import pytest

    schemas = _pg_schema()
    try:
        yield next(schemas)
    except pytest.skip.Exception as e:
        raise SystemExit(f"error: PostgreSQL at {PG} does not answer: {e}") from None
    finally:
        schemas.close()


def _pg_schema() -> Generator[str, None, None]:
    from procs import pg_schema

    yield from pg_schema()


def mark(what: str, began: float) -> None:
    print(f"{time.monotonic() - began:6.1f} s  {what}", file=sys.stderr, flush=True)


def scrape(base: str) -> dict[str, float]:
    """Placements so far, GPUs free, scheduling cycles and their seconds, from one /metrics scrape (it costs the
    server ~0.3 s of CPU at 1,000 hosts)."""
    # A server drowning in a backlog may take minutes to answer: waited for, not given up on.
    text = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=600).text
    names = {
        "gpupool_placements_total": "placed",
        "gpupool_schedule_cycle_seconds_count": "cycles",
        "gpupool_schedule_cycle_seconds_sum": "cycle_s",
    }
    out = dict.fromkeys(["placed", "free", "cycles", "cycle_s"], 0.0)
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in names:
            out[names[name]] = float(value)
        elif line.startswith("gpupool_gpus_free{"):
            out["free"] += float(line.rsplit(" ", 1)[1])
    return out


def wait_free(base: str, gpus: int, began: float, timeout_s: float = 600.0) -> None:
    """Until the loop counts ``gpus`` free GPUs (every node up, its first beat in), its progress on stderr."""
    deadline, seen = time.monotonic() + timeout_s, -1.0
    while (free := scrape(base)["free"]) < gpus:
        if free != seen:
            mark(f"{free:.0f} GPUs free", began)
            seen = free
        if time.monotonic() > deadline:
            raise TimeoutError(f"{free:.0f} of {gpus} GPUs free after {timeout_s:.0f} s")
        time.sleep(2.0)  # one /metrics scrape per 2 s while the fleet comes up, bounded by timeout_s


def setup(srv: ServerProc, hosts: int) -> tuple[str, str, list[str]]:
    """Fabric, tenant and tokens: (tenant token, join token, the hosts to register)."""
    fabric = superpod(32)
    h = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=srv.base, headers=h, timeout=120) as c:
        body = jsonio.dumps(fabric)
        c.put("/v1/fabric", content=body, headers={"Content-Type": "application/json"}).raise_for_status()
        c.post("/v1/tenants", json={"name": "bench"}).raise_for_status()
        token = str(c.post("/v1/tokens", json={"tenant": "bench"}).json()["token"])
        join = str(c.post("/v1/join-tokens", json={}).json()["token"])
    return token, join, [host.name for host in fabric.hosts[:hosts]]


def start_clients(srv: ServerProc, tmp: Path, join: str, hosts: list[str], clients: int) -> list[subprocess.Popen[str]]:
    procs = []
    for k in range(clients):
        names = tmp / f"hosts-{k}.txt"
        names.write_text("\n".join(hosts[k::clients]) + "\n")
        argv = [sys.executable, str(HERE / "e2e_nodes.py"), "nodes", "--port", str(srv.port), "--join", join]
        argv += ["--hosts", str(names), "--out", str(tmp / f"launches-{k}.jsonl")]
        procs.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"a client process did not register its nodes: {line!r}")
    return procs


def acked_so_far(tmp: Path, clients: int) -> int:
    total = 0
    for k in range(clients):
        with suppress(OSError, ValueError):
            total += int((tmp / f"launches-{k}.jsonl.progress").read_text() or 0)
    return total


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def analyse(tmp: Path, clients: int, window: tuple[float, float]) -> dict[str, Any]:
    """Per job: submit (its array's send time) -> launched (its last rank acknowledged)."""
    arrays = {a["array"]: a for a in read_jsonl(tmp / "arrays.jsonl")}
    ranks: dict[str, list[dict[str, Any]]] = {}
    for k in range(clients):
        for r in read_jsonl(tmp / f"launches-{k}.jsonl"):
            ranks.setdefault(r["job"], []).append(r)
    t0, t1 = window
    latencies, acks_in, jobs_in = [], 0, 0
    # A report's answer: "running" sent at the launch's receipt, "exited" at its end (the GPUs stay held till then)
    answers = [r["acked"] - r["received"] for rs in ranks.values() for r in rs if "acked" in r]
    answers += [r["end_acked"] - r["ended"] for rs in ranks.values() for r in rs if "end_acked" in r]
    for rs in ranks.values():
        acks_in += sum(1 for r in rs if t0 <= r.get("acked", 0) <= t1)
        if len(rs) < rs[0]["ranks"] or any("acked" not in r for r in rs) or rs[0]["array"] not in arrays:
            continue
        launched = max(r["acked"] for r in rs)
        jobs_in += t0 <= launched <= t1
        latencies.append(launched - arrays[rs[0]["array"]]["sent"])
    submitted = sum(a["jobs"] for a in arrays.values())
    seconds = t1 - t0
    return {
        "jobs_submitted": submitted,
        "jobs_launched": len(latencies),
        "jobs_not_launched": submitted - len(latencies),
        "rank_launches_acked_per_s": round(acks_in / seconds, 1),
        "jobs_launched_per_s": round(jobs_in / seconds, 1),
        "submit_to_launched_p50_s": percentile(latencies, 0.5),
        "submit_to_launched_p99_s": percentile(latencies, 0.99),
        "submit_to_launched_max_s": round(max(latencies), 3) if latencies else None,
        "submit_answer_p99_s": percentile([a["answered"] - a["sent"] for a in arrays.values()], 0.99),
        "report_answer_p50_s": percentile(answers, 0.5),
        "report_answer_p99_s": percentile(answers, 0.99),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    ap.add_argument("--nodes", type=int, default=1000, help="8-GPU nodes registered (at most 1,023)")
    ap.add_argument("--clients", type=int, default=4, help="processes emulating the nodes")
    ap.add_argument("--rate", type=float, default=1000.0, help="jobs submitted per second")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--min-duration-s", type=float, default=0.5)
    ap.add_argument("--max-duration-s", type=float, default=1.5)
    ap.add_argument("--drain-s", type=float, default=60.0, help="how long to wait for the last launches after")
    ap.add_argument("--keep-log", default="", help="copy the server's log here at the end")
    ap.add_argument("--keep-dir", default="", help="copy the run's whole directory here at the end")
    ap.add_argument("--profile", action="store_true", help="run the server under cProfile, print its top functions")
    ap.add_argument("--profile-out", default="", help="with --profile: the window's whole profile as JSON here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpupool-e2e-") as name:
        tmp = Path(name)
        with database(args.backend, tmp) as url:
            out = run(args, url, tmp)
    print(json.dumps(out))


def run(args: argparse.Namespace, url: str, tmp: Path) -> dict[str, Any]:
    env = {"GPUPOOL_LOG_LEVEL": "warning"}
    # The test harness's fast loop settings are not the server's defaults: back to the defaults.
    env |= {"GPUPOOL_SCHEDULE_PERIOD_S": "2.0", "GPUPOOL_LEADER_RETRY_S": "1.0", "GPUPOOL_NODE_LOST_AFTER_S": "30"}
    if args.profile:  # every server thread under cProfile (e2e_sampler/sitecustomize.py)
        env |= {"PYTHONPATH": str(HERE / "e2e_sampler"), "E2E_PROFILE_OUT": str(tmp / "profile.json")}
    began = time.monotonic()
    srv = ServerProc(url, tmp, tmp / "server.log", env=env, wait_s=300)
    clients: list[subprocess.Popen[str]] = []
    try:
        mark("server up", began)
        token, join, hosts = setup(srv, args.nodes)
        mark("fabric stored", began)
        clients = start_clients(srv, tmp, join, hosts, args.clients)
        mark("nodes registered", began)
        wait_free(srv.base, 8 * args.nodes, began)
        setup_s = time.monotonic() - began
        m0, cpu0, load0 = scrape(srv.base), cpu_s(srv.proc.pid), os.getloadavg()[0]
        prof0 = read_profile(tmp / "profile.json")
        mark("stream starts", began)  # a sampling profiler attached from outside starts here
        t0 = time.time()
        sub = submit(args, srv.port, token, tmp)
        t1 = time.time()
        m1, cpu1, load1 = scrape(srv.base), cpu_s(srv.proc.pid), os.getloadavg()[0]
        drained_s = drain(args, tmp)
        print(f"setup {setup_s:.0f} s, stream {t1 - t0:.0f} s, drain {drained_s:.0f} s", file=sys.stderr)
        m2, cpu2 = scrape(srv.base), cpu_s(srv.proc.pid)
        peak_mib = peak_rss_mib(srv.proc.pid)
        time.sleep(2.5 if args.profile else 0)  # the profile is written every 2 s
        prof1 = read_profile(tmp / "profile.json")
        summaries = stop_clients(clients)
    finally:
        for p in clients:
            if p.poll() is None:
                p.kill()
        srv.stop()
        if args.keep_log:
            shutil.copy(tmp / "server.log", args.keep_log)
        if args.keep_dir:  # the database (SQLite), the clients' launch records, the log: for a look afterwards
            shutil.copytree(tmp, args.keep_dir, dirs_exist_ok=True)
    if args.profile:
        print_profile(prof0, prof1, m2["placed"] - m0["placed"])
        if args.profile_out:  # function -> [calls, own CPU s, cumulative CPU s] at the window's start and end
            Path(args.profile_out).write_text(json.dumps({"before": prof0, "after": prof1}))
    return {
        "benchmark": "e2e_throughput",
        "backend": args.backend,
        "nodes": args.nodes,
        "gpus": 8 * args.nodes,
        "clients": args.clients,
        "rate": args.rate,
        "seconds": args.seconds,
        "submit_arrays": sub["arrays"],
        "submit_errors": sub["errors"],
        **analyse(tmp, args.clients, (t0, t1)),
        **server_counts(m0, m1, m2, t1 - t0),
        "drained_after_s": round(drained_s, 1),
        "client_errors": sum(s["errors"] for s in summaries),
        "client_timeouts": sum(s["timeouts"] for s in summaries),
        **{k: sum(s[k] for s in summaries) for k in ("polls", "beats", "reports")},
        "server_cpu_s": round(cpu1 - cpu0, 1),
        "server_cpu_total_s": round(cpu2 - cpu0, 1),
        "server_cpu_per_placement_ms": round(1000 * (cpu2 - cpu0) / max(1.0, m2["placed"] - m0["placed"]), 2),
        "clients_cpu_s": round(sum(s["cpu_s"] for s in summaries) + sub["cpu_s"], 1),
        "setup_s": round(setup_s, 1),
        "server_peak_rss_mib": peak_mib,
        "load_avg_1m": round(max(load0, load1), 2),
    }


def submit(args: argparse.Namespace, port: int, token: str, tmp: Path) -> dict[str, Any]:
    """The submitter process, run to its end: its summary (arrays sent, errors, CPU)."""
    argv = [sys.executable, str(HERE / "e2e_nodes.py"), "submit", "--port", str(port), "--token", token]
    argv += ["--rate", str(args.rate), "--seconds", str(args.seconds), "--out", str(tmp / "arrays.jsonl")]
    argv += ["--min-duration-s", str(args.min_duration_s), "--max-duration-s", str(args.max_duration_s)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def drain(args: argparse.Namespace, tmp: Path) -> float:
    """Until every submitted rank's launch is acknowledged, or ``--drain-s``: the seconds it took."""
    expected = sum(a["jobs"] * a["ranks"] for a in read_jsonl(tmp / "arrays.jsonl"))
    start = time.monotonic()
    while acked_so_far(tmp, args.clients) < expected and time.monotonic() - start < args.drain_s:
        time.sleep(0.5)  # polling the clients' progress files, bounded by --drain-s
    return time.monotonic() - start


def server_counts(m0: dict[str, float], m1: dict[str, float], m2: dict[str, float], stream_s: float) -> dict[str, Any]:
    """From the /metrics scrapes at the stream's start (m0), its end (m1) and the drain's end (m2)."""
    cycles = m2["cycles"] - m0["cycles"]
    return {
        "placements_per_s": round((m1["placed"] - m0["placed"]) / stream_s, 1),
        "placed_total": int(m2["placed"] - m0["placed"]),
        "cycles": int(cycles),  # the scheduling loop's, from the stream's start to the drain's end
        "cycle_mean_s": round((m2["cycle_s"] - m0["cycle_s"]) / max(1.0, cycles), 3),
    }


def stop_clients(clients: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    out = []
    for p in clients:
        assert p.stdin is not None
        p.stdin.close()
    for p in clients:
        assert p.stdout is not None
        stdout = p.stdout.read()  # until it exits: it writes its launches first
        p.wait(timeout=120)
        out.append(json.loads(stdout.splitlines()[-1]))
    return out


def read_profile(path: Path) -> dict[str, list[float]]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def print_profile(before: dict[str, list[float]], after: dict[str, list[float]], placed: float) -> None:
    """The server's CPU from the stream's start to the end of the drain, by function (all threads; CPU clocks):
    calls, calls per placement, own and cumulative CPU seconds."""
    rows: list[tuple[str, float, float, float]] = []
    for fn, (calls, own, cum) in after.items():
        b = before.get(fn, [0, 0.0, 0.0])
        rows.append((fn, calls - b[0], own - b[1], cum - b[2]))
    total = sum(r[2] for r in rows)
    print(f"profiled server CPU {total:.1f} s over {placed:.0f} placements", file=sys.stderr)
    top = int(os.environ.get("E2E_PROFILE_TOP", "70"))  # rows of the cumulative list (the own list: 4/7 of it)
    for title, n in (("cumulative", top), ("own", top * 4 // 7)):
        print(f"-- by {title} CPU: calls, per placement, own s, cumulative s, function", file=sys.stderr)
        ranked = sorted(rows, key=lambda r: -(r[3] if title == "cumulative" else r[2]))
        for fn, calls, own, cum in ranked[:n]:
            per = calls / max(placed, 1)
            print(f"{calls:9.0f} {per:7.2f} {own:8.2f} {cum:8.2f}  {fn}", file=sys.stderr)


if __name__ == "__main__":
    main()
