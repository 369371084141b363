"""CPU the node agent's probes spend per sample on an emulated DGX H100 node (8 GPUs, 8 HCAs).

One sample = what the agent does every heartbeat interval: read GPU telemetry (the nvidia-smi -q -x file),
read /sys/class/infiniband and turn counters into rates, read new kernel-log XIDs, grade health. The
emulated node advances between samples (traffic, temperatures) and that work is not counted. Prints one
JSON line: cpu_ms_per_sample and pct_of_one_core at the interval (target < 1 % at 1 s).

Server intake (``--nodes N``, 0 to skip): a real ``gpupool server`` process on SQLite in a temp dir; N nodes
register one after another (8 GPUs, 8 HCAs each; registrations_per_s and the server's CPU per registration),
then client threads send their heartbeats (8 GPU and 8 port samples, as the agent builds them) as fast as
the server answers: first one beat per node (first_heartbeats_per_s: each records the node's GPU grades),
then steady beats for ``--intake-s`` seconds (heartbeats_per_s, the server's CPU per beat from /proc, the
1-minute load average around it). No fabric is imported, so every port reports under the synthetic leaf.
Usage: python benchmarks/agent_overhead.py [--samples 200] [--interval-s 1.0] [--nodes 1000] [--intake-s 10]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from gpupool.agent import EmulatedNode, FileGpuProbe, SysfsIbProbe, assess_node
from gpupool.cluster.health import HealthRules
from gpupool.fabric.generators import superpod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--interval-s", type=float, default=1.0)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--intake-s", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=16)
    args = ap.parse_args()

    fabric = superpod(1)
    host = fabric.hosts[0]
    rules = HealthRules()
    with tempfile.TemporaryDirectory() as tmp:
        node = EmulatedNode(Path(tmp), host, [fabric.hcas[fabric.hca_index(g)] for g in host.hcas])
        node.place(range(8), util_pct=90.0, pid=1234)
        gpus = FileGpuProbe(node.smi_xml_path, node.kernel_log_path)
        gpus.inventory()  # once at start, as the agent does
        ib = SysfsIbProbe(node.sysfs_root)
        ib.rates(node.now_s)
        cpu = 0.0
        wall = 0.0
        for i in range(args.samples):
            node.advance(args.interval_s)
            if i % 50 == 0:
                node.inject_xid(i % 8, 63)
            c0, w0 = time.process_time(), time.perf_counter()
            telemetry = gpus.telemetry()
            rates = ib.rates(node.now_s)
            xids = gpus.xid_events()
            health = assess_node(telemetry, xids, ib.latest, rates, rules)
            cpu += time.process_time() - c0
            wall += time.perf_counter() - w0
            assert len(health.gpus) == 8 and len(health.ports) == 8
    per_sample_s = cpu / args.samples
    intake = server_intake(args.nodes, args.intake_s, args.clients) if args.nodes > 0 else {}
    print(
        json.dumps(
            {
                **intake,
                "benchmark": "agent_overhead_probes",
                "gpus": 8,
                "hcas": 8,
                "samples": args.samples,
                "interval_s": args.interval_s,
                "cpu_ms_per_sample": round(per_sample_s * 1e3, 3),
                "wall_ms_per_sample": round(wall / args.samples * 1e3, 3),
                "pct_of_one_core": round(per_sample_s / args.interval_s * 100, 3),
            }
        )
    )


def server_intake(nodes: int, seconds: float, clients: int) -> dict[str, float | int]:
    import os
    import socket
    import subprocess
    import sys
    import threading

    import httpx

    from gpupool.schemas import agent as wire

    with tempfile.TemporaryDirectory() as tmp, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        env = dict(os.environ, GPUPOOL_DATA_DIR=tmp, GPUPOOL_ADMIN_TOKEN="bench", GPUPOOL_PORT=str(port),
                   GPUPOOL_LOG_LEVEL="warning", GPUPOOL_HEARTBEAT_INTERVAL_S="1", GPUPOOL_NODE_LOST_AFTER_S="3600")  # fmt: skip
        server = subprocess.Popen([sys.executable, "-m", "gpupool", "server"], env=env)
        url = f"http://127.0.0.1:{port}"

        def cpu_s() -> float:  # the server's user + system CPU so far (Linux /proc; 0 elsewhere)
            try:
                fields = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                return 0.0
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        try:
            admin = httpx.Client(base_url=url, headers={"Authorization": "Bearer bench"}, timeout=30)
            for _ in range(300):
                try:
                    if admin.get("/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            join = admin.post("/v1/join-tokens", json={}).json()["token"]
            gpus = tuple(wire.GpuInfo(index=i, model="NVIDIA H100 80GB HBM3", memory_mib=81559) for i in range(8))
            hcas = tuple(wire.HcaInfo(name=f"mlx5_{i}", guid=f"{i:016x}", rate_gbps=400.0) for i in range(8))
            tokens: dict[str, str] = {}
            reg_cpu0, reg_t0 = cpu_s(), time.monotonic()
            for n in range(nodes):
                req = wire.RegisterRequest(host=f"node{n:04d}", gpus=gpus, hcas=hcas)
                r = admin.post("/v1/agents/register", content=req.model_dump_json(),
                               headers={"Authorization": f"Bearer {join}", "Content-Type": "application/json"})  # fmt: skip
                tokens[req.host] = r.json()["node_token"]
            reg_wall, reg_cpu = time.monotonic() - reg_t0, cpu_s() - reg_cpu0
            beat = wire.HeartbeatRequest(
                seq=1,
                at_s=0.0,
                gpus=tuple(
                    wire.GpuSample(
                        index=i,
                        utilization_pct=90.0,
                        memory_used_mib=60000,
                        temperature_c=70.0,
                        power_w=650.0,
                        ecc_uncorrected=0,
                    )
                    for i in range(8)
                ),
                ports=tuple(
                    wire.PortSample(
                        hca=f"mlx5_{i}", xmit_gbps=300.0, rcv_gbps=300.0, xmit_wait_per_s=0.0, errors_per_s=0.0
                    )
                    for i in range(8)
                ),
            ).model_dump_json()
            hosts = sorted(tokens)
            body = beat.encode()
            requests = [
                f"POST /v1/agents/{h}/heartbeat HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {tokens[h]}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
                for h in hosts
            ]

            def run(seconds: float, first: bool) -> tuple[int, int, float]:
                """Beats from ``clients`` threads; ``first``: each host once (its first beat records its GPU
                grades, a write), else round-robin for ``seconds`` (steady beats: what a fleet sends)."""
                done = [0] * clients
                errors = [0] * clients
                stop_at = time.monotonic() + seconds

                def client(k: int) -> None:
                    # Raw keep-alive HTTP/1.1 on one socket per thread, requests prebuilt: an httpx client costs
                    # about as much CPU per request as the server, and on a small machine it would be the bottleneck.
                    with socket.create_connection(("127.0.0.1", port)) as conn:
                        buf = b""
                        i = k
                        while (i < len(hosts)) if first else (time.monotonic() < stop_at):
                            conn.sendall(requests[i % len(hosts)])
                            while b"\r\n\r\n" not in buf:
                                buf += conn.recv(65536)
                            head, _, buf = buf.partition(b"\r\n\r\n")
                            length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
                            while len(buf) < length:
                                buf += conn.recv(65536)
                            buf = buf[length:]
                            ok = head.startswith(b"HTTP/1.1 200")
                            done[k] += ok
                            errors[k] += not ok
                            i += clients

                t0 = time.monotonic()
                threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                return sum(done), sum(errors), time.monotonic() - t0

            first_n, first_errors, first_wall = run(0.0, first=True)
            load_before = os.getloadavg()[0]
            cpu0 = cpu_s()
            n, errs, wall = run(seconds, first=False)
            server_cpu = cpu_s() - cpu0
            load_after = os.getloadavg()[0]
        finally:
            server.terminate()
            server.wait(timeout=30)
    return {
        "intake_nodes": nodes,
        "intake_clients": clients,
        "registrations_per_s": round(nodes / reg_wall, 1),
        "server_cpu_ms_per_registration": round(reg_cpu / nodes * 1e3, 3),
        "first_heartbeats_per_s": round(first_n / first_wall, 1),
        "heartbeats": n,
        "heartbeat_errors": errs + first_errors,
        "heartbeats_per_s": round(n / wall, 1),
        "server_cpu_ms_per_heartbeat": round(server_cpu / max(n, 1) * 1e3, 3),
        "load_avg_1m_before": round(load_before, 2),
        "load_avg_1m_after": round(load_after, 2),
    }


if __name__ == "__main__":
    main()
