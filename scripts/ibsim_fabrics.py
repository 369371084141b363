#!/usr/bin/env python3
"""Regenerate tests/data/ibsim: real infiniband-diags and opensm output from ibsim-simulated fabrics.

Each case is a generated fabric (gpupool's generators), named the way some real site names its hosts
(tests/fabric_naming.py), written as an ibnetdiscover topology that Debian's ibsim simulates. Against the
simulated fabric this runs the real tools, through ibsim's libumad2sim.so, and keeps what they print:

    opensm --once           assigns LIDs, brings the links up, writes opensm-subnet.lst (the LST format
                            ibdiagnet2.lst shares)
    ibnetdiscover           default, -g (grouping), -p (ports), --node-name-map (when the case has a map)
    iblinkinfo              default and -l (one line per port)
    ibhosts, ibswitches

Next to them: truth.json (the fabric as an import must find it, gpupool's JSON), the naming files a site
would have (node-name-map, host-map.csv), topology.net (what ibsim was given) and case.json (the import
options the case needs). The tests read these files; one integration test (tests/integration/fabric) runs the script for one case
and checks it still makes the same inputs and importable outputs (.ci/run installs the packages).

Needs: apt-get install ibsim-utils infiniband-diags opensm. Debian 12's ibsim (0.10) simulates link speeds
up to HDR, so the cases use HDR, EDR and FDR links.

    .venv/bin/python scripts/ibsim_fabrics.py [--out tests/data/ibsim] [--only NAME]
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
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fabric_naming import styled  # noqa: E402
from gpupool.fabric import Fabric, Link, Port, generators, jsonio  # noqa: E402
from gpupool.fabric.export.ibnetdiscover import to_ibnetdiscover  # noqa: E402

UMAD2SIM = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"


@dataclass(frozen=True)
class Case:
    name: str
    fabric: Fabric
    style: str
    speed: str
    note: str
    seed: int = 0


def for_ibsim(f: Fabric, speed: str) -> Fabric:
    """Links at ``speed``; HCA GUIDs 8 apart with a ConnectX-7 prefix, as real adapters are, so a port GUID
    (node GUID + port, in ibsim as on ConnectX) never equals another HCA's node GUID."""
    new = {h.guid: f"b8cef60300{(i + 1) * 8:06x}" for i, h in enumerate(f.hcas)}

    def port(p: Port) -> Port:
        return Port(new.get(p.node, p.node), p.port)

    return Fabric(
        switches=f.switches,
        hcas=[replace(h, guid=new[h.guid]) for h in f.hcas],
        hosts=[replace(h, hcas=tuple(new[g] for g in h.hcas)) for h in f.hosts],
        links=[Link(port(x.a), port(x.b), x.width, speed) for x in f.links],
        name=f.name,
    )


def mixed_hca_counts() -> Fabric:
    """One scalable unit of 8 rail leaves: two hosts with 8 HCAs, two with 2, two with 1."""
    f = generators.rail_optimised(1, 6, 8, 2, speed="HDR", name="hosts-1-2-8-hcas")
    keep_per_host = [8, 8, 2, 2, 1, 1]
    keep = {g for h, k in zip(f.hosts, keep_per_host, strict=True) for g in h.hcas[:k]}
    links = [x for x in f.links if all(p.node in keep or p.node not in {h.guid for h in f.hcas} for p in (x.a, x.b))]
    hosts = [replace(h, hcas=h.hcas[:k], gpus=()) for h, k in zip(f.hosts, keep_per_host, strict=True)]
    return Fabric(
        switches=f.switches, hcas=[h for h in f.hcas if h.guid in keep], hosts=hosts, links=links, name=f.name
    )


