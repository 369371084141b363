"""fabric diff: what changed between two imports (hosts, HCAs, links gone; links slower), as after maintenance."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpupool.fabric import Fabric, Link
from gpupool.fabric.diff import diff_fabrics
from gpupool.fabric.export.ibnetdiscover import to_ibnetdiscover
from gpupool.fabric.merge import GpuDefaults, merge_gpus
from gpupool.fabric.parsers.ibnetdiscover import parse_ibnetdiscover, read_ibnetdiscover

CASE = Path(__file__).resolve().parents[2] / "data" / "ibsim" / "hosts-1-2-8-hcas" / "ibnetdiscover.txt"


def after_maintenance(f: Fabric) -> Fabric:
    """gpu006 gone (its only cable pulled), gpu001's HCA-8 gone, one of gpu002's links down to EDR."""
    gone = set(f.host("gpu006").hcas) | {f.host("gpu001").hcas[-1]}
    slow = f.host("gpu002").hcas[0]
    links = [
        Link(x.a, x.b, x.width, "EDR") if slow in (x.a.node, x.b.node) else x
        for x in f.links
        if x.a.node not in gone and x.b.node not in gone
    ]
    hosts = [replace(h, hcas=tuple(g for g in h.hcas if g not in gone)) for h in f.hosts if h.name != "gpu006"]
    dump = Fabric(switches=f.switches, hcas=[h for h in f.hcas if h.guid not in gone], hosts=hosts, links=links)
    # through the text, as the next day's ibnetdiscover would print it
    return parse_ibnetdiscover(to_ibnetdiscover(dump), source="after.txt").fabric


def test_nothing_changed() -> None:
    f = read_ibnetdiscover(CASE).fabric
    d = diff_fabrics(f, read_ibnetdiscover(CASE).fabric)
    assert not d.lost and not d.changed


def test_hosts_hcas_links_gone_and_slower() -> None:
    before = read_ibnetdiscover(CASE).fabric
    after = after_maintenance(before)
    d = diff_fabrics(before, after)
    assert d.lost
    assert d.hosts_gone == ("gpu006",) and d.hosts_new == ()
    assert len(d.hcas_gone) == 2 and any("(gpu001 HCA-8)" in h for h in d.hcas_gone)
    assert [c.ends for c in d.links_gone] == sorted(c.ends for c in d.links_gone) and len(d.links_gone) == 2
    assert any("gpu006 HCA-1[1]" in c.ends and c.before == "4xHDR" and c.after == "" for c in d.links_gone)
    assert [(c.before, c.after) for c in d.links_slower] == [("4xHDR", "4xEDR")]
    assert "gpu002 HCA-1[1]" in d.links_slower[0].ends and "leaf-su01-rail1" in d.links_slower[0].ends
    # the reverse is all gain: new host, HCAs, links, a faster link, nothing lost
    back = diff_fabrics(after, before)
    assert not back.lost and back.changed and back.hosts_new == ("gpu006",) and len(back.links_faster) == 1


def test_fewer_gpus_and_hcas_moved_are_losses() -> None:
    f = merge_gpus(read_ibnetdiscover(CASE).fabric, defaults=GpuDefaults.of(8, "H100")).fabric
    hosts = [replace(h, gpus=h.gpus[:7]) if h.name == "gpu003" else h for h in f.hosts]
    d = diff_fabrics(f, Fabric(switches=f.switches, hcas=f.hcas, hosts=hosts, links=f.links))
    assert d.lost and d.gpus_fewer == ("gpu003: 8 -> 7 GPUs",)
    moved_guid = f.host("gpu004").hcas[0]
    hcas = [replace(h, host="gpu005") if h.guid == moved_guid else h for h in f.hcas]
    hosts = [
        replace(h, hcas=())
        if h.name == "gpu004"
        else replace(h, hcas=(*h.hcas, moved_guid))
        if h.name == "gpu005"
        else h
        for h in f.hosts
    ]
    d = diff_fabrics(f, Fabric(switches=f.switches, hcas=hcas, hosts=hosts, links=f.links))
    assert d.hcas_moved == (f"{moved_guid}: gpu004 -> gpu005",) and d.lost
    assert d.to_dict()["hcas"]["moved"] == list(d.hcas_moved)
