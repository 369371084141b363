"""A picture of a fabric: tiers top to bottom (core, spine, leaf, hosts), links coloured by rail.

Built on ``matplotlib.figure.Figure`` directly rather than pyplot, so no global figure registry or backend
switch is involved (drawing from a server thread is safe) and the file type follows the suffix. Laid out in
inches, so tiles stay square at any size. It stays readable at thousands of hosts: parallel links are drawn
once, switch-to-switch links are thin and fade as they crowd, hosts are small tiles packed in one block per
scalable unit under that unit's leaves (each leaf drops one line to the block instead of a line per host),
and names are written only where they fit.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import matplotlib
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PatchCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Tier

__all__ = ["draw"]

Colour = tuple[float, float, float, float]
Segment = list[tuple[float, float]]

_SUFFIXES = {".svg": "svg", ".png": "png"}
_MARGIN_L = 0.9  # room for the tier names on the left, inches
_MARGIN_R = 0.3
_SLOT = 0.35  # preferred width of one leaf, inches
_MAX_WIDTH = 40.0  # beyond this a picture stops being looked at and starts being scrolled
_GAP = 0.5  # space between scalable units, in leaf slots
_TIER_STEP = 1.1  # vertical distance between switch tiers, inches (scaled up for wide pictures)
_HOST_AREA = 2.4  # height available to host tiles, inches (scaled likewise)
_BASE = 0.35  # bottom margin under the host blocks, room for their labels
_BOX_H = 0.16
_FONT = 6.0  # points
_GREY: Colour = (0.45, 0.45, 0.45, 1.0)
_LABEL_BOX = {"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 0.5}
_TIER_COLOUR = {Tier.CORE: "#5b3a8c", Tier.SPINE: "#2f5d8a", Tier.LEAF: "#3d7f5a"}


@dataclass(frozen=True, slots=True)
class _Unit:
    """A block of the picture: a scalable unit's leaves and the hosts drawn under them."""

    label: str
    leaves: tuple[int, ...]
    hosts: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _Layout:
    width: float
    height: float
    slot: float
    tile: float
    host_h: float  # height of the tallest host block
    x: dict[int, float]  # switch index -> centre x
    tier_y: dict[Tier, float]
    spans: tuple[tuple[float, float], ...]  # per unit: left and right edge of its leaf slots
    block_w: tuple[float, ...]  # per unit: width of its host block


def draw(fabric: Fabric, path: str | Path, *, title: str | None = None) -> None:
    """Write a picture of ``fabric`` to ``path``: SVG or PNG, by the suffix.

    In the SVG every host tile carries the id ``host-<name>``; switch boxes are one group per tier
    (``switches-leaf``, ...), since a thousand individually named boxes would slow drawing for no reader.
    """
    out = Path(path)
    fmt = _SUFFIXES.get(out.suffix.lower())
    if fmt is None:
        raise ValueError(f"cannot tell the picture format from {out.name!r}: use .svg or .png")
    _figure(fabric, title).savefig(out, format=fmt, dpi=100)


def _figure(fabric: Fabric, title: str | None) -> Figure:
    units = _units(fabric)
    down, pairs = _switch_links(fabric)
    lay = _layout(fabric, units, down)
    fig = Figure(figsize=(lay.width, lay.height))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0, lay.width)
    ax.set_ylim(0, lay.height)
    ax.set_axis_off()
    colours = _rail_colours(fabric.rail_count)
    _draw_links(ax, fabric, lay, pairs, colours)
    _draw_switches(ax, fabric, lay)
    _draw_hosts(ax, fabric, lay, units, colours)
    if fabric.rail_count > 1:
        handles = [Patch(color=colours[r], label=f"rail {r + 1}") for r in range(fabric.rail_count)]
        ax.legend(handles=handles, loc="upper right", fontsize=6, ncols=min(fabric.rail_count, 8), frameon=False)
    heading = (
        title
        if title is not None
        else f"{fabric.name}: {len(fabric.hosts)} hosts, {fabric.gpu_count} GPUs, {len(fabric.switches)} switches"
    )
    ax.text(0.1, lay.height - 0.1, heading, ha="left", va="top", fontsize=9, fontweight="bold")
    return fig


# ---------------------------------------------------------------- structure


def _units(fabric: Fabric) -> list[_Unit]:
    """One unit per SU (each host in the SU of its first leaf); hostless leaves and leafless hosts at the end."""
    hosts: list[list[int]] = [[] for _ in fabric.su_leaves]
    orphans: list[int] = []
    for h in range(len(fabric.hosts)):
        sus = sorted({int(fabric.leaf_su[s]) for s in fabric.host_leaves[h] if fabric.leaf_su[s] >= 0})
        (hosts[sus[0]] if sus else orphans).append(h)
    units = [_Unit(f"su{i + 1:02d}", tuple(leaves), tuple(hosts[i])) for i, leaves in enumerate(fabric.su_leaves)]
    in_su = {s for leaves in fabric.su_leaves for s in leaves}
    stray = tuple(s for s in fabric.switches_at(Tier.LEAF) if s not in in_su)
    if stray or orphans:
        units.append(_Unit("other", stray, tuple(orphans)))
    return units


