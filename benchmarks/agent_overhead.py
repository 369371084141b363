"""CPU the node agent's probes spend per sample on an emulated DGX H100 node (8 GPUs, 8 HCAs).

One sample = what the agent does every heartbeat interval: read GPU telemetry (the nvidia-smi -q -x file),
read /sys/class/infiniband and turn counters into rates, read new kernel-log XIDs, grade health. The
emulated node advances between samples (traffic, temperatures) and that work is not counted. Prints one
JSON line: cpu_ms_per_sample and pct_of_one_core at the interval (target < 1 % at 1 s).
Usage: python benchmarks/agent_overhead.py [--samples 200] [--interval-s 1.0]
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
    print(
        json.dumps(
            {
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


if __name__ == "__main__":
    main()