def cases() -> list[Case]:
    return [
        Case("fat-tree-k4", generators.fat_tree(4, 0), "described", "EDR", "3-tier k=4 fat-tree, 16 hosts x 1 HCA"),
        Case(
            "dual-rail-fqdn",
            generators.rail_optimised(2, 4, 2, 2, speed="HDR"),
            "fqdn",
            "HDR",
            "2 SUs x 4 hosts x 2 rails; 'gpu001.cluster.local mlx5_0' kept whole",
        ),
        Case(
            "rail8-node-name-map",
            generators.rail_optimised(1, 4, 8, 4, speed="HDR"),
            "node-name-map",
            "HDR",
            "1 SU x 4 hosts x 8 rails; vendor descriptions, hosts from an opensm node-name map of bare names",
        ),
        Case(
            "rail8-system-guid",
            generators.rail_optimised(2, 3, 8, 2, speed="HDR"),
            "system-guid",
            "HDR",
            "2 SUs x 3 hosts x 8 rails; one HCA per host named, all of a host's HCAs share a system image GUID",
        ),
        Case("hosts-1-2-8-hcas", mixed_hca_counts(), "hca-n", "HDR", "hosts with 8, 2 and 1 HCAs on 8 rail leaves"),
        Case(
            "leaf-spine-host-map",
            generators.leaf_spine(3, 2, 4, 0),
            "host-map",
            "FDR",
            "2-tier leaf/spine, 12 hosts; vendor descriptions, hosts from a CSV GUID,host map",
        ),
        Case(
            "rail4-mixed-non-ascii",
            generators.rail_optimised(2, 3, 4, 2, speed="HDR"),
            "mixed",
            "HDR",
            "2 SUs x 3 hosts x 4 rails; each host named in a different style",
            seed=7,
        ),
        Case(
            "fat-tree-k2-non-ascii", generators.fat_tree(2, 0), "non-ascii", "EDR", "k=2 fat-tree, host names 'nœud-…'"
        ),
        Case(
            "leaf-spine-slash",
            generators.leaf_spine(2, 1, 3, 0),
            "slash",
            "EDR",
            "2-tier leaf/spine; node-name map entries 'host/U1'",
        ),
    ]


def run(cmd: list[str], env: dict[str, str], out: Path | None = None, timeout: float = 120) -> str:
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()[-500:]}")
    if out is not None:
        out.write_text(r.stdout)
    return r.stdout


def simulate(case: Case, dest: Path) -> None:
    st = styled(for_ibsim(case.fabric, case.speed), case.style, case.seed)
    dest.mkdir(parents=True, exist_ok=True)
    net = dest / "topology.net"
    net.write_text(to_ibnetdiscover(st.dump, title=case.name))
    jsonio.save(st.truth, dest / "truth.json")
    options: dict[str, str] = {}
    if st.node_name_map:
        (dest / "node-name-map").write_text(st.node_name_map)
        options["node_name_map"] = "node-name-map"
    if st.host_map:
        (dest / "host-map.csv").write_text(st.host_map)
        options["host_map"] = "host-map.csv"
    if st.strip_domain:
        options["strip_domain"] = st.strip_domain
    first_ca = next(h.guid for h in st.dump.hcas)
    with tempfile.TemporaryDirectory(prefix="ibsim-") as tmp:
        env = {**os.environ, "IBSIM_SOCKNAME": f"gpupool-{os.getpid()}-{case.name}", "SIM_HOST": f"H-{first_ca}"}
        sim = subprocess.Popen(
            ["ibsim", "-s", "-n", str(net)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            tools = {**env, "LD_PRELOAD": UMAD2SIM, "OSM_CACHE_DIR": tmp}
            conf = Path(tmp) / "opensm.conf"
            conf.write_text(f"dump_files_dir {tmp}/\n")
            deadline = time.monotonic() + 60
            while True:  # ibsim takes a moment to listen; opensm fails until it does
                try:
                    run(["opensm", "--once", "-F", str(conf), "-f", f"{tmp}/opensm.log"], tools)
                    break
                except RuntimeError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            shutil.copy(Path(tmp) / "opensm-subnet.lst", dest / "opensm-subnet.lst")
            run(["ibnetdiscover"], tools, dest / "ibnetdiscover.txt")
            run(["ibnetdiscover", "-g"], tools, dest / "ibnetdiscover-g.txt")
            run(["ibnetdiscover", "-p"], tools, dest / "ibnetdiscover-p.txt")
            run(["iblinkinfo"], tools, dest / "iblinkinfo.txt")
            run(["iblinkinfo", "-l"], tools, dest / "iblinkinfo-l.txt")
            run(["ibhosts"], tools, dest / "ibhosts.txt")
            run(["ibswitches"], tools, dest / "ibswitches.txt")
            if st.node_name_map:
                nmap = ["--node-name-map", str(dest / "node-name-map")]
                run(["ibnetdiscover", *nmap], tools, dest / "ibnetdiscover-names.txt")
                run(["iblinkinfo", *nmap], tools, dest / "iblinkinfo-names.txt")
        finally:
            sim.terminate()
            sim.wait(timeout=10)
    case_info = {
        "note": case.note,
        "style": case.style,
        "seed": case.seed,
        "link_speed": case.speed,
        "hosts": len(st.truth.hosts),
        "hcas": len(st.truth.hcas),
        "switches": len(st.truth.switches),
        "import_options": options,
    }
    (dest / "case.json").write_text(json.dumps(case_info, indent=1, ensure_ascii=False) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "ibsim")
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    for case in cases():
        if args.only and case.name != args.only:
            continue
        started = time.monotonic()
        simulate(case, args.out / case.name)
        print(f"{case.name}: {time.monotonic() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