def _switch_links(fabric: Fabric) -> tuple[dict[int, set[int]], dict[tuple[int, int], int]]:
    """Switches below each switch, and (lower, upper) switch pairs with their parallel link counts."""
    tiers = [s.tier for s in fabric.switches]
    down: dict[int, set[int]] = defaultdict(set)
    pairs: dict[tuple[int, int], int] = defaultdict(int)
    for link in fabric.links:
        try:
            a, b = fabric.switch_index(link.a.node), fabric.switch_index(link.b.node)
        except KeyError:
            continue  # a host link
        if tiers[a] == tiers[b]:
            continue
        lo, hi = (a, b) if tiers[a] < tiers[b] else (b, a)
        down[hi].add(lo)
        pairs[(lo, hi)] += 1
    return down, pairs


def _tile_size(widths: list[float], counts: list[int], height: float) -> float:
    """The largest square tile (at most 0.3 in) that packs every unit's hosts into its width x ``height``."""
    tile = 0.3
    for w, n in zip(widths, counts, strict=True):
        if n == 0:
            continue
        t = min(tile, math.sqrt(w * height / n))
        while t > 0.01 and math.floor(w / t) * math.floor(height / t) < n:
            t *= 0.95
        tile = min(tile, t)
    return tile


def _layout(fabric: Fabric, units: list[_Unit], down: dict[int, set[int]]) -> _Layout:
    # Horizontally: one slot per leaf, a gap between units; a unit without leaves still gets one slot.
    slots = sum(max(len(u.leaves), 1) for u in units) + _GAP * max(len(units) - 1, 0)
    width = min(max(8.0, slots * _SLOT + _MARGIN_L + _MARGIN_R), _MAX_WIDTH)
    slot = (width - _MARGIN_L - _MARGIN_R) / max(slots, 1.0)
    x: dict[int, float] = {}
    spans: list[tuple[float, float]] = []
    cursor = _MARGIN_L
    for u in units:
        start = cursor
        for s in u.leaves:
            x[s] = cursor + slot / 2
            cursor += slot
        if not u.leaves:
            cursor += slot
        spans.append((start, cursor))
        cursor += _GAP * slot

    # Upper tiers: evenly spaced, ordered by the mean x of what they connect below (barycentres), so a pod's
    # aggregation switches sit above that pod and crossings stay few.
    for tier in (Tier.SPINE, Tier.CORE):
        members = fabric.switches_at(tier)
        centre: dict[int, float] = {}
        for s in members:
            below = [x[c] for c in down.get(s, ()) if c in x]
            centre[s] = sum(below) / len(below) if below else width
        order = sorted(members, key=lambda s: (centre[s], fabric.switches[s].name))
        step_x = (width - _MARGIN_L - _MARGIN_R) / max(len(order), 1)
        x.update({s: _MARGIN_L + step_x * (i + 0.5) for i, s in enumerate(order)})

    # Vertically: a wide picture gets taller tiers and host blocks too, so it keeps a shape one can look at.
    scale = max(1.0, width / 16.0)
    block_w = [max(b - a - 0.1 * slot, slot * 0.5) for a, b in spans]
    tile = _tile_size(block_w, [len(u.hosts) for u in units], _HOST_AREA * scale)
    rows = max(
        (math.ceil(len(u.hosts) / max(1, math.floor(w / tile))) for w, u in zip(block_w, units, strict=True)), default=0
    )
    host_h = rows * tile
    tier_y: dict[Tier, float] = {}
    y = _BASE + host_h + 0.55  # above the host blocks, their bus and the leaves' drop lines
    top = y
    for tier in (Tier.LEAF, Tier.SPINE, Tier.CORE):
        if tier == Tier.LEAF or fabric.switches_at(tier):  # a tier with no switches takes no room
            tier_y[tier] = top = y
            y += _TIER_STEP * scale
    return _Layout(width, top + _BOX_H + 0.7, slot, tile, host_h, x, tier_y, tuple(spans), tuple(block_w))


# ---------------------------------------------------------------- drawing


def _rail_colours(rails: int) -> list[Colour]:
    cmap = matplotlib.colormaps["tab10" if rails <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(max(rails, 1))]


def _rail_colour(fabric: Fabric, leaf: int, colours: list[Colour]) -> Colour:
    rail = int(fabric.leaf_rail[leaf])
    return colours[rail % len(colours)] if rail >= 0 and fabric.rail_count > 1 else _GREY


def _fits(text: str, width_in: float, size_pt: float = _FONT) -> bool:
    """Whether ``text`` at ``size_pt`` fits in ``width_in`` inches (an average glyph is ~0.6 em)."""
    return len(text) * size_pt * 0.6 / 72.0 <= width_in


