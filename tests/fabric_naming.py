"""Naming styles real sites use, applied to a generated fabric: what its dump shows and what an import must find.

``styled(fabric, style)`` returns the fabric as its ``ibnetdiscover`` dump would describe it (HCA descriptions
and system image GUIDs changed, hosts as they were), the side files a site would have (node-name map, host
map), and the ground truth: the same fabric with hosts named as the import should name them. Used by the
property tests and by ``scripts/ibsim_fabrics.py``, which runs the real tools on these fabrics.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from gpupool.fabric import Fabric, Hca, Host
from gpupool.fabric.export.ibnetdiscover import switch_description
from gpupool.fabric.export.slurm import topology_conf
from gpupool.fabric.parsers.attribution import NameSources
from gpupool.fabric.parsers.nodemap import parse_host_map, parse_node_name_map
from gpupool.fabric.parsers.slurm import SlurmTree, parse_slurm_topology

GENERIC = "MT4129 ConnectX7   Mellanox Technologies"
STYLES = (
    "described",  # "<host> mlx5_<i>", what rdma-ndd writes
    "hca-n",  # "<host> HCA-<i+1>", DGX OS naming
    "fqdn",  # "<host>.cluster.local mlx5_<i>", kept whole
    "fqdn-strip",  # the same, imported with --strip-domain cluster.local
    "node-name-map",  # vendor descriptions; an opensm map gives each HCA its bare host name
    "slash",  # vendor descriptions; the map says "<host>/U<i+1>"
    "host-map",  # vendor descriptions; a CSV GUID,host file
    "system-guid",  # only the first HCA named; all HCAs of a host share its system image GUID
    "non-ascii",  # host names outside ASCII from a node-name map (the tools print a description's
    # non-ASCII bytes as spaces, so a map is where such names really come from)
    "mixed",  # each host in one of the above, chosen at random
)
_MIXABLE = ("described", "hca-n", "node-name-map", "slash", "host-map", "system-guid")


@dataclass(frozen=True, slots=True)
class Styled:
    dump: Fabric  # write this with to_ibnetdiscover: descriptions and system GUIDs as the dump shows them, no hosts
    truth: Fabric  # what the import must find: hosts with these names and HCAs
    node_name_map: str  # file text, "" for none
    host_map: str
    strip_domain: str = ""

    def names(self) -> NameSources:
        return NameSources(
            node_names=parse_node_name_map(self.node_name_map, source="node-name-map") if self.node_name_map else {},
            host_map=parse_host_map(self.host_map, source="host-map") if self.host_map else {},
            strip_domain=self.strip_domain,
        )


def styled(fabric: Fabric, style: str, seed: int = 0) -> Styled:
    rng = np.random.default_rng(seed)
    per_host = {h.name: (style if style != "mixed" else str(rng.choice(_MIXABLE))) for h in fabric.hosts}
    rename = {h.name: f"n\u0153ud-{h.name}" if per_host[h.name] == "non-ascii" else h.name for h in fabric.hosts}
    truth_name = {h: f"{n}.cluster.local" if per_host[h] == "fqdn" else n for h, n in rename.items()}
    dump_hcas: dict[str, Hca] = {}
    map_lines: list[str] = []
    host_lines: list[str] = []
    for host in fabric.hosts:
        s, name = per_host[host.name], rename[host.name]
        for i, g in enumerate(host.hcas):
            hca = fabric.hcas[fabric.hca_index(g)]
            desc, sysguid = f"{name} mlx5_{i}", ""
            if s == "hca-n":
                desc = f"{name} HCA-{i + 1}"
            elif s in ("fqdn", "fqdn-strip"):
                desc = f"{name}.cluster.local mlx5_{i}"
            elif s in ("node-name-map", "non-ascii"):
                desc = GENERIC
                map_lines.append(f'0x{g} "{name}"')
            elif s == "slash":
                desc = GENERIC
                map_lines.append(f'0x{g} "{name}/U{i + 1}"')
            elif s == "host-map":
                desc = GENERIC
                host_lines.append(f"0x{g},{name}")
            elif s == "system-guid":
                desc = f"{name} mlx5_0" if i == 0 else GENERIC
                sysguid = host.hcas[0]
            dump_hcas[g] = replace(hca, description=desc, system_guid=sysguid, host=None)
    if map_lines:
        map_lines += [f'0x{s.guid} "{switch_description(s)}"' for s in fabric.switches]
    dump = Fabric(
        switches=fabric.switches,
        hcas=[dump_hcas.get(h.guid, h) for h in fabric.hcas],
        hosts=[],
        links=fabric.links,
        name=fabric.name,
    )
    truth_hcas = [replace(h, host=truth_name[h.host]) if h.host is not None else h for h in fabric.hcas]
    truth = Fabric(
        switches=fabric.switches,
        hcas=truth_hcas,
        hosts=[Host(truth_name[h.name], hcas=h.hcas) for h in fabric.hosts],
        links=fabric.links,
        name=fabric.name,
    )
    header = ["guid,host"] if host_lines else []
    return Styled(
        dump=dump,
        truth=truth,
        node_name_map="\n".join(map_lines) + "\n" if map_lines else "",
        host_map="\n".join(header + host_lines) + "\n" if host_lines else "",
        strip_domain="cluster.local" if "fqdn-strip" in per_host.values() else "",
    )


def slurm_partition(fabric: Fabric) -> set[frozenset[str]]:
    """The leaf -> hosts partition of the fabric's Slurm topology.conf (tree plugin)."""
    tree = parse_slurm_topology(topology_conf(fabric))
    assert isinstance(tree, SlurmTree)
    return {frozenset(nodes) for nodes in tree.leaf_nodes().values()}


def link_set(f: Fabric) -> set[tuple[frozenset[tuple[str, int]], int, str]]:
    return {(frozenset({(x.a.node, x.a.port), (x.b.node, x.b.port)}), x.width, x.speed) for x in f.links}
