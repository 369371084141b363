"""The telemetry term any placer can use: penalties per GPU, host and domain from health and congestion.

Computed from the snapshot, vectorised, and kept in the snapshot's memo (``SnapshotMemo``: shared until a
health or node array changes), so cycles that only saw job events reuse them. A GPU's penalty grows with a DEGRADED grade and
with temperature; a host's is its worst usable GPU's plus the worst of its leaves (congested, erroring,
degraded or down uplinks). ``band`` is 1 where the penalty reaches the avoid threshold: placers sort on
the band first, so a sick host or leaf is used only when no healthy one fits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpupool.cluster.snapshot import LINK_DEGRADED, LINK_DOWN, ClusterSnapshot
from gpupool.domain.events import HealthGrade
from gpupool.scheduler.types import TelemetryWeights

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Penalties:
    gpu: FloatArray  # (hosts, max GPUs)
    host: FloatArray  # (hosts,)
    host_band: IntArray  # (hosts,) 0 healthy, 1 avoid
    domain: tuple[FloatArray, ...]  # per level of the fabric index: mean host penalty per domain
    domain_band: tuple[IntArray, ...]  # per level: 1 where any host of the domain is to be avoided
    any: bool  # False: every penalty is zero, so placers may skip the terms


def penalties(snapshot: ClusterSnapshot, w: TelemetryWeights) -> Penalties:
    """The penalties of ``snapshot`` under weights ``w`` (remembered per memo and weights)."""
    key = ("telemetry.penalties", w)
    got = snapshot.memo.get(key)
    if isinstance(got, Penalties):
        return got
    out = _penalties(snapshot, w)
    snapshot.memo.put(key, out)
    return out


def _ro(a: npt.NDArray[np.generic]) -> None:
    a.setflags(write=False)  # shared by every cycle of a memo: nobody may change it


def _penalties(snapshot: ClusterSnapshot, w: TelemetryWeights) -> Penalties:
    ix = snapshot.index
    grade = snapshot.gpu_grade
    temp = np.nan_to_num(snapshot.gpu_temperature_c, nan=0.0)
    span = max(w.temperature_to_c - w.temperature_from_c, 1e-9)
    gpu = w.degraded_gpu * (grade == int(HealthGrade.DEGRADED)) + w.hot_gpu * np.clip(
        (temp - w.temperature_from_c) / span, 0.0, 1.0
    )
    gpu = np.where(ix.gpu_exists, gpu, 0.0)
    leaf = (
        w.congested_leaf * snapshot.switch_congestion
        + w.erroring_leaf * snapshot.switch_erroring
        + w.degraded_leaf * (snapshot.switch_link_state == LINK_DEGRADED)
        + w.down_leaf * (snapshot.switch_link_state == LINK_DOWN)
    )
    hl = ix.host_leaves
    # A fabric without switches (one host's HCA cabled to nothing) has hosts but no leaf to look up.
    leaf_term = (
        np.where(hl >= 0, leaf[np.maximum(hl, 0)], 0.0).max(axis=1) if hl.size and leaf.size else np.zeros(ix.n_hosts)
    )
    host = gpu.max(axis=1, initial=0.0) + leaf_term
    band = (host >= w.avoid_threshold).astype(np.int64)
    doms: list[FloatArray] = []
    dom_bands: list[IntArray] = []
    for lv in ix.levels:
        size = np.bincount(lv.ids, minlength=lv.count)
        doms.append(np.bincount(lv.ids, weights=host, minlength=lv.count) / np.maximum(size, 1))
        dom_bands.append((np.bincount(lv.ids, weights=band, minlength=lv.count) > 0).astype(np.int64))
    out = Penalties(
        gpu=gpu.astype(np.float64),
        host=host.astype(np.float64),
        host_band=band,
        domain=tuple(doms),
        domain_band=tuple(dom_bands),
        any=bool(host.any()),
    )
    for a in (out.gpu, out.host, out.host_band, *out.domain, *out.domain_band):
        _ro(a)
    return out