def _draw_links(
    ax: Axes, fabric: Fabric, lay: _Layout, pairs: dict[tuple[int, int], int], colours: list[Colour]
) -> None:
    """Each switch pair once, one collection per tier pair: fainter the more crowded the row, but the rail
    colours of leaf uplinks never so faint that the rails vanish."""
    tiers = [s.tier for s in fabric.switches]
    rows: dict[Tier, tuple[list[Segment], list[Colour]]] = {}
    for lo, hi in sorted(pairs):
        if lo not in lay.x or hi not in lay.x:
            continue
        segs, cols = rows.setdefault(tiers[lo], ([], []))
        segs.append([(lay.x[lo], lay.tier_y[tiers[lo]] + _BOX_H / 2), (lay.x[hi], lay.tier_y[tiers[hi]] - _BOX_H / 2)])
        cols.append(_rail_colour(fabric, lo, colours) if tiers[lo] == Tier.LEAF else _GREY)
    for tier, (segs, cols) in rows.items():
        floor = 0.1 if tier == Tier.LEAF and fabric.rail_count > 1 else 0.03
        alpha = min(0.8, max(floor, 8.0 * lay.width / len(segs)))
        width = 0.4 if len(segs) > 500 else 0.8
        ax.add_collection(LineCollection(segs, colors=cols, linewidths=width, alpha=alpha, zorder=1))


def _draw_switches(ax: Axes, fabric: Fabric, lay: _Layout) -> None:
    for tier, y in lay.tier_y.items():
        members = [s for s in fabric.switches_at(tier) if s in lay.x]
        if not members:
            continue
        pitch = lay.slot if tier == Tier.LEAF else (lay.width - _MARGIN_L - _MARGIN_R) / len(members)
        box_w = max(min(pitch * 0.8, 0.6), 0.02)
        boxes = [Rectangle((lay.x[s] - box_w / 2, y - _BOX_H / 2), box_w, _BOX_H) for s in members]
        collection = PatchCollection(boxes, facecolor=_TIER_COLOUR[tier], edgecolor="white", linewidth=0.3, zorder=3)
        collection.set_gid(f"switches-{tier.name.lower()}")
        ax.add_collection(collection)
        names = [fabric.switches[s].name for s in members]
        if all(_fits(n, pitch * 0.95) for n in names):
            for s, n in zip(members, names, strict=True):
                ax.text(
                    lay.x[s],
                    y + _BOX_H / 2 + 0.03,
                    n,
                    ha="center",
                    va="bottom",
                    fontsize=_FONT,
                    bbox=_LABEL_BOX,
                    zorder=4,
                )
        ax.text(0.1, y, f"{tier.name.lower()} ({len(members)})", ha="left", va="center", fontsize=7)


def _draw_hosts(ax: Axes, fabric: Fabric, lay: _Layout, units: list[_Unit], colours: list[Colour]) -> None:
    """Tiles packed under their unit; each leaf drops a rail-coloured line to the unit's bus."""
    top = _BASE + lay.host_h
    y_bus = top + 0.15
    y_leaf = lay.tier_y[Tier.LEAF]
    ax.text(0.1, _BASE + lay.host_h / 2, f"hosts ({len(fabric.hosts)})", ha="left", va="center", fontsize=7)
    drops: list[Segment] = []
    drop_colours: list[Colour] = []
    buses: list[Segment] = []
    t = lay.tile
    for u, (a, b), w in zip(units, lay.spans, lay.block_w, strict=True):
        left = (a + b) / 2 - w / 2
        for s in u.leaves:
            drops.append([(lay.x[s], y_leaf - _BOX_H / 2), (lay.x[s], y_bus)])
            drop_colours.append(_rail_colour(fabric, s, colours))
        if u.hosts and u.leaves:
            buses.append([(left, y_bus), (left + w, y_bus)])
        cols = max(1, math.floor(w / t))
        for k, h in enumerate(u.hosts):
            r, c = divmod(k, cols)
            host = fabric.hosts[h]
            tile = Rectangle(
                (left + c * t + t * 0.06, top - (r + 1) * t + t * 0.06),
                t * 0.88,
                t * 0.88,
                facecolor="#8fb3d9" if host.gpus else "#b8b8b8",  # grey: no GPUs known (a Slurm-only import)
                edgecolor="none",
                zorder=2,
            )
            tile.set_gid(f"host-{host.name}")
            ax.add_patch(tile)
        # Single-homed units are just their leaf, already named above; a rail-optimised SU is named here.
        note = f"{u.label} ({len(u.hosts)})" if fabric.rail_count > 1 or u.label == "other" else f"{len(u.hosts)} hosts"
        if _fits(note, w):
            ax.text((a + b) / 2, _BASE - 0.05, note, ha="center", va="top", fontsize=_FONT)
    if drops:
        ax.add_collection(LineCollection(drops, colors=drop_colours, linewidths=0.6, zorder=1))
    if buses:
        ax.add_collection(LineCollection(buses, colors=[_GREY], linewidths=0.8, zorder=1))
