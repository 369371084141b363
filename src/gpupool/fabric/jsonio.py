"""The project's own fabric JSON: versioned; import -> export -> import is lossless.

Only declared facts are written as inputs (switches, HCAs, hosts, links). Derived facts (tiers, rails,
scalable units) are written too, for readers, under ``derived``; on import they are recomputed, never trusted.
Fields added after version 1 was first written (an HCA's ``system_guid``, ``found_by`` and
``unattributed_reason``) are optional on read, so older files still load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpupool.domain.errors import FabricError, InputError
from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Gpu, Hca, Host, Link, Port, Switch

FORMAT = "gpupool-fabric"
VERSION = 1


def to_dict(fabric: Fabric) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": fabric.name,
        "switches": [
            {"guid": s.guid, "name": s.name, "ports": s.ports, "model": s.model, "lid": s.lid} for s in fabric.switches
        ],
        "hcas": [
            {
                "guid": h.guid,
                "name": h.name,
                "description": h.description,
                "lid": h.lid,
                "rate_gbps": h.rate_gbps,
                "host": h.host,
                "link_layer": h.link_layer,
                "numa_node": h.numa_node,
                "system_guid": h.system_guid,
                "found_by": h.found_by,
                "unattributed_reason": h.unattributed_reason,
            }
            for h in fabric.hcas
        ],
        "hosts": [
            {
                "name": h.name,
                "gpus": [
                    {
                        "index": g.index,
                        "model": g.model,
                        "memory_mib": g.memory_mib,
                        "nvlink_island": g.nvlink_island,
                        "numa_node": g.numa_node,
                        "uuid": g.uuid,
                        "pci_bus_id": g.pci_bus_id,
                        "mig_mode": g.mig_mode,
                    }
                    for g in h.gpus
                ],
                "hcas": list(h.hcas),
                "cpu_millicores": h.cpu_millicores,
                "memory_mib": h.memory_mib,
                "nvlink_domain": h.nvlink_domain,
                "nvlink_gbps": h.nvlink_gbps,
                "gpu_hca": list(h.gpu_hca),
            }
            for h in fabric.hosts
        ],
        "links": [
            [l.a.node, l.a.port, l.b.node, l.b.port, l.width, l.speed]
            for l in fabric.links  # noqa: E741
        ],
        "derived": {
            "tiers": {s.guid: s.tier.name.lower() for s in fabric.switches},
            "rails": fabric.rail_count,
            "scalable_units": [[fabric.switches[s].guid for s in su] for su in fabric.su_leaves],
        },
    }


def from_dict(data: Any, source: str = "<json>") -> Fabric:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"not a {FORMAT} document (missing or wrong 'format')", source=source)
    if data.get("version") != VERSION:
        raise InputError(
            f"unsupported {FORMAT} version {data.get('version')!r}; this build reads {VERSION}", source=source
        )
    where = "switches"
    try:
        switches = [
            Switch(str(s["guid"]), str(s["name"]), int(s["ports"]), str(s.get("model", "")), int(s.get("lid", 0)))
            for s in data["switches"]
        ]
        where = "hcas"
        hcas = [
            Hca(
                guid=str(h["guid"]),
                name=str(h.get("name", "")),
                description=str(h.get("description", "")),
                lid=int(h.get("lid", 0)),
                rate_gbps=float(h.get("rate_gbps", 0.0)),
                host=h.get("host"),
                link_layer=str(h.get("link_layer", "InfiniBand")),
                numa_node=int(h.get("numa_node", -1)),
                system_guid=str(h.get("system_guid", "")),
                found_by=str(h.get("found_by", "")),
                unattributed_reason=str(h.get("unattributed_reason", "")),
            )
            for h in data["hcas"]
        ]
        where = "hosts"
        hosts = [
            Host(
                name=str(h["name"]),
                gpus=tuple(
                    Gpu(
                        index=int(g["index"]),
                        model=str(g["model"]),
                        memory_mib=int(g["memory_mib"]),
                        nvlink_island=int(g.get("nvlink_island", 0)),
                        numa_node=int(g.get("numa_node", -1)),
                        uuid=str(g.get("uuid", "")),
                        pci_bus_id=str(g.get("pci_bus_id", "")),
                        mig_mode=bool(g.get("mig_mode", False)),
                    )
                    for g in h.get("gpus", [])
                ),
                hcas=tuple(str(x) for x in h.get("hcas", [])),
                cpu_millicores=int(h.get("cpu_millicores", 0)),
                memory_mib=int(h.get("memory_mib", 0)),
                nvlink_domain=str(h.get("nvlink_domain", "")),
                nvlink_gbps=float(h.get("nvlink_gbps", 0.0)),
                gpu_hca=tuple(int(x) for x in h.get("gpu_hca", [])),
            )
            for h in data["hosts"]
        ]
        where = "links"
        links = [
            Link(Port(str(a), int(ap)), Port(str(b), int(bp)), int(w), str(sp)) for a, ap, b, bp, w, sp in data["links"]
        ]
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"malformed '{where}' section: {type(e).__name__}: {e}", source=source) from e
    try:
        return Fabric(switches=switches, hcas=hcas, hosts=hosts, links=links, name=str(data.get("name", "fabric")))
    except FabricError as e:
        raise InputError(f"inconsistent fabric: {e.message}", source=source) from e


def dumps(fabric: Fabric) -> str:
    return json.dumps(to_dict(fabric), separators=(",", ":"))


def save(fabric: Fabric, path: str | Path) -> None:
    Path(path).write_text(dumps(fabric) + "\n", encoding="utf-8")


def load(path: str | Path) -> Fabric:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text (byte {e.start})", source=str(p)) from e
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", source=str(p)) from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON: {e.msg}", source=str(p), line=e.lineno) from e
    return from_dict(data, source=str(p))
