"""Time fabric imports: the real DGX H100 ibnetdiscover dump, and a generated SuperPOD in every link format.

The SuperPOD (``--sus``, 32 node slots and 8 rails each) is written as ibnetdiscover text by gpupool's own
exporter with vendor descriptions and an opensm node-name map of bare host names (the attribution path the
issue was about), then imported; its Topograph labels are exported and imported too. Each timing is the
best of ``--repeat`` runs, wall and CPU seconds. Prints one JSON line.

    .venv/bin/python benchmarks/fabric_import.py [--sus 16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpupool.fabric import Fabric
from gpupool.fabric.export.ibnetdiscover import to_ibnetdiscover
from gpupool.fabric.export.topograph import node_labels_json
from gpupool.fabric.generators import superpod
from gpupool.fabric.parsers.attribution import NameSources
from gpupool.fabric.parsers.ibnetdiscover import parse_ibnetdiscover
from gpupool.fabric.parsers.nodemap import parse_node_name_map
from gpupool.fabric.parsers.topograph import parse_node_labels

DGX = (
    Path(__file__).resolve().parents[1]
    / "tests"
    / "data"
    / "ibnetdiscover"
    / "dgx-h100-ndr-superpod-qm9701-leaf-spine.txt"
)


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """(wall s, CPU s, result) of the fastest of ``repeat`` runs."""
    runs = []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        runs.append((time.perf_counter() - w, time.process_time() - c, out))
    return min(runs, key=lambda r: r[0])


def vendor_dump(f: Fabric) -> tuple[str, str]:
    """The fabric as a dump whose CAs say only their vendor string, and the node-name map that names them."""
    hcas = [replace(h, description="MT4129 ConnectX7   Mellanox Technologies", host=None) for h in f.hcas]
    text = to_ibnetdiscover(Fabric(switches=f.switches, hcas=hcas, hosts=[], links=f.links, name=f.name))
    nmap = "".join(f'0x{h.guid} "{h.host}"\n' for h in f.hcas)
    return text, nmap


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sus", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    dgx_text = DGX.read_text()
    dgx_w, dgx_c, dgx = best(lambda: parse_ibnetdiscover(dgx_text, source=str(DGX)), args.repeat)
    f = superpod(args.sus)
    text, nmap = vendor_dump(f)
    names = NameSources(node_names=parse_node_name_map(nmap, source="map"))
    sp_w, sp_c, sp = best(lambda: parse_ibnetdiscover(text, source="superpod", names=names), args.repeat)
    assert len(sp.fabric.hosts) == len(f.hosts)
    labels = node_labels_json(f, "topograph")
    lb_w, lb_c, lb = best(lambda: parse_node_labels(labels), args.repeat)
    assert len(lb.hosts) == len(f.hosts)
    print(
        json.dumps(
            {
                "benchmark": "fabric_import",
                "dgx_ibnetdiscover": {
                    "lines": dgx_text.count("\n"),
                    "hosts": len(dgx.fabric.hosts),
                    "wall_s": round(dgx_w, 4),
                    "cpu_s": round(dgx_c, 4),
                },
                "superpod_node_name_map": {
                    "sus": args.sus,
                    "hosts": len(f.hosts),
                    "hcas": len(f.hcas),
                    "lines": text.count("\n"),
                    "wall_s": round(sp_w, 4),
                    "cpu_s": round(sp_c, 4),
                },
                "superpod_topograph_labels": {"nodes": len(f.hosts), "wall_s": round(lb_w, 4), "cpu_s": round(lb_c, 4)},
            }
        )
    )


if __name__ == "__main__":
    main()
