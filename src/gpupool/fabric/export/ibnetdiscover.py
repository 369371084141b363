"""A fabric as ``ibnetdiscover`` prints it (the default topology file), which ibsim also reads as a fabric.

The text is what ``parse_ibnetdiscover`` reads back into the same switches, HCAs, links and hosts (hosts
come back from the descriptions, so an HCA whose description names no host stays unattributed), and what
Debian's ``ibsim`` simulates, so real ``ibnetdiscover``, ``iblinkinfo`` and opensm runs can be made from
any generated fabric. GPUs, CPU and memory are not part of the format and are not written.

Layout as libibnetdisc prints it: a block per switch, then per CA, each link from both sides. A switch
with a model is described ``MF0;<name>:<model>/U1``, the way managed NVIDIA switches describe themselves.
An HCA's description is its own where that names its host, else ``"<host> <device>"`` (``ca_description``). Port GUIDs are the node
GUID plus the port number, as ConnectX adapters and ibsim number them.
"""

from __future__ import annotations

import re
from collections import defaultdict

from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Hca, Port, Switch
from gpupool.fabric.parsers.attribution import split_description

_DEVICE_WORD = re.compile(r"\S+")

__all__ = ["ca_description", "switch_description", "to_ibnetdiscover"]


def switch_description(s: Switch) -> str:
    return f"MF0;{s.name}:{s.model}/U1" if s.model else s.name


def ca_description(h: Hca) -> str:
    """The HCA's own description where it names the HCA's host (or the HCA has none), else ``host device``.

    An HCA attributed by a map, its system image GUID or its port position has a description that does not
    name its host; writing the host keeps the attribution in the text, as a dump taken with a node-name map
    of the known hosts would.
    """
    if h.host is None or split_description(h.description)[0] == h.host:
        return h.description or h.name
    return f"{h.host} {h.name}" if h.name and _DEVICE_WORD.fullmatch(h.name) else h.host


def _port_guid(guid: str, port: int) -> str:
    return f"{int(guid, 16) + port:x}"


def to_ibnetdiscover(fabric: Fabric, *, title: str = "") -> str:
    """The default ``ibnetdiscover`` topology file of ``fabric``."""
    switch = {s.guid: s for s in fabric.switches}
    hca = {h.guid: h for h in fabric.hcas}
    desc = {g: switch_description(s) for g, s in switch.items()} | {g: ca_description(h) for g, h in hca.items()}
    lid = {g: s.lid for g, s in switch.items()} | {g: h.lid for g, h in hca.items()}
    ends: dict[str, list[tuple[int, Port, str]]] = defaultdict(list)
    ports: dict[str, int] = defaultdict(int)
    for link in fabric.links:
        rate = f"{link.width}x{link.speed}"
        for x, y in ((link.a, link.b), (link.b, link.a)):
            ends[x.node].append((x.port, y, rate))
            ports[x.node] = max(ports[x.node], x.port)

    def ref(g: str) -> str:
        return f'"S-{g}"' if g in switch else f'"H-{g}"'

    out = ["#", f"# Topology file: written by gpupool from fabric {title or fabric.name!r}", "#"]
    for s in fabric.switches:
        out += ["", "vendid=0x2c9", "devid=0xd2f2", f"sysimgguid=0x{s.guid}", f"switchguid=0x{s.guid}({s.guid})"]
        out.append(
            f'Switch\t{max(s.ports, ports[s.guid])} "S-{s.guid}"\t\t# "{desc[s.guid]}" enhanced port 0 lid {s.lid} lmc 0'
        )
        for p, peer, rate in sorted(ends[s.guid], key=lambda e: e[0]):
            port_guid = f"({_port_guid(peer.node, peer.port)}) " if peer.node in hca else ""
            out.append(
                f'[{p}]\t{ref(peer.node)}[{peer.port}]{port_guid}\t\t# "{desc[peer.node]}" lid {lid[peer.node]} {rate}'
            )
    for h in fabric.hcas:
        sysimg = h.system_guid or h.guid
        out += ["", "vendid=0x2c9", "devid=0x1021", f"sysimgguid=0x{sysimg}", f"caguid=0x{h.guid}"]
        out.append(f'Ca\t{max(ports[h.guid], 1)} "H-{h.guid}"\t\t# "{desc[h.guid]}"')
        for p, peer, rate in sorted(ends[h.guid], key=lambda e: e[0]):
            out.append(
                f"[{p}]({_port_guid(h.guid, p)}) \t{ref(peer.node)}[{peer.port}]\t\t"
                f'# lid {h.lid} lmc 0 "{desc[peer.node]}" lid {lid[peer.node]} {rate}'
            )
    return "\n".join(out) + "\n"
