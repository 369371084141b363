"""The FGD packing protocol on openb, seeds 42..51, next to the FGD authors' raw results (same seeds).

    python benchmarks/sim_pack.py --variant default --placement frag best-fit --seeds 42 43 44

Reads the research-licensed traces by path from ``--traces`` (default /work/shared/traces). Prints one JSON
line per placer: mean allocation % at 100% and 130% arrived, mean GPUs unallocated at 130%, and FGD's
BestFit and FGD figures for the same variant and seeds.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np

from gpupool.sim.pack import pack
from gpupool.sim.traces.openb import load_openb


def fgd_expected(root: Path, variant: str, seeds: list[int]) -> dict[str, dict[str, float]]:
    path = root / "alibaba-openb-v2023" / "fgd_expected_results" / "analysis_allo_discrete.csv"
    out: dict[str, dict[str, list[float]]] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            if row["workload"] == f"openb_pod_list_{variant}" and int(row["seed"]) in seeds:
                d = out.setdefault(row["sc_policy"], {"100": [], "130": []})
                d["100"].append(float(row["100"]))
                d["130"].append(float(row["130"]))
    return {k: {p: round(float(np.mean(v)), 3) for p, v in d.items()} for k, d in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=Path("/work/shared/traces"))
    ap.add_argument("--variant", default="default")
    ap.add_argument("--placement", nargs="+", default=["frag", "best-fit"])
    ap.add_argument("--seeds", nargs="+", type=int, default=list(range(42, 52)))
    ap.add_argument("--tune", type=float, default=1.3)
    args = ap.parse_args(argv)
    csv_dir = args.traces / "alibaba-openb-v2023" / "csv"
    trace = load_openb(csv_dir / f"openb_pod_list_{args.variant}.csv", nodes=csv_dir / "openb_node_list_gpu_node.csv")
    expected = fgd_expected(args.traces, args.variant, args.seeds)
    for placer in args.placement:
        runs = [pack(trace.nodes, trace.jobs, placement=placer, tune=args.tune, seed=s) for s in args.seeds]
        print(json.dumps({
            "variant": args.variant, "placement": placer, "seeds": args.seeds,
            "alloc_at_100": round(float(np.mean([r.alloc_ratio_at[100] for r in runs])), 3),
            "alloc_at_130": round(float(np.mean([r.alloc_ratio_at[130] for r in runs])), 3),
            "unallocated_gpus_at_130": round(float(np.mean([r.unallocated_gpus for r in runs])), 1),
            "per_seed_at_130": [r.alloc_ratio_at[130] for r in runs],
            "fgd_paper_bestfit": expected.get("05-BestFit"), "fgd_paper_fgd": expected.get("06-FGD"),
            "wall_s_per_seed": round(float(np.mean([r.wall_s for r in runs])), 1),
        }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
