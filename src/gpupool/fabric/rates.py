"""InfiniBand link rates: width x per-lane speed -> Gb/s, from SDR to XDR.

Per-lane figures are the nominal data rates that ``ibstat`` and ``ibstatus`` print as ``Rate``
(4x QDR = 40, 4x FDR = 56, 4x EDR = 100, 4x HDR = 200, 4x NDR = 400, 4x XDR = 800 Gb/s).
"""

from __future__ import annotations

import re

LANE_GBPS: dict[str, float] = {
    "SDR": 2.5,
    "DDR": 5.0,
    "QDR": 10.0,
    "FDR10": 10.0,
    "FDR": 14.0,
    "EDR": 25.0,
    "HDR": 50.0,
    "NDR": 100.0,
    "XDR": 200.0,
}
WIDTHS: tuple[int, ...] = (1, 2, 4, 8, 12)

_RATE_RE = re.compile(r"^(\d+)x(SDR|DDR|QDR|FDR10|FDR|EDR|HDR|NDR|XDR)$", re.IGNORECASE)


def link_gbps(width: int, speed: str) -> float:
    """Bandwidth of one link of ``width`` lanes at ``speed`` (``"NDR"``), in Gb/s."""
    return width * LANE_GBPS[speed.upper()]


def parse_rate(text: str) -> tuple[int, str] | None:
    """``"4xNDR"`` -> ``(4, "NDR")``; ``None`` when the text is not a width x speed token."""
    m = _RATE_RE.match(text.strip())
    if m is None:
        return None
    width = int(m.group(1))
    if width not in WIDTHS:
        return None
    return width, m.group(2).upper()


def speed_for_gbps(lane_gbps: float) -> str | None:
    """The speed name whose per-lane rate is ``lane_gbps`` (``100.0`` -> ``"NDR"``)."""
    for name, rate in LANE_GBPS.items():
        if name != "FDR10" and abs(rate - lane_gbps) < 1e-6:
            return name
    return None
