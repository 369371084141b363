"""InfiniBand probe: port state and counters from ``/sys/class/infiniband``, turned into rates.

Counter facts (IBA spec vol. 1, PortCounters and PortCountersExtended; Linux ``drivers/infiniband/core/sysfs.c``):
``port_xmit_data`` / ``port_rcv_data`` count 4-byte words, so bytes = 4 x delta. The kernel shows the 64-bit
extended counters where the HCA has them (every ConnectX of the last decade), else the 32-bit PortCounters
ones; ``port_xmit_wait`` is 32-bit. The spec says PMA counters stop at all-ones (saturate) rather than wrap,
but some HCAs and firmware do wrap; so: a decrease of a 32-bit counter that a wrap explains at a plausible
rate is a wrap, any other decrease is a reset (rate undefined: None, never negative), and a counter pinned at
its maximum is saturated (None: it no longer counts). The narrow error counters (4, 8, 16 bits) saturate.
A counter missing from either sample is missing from the rates: absent is not zero.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from gpupool.domain.errors import ParseError
from gpupool.domain.events import LinkState
from gpupool.fabric.parsers.ibstat import parse_rate_text, parse_state_text
from gpupool.fabric.parsers.sysfs import SysfsPort, read_sysfs_infiniband

# Width in bits of the PortCounters field behind each sysfs counter (IBA vol. 1, 16.1.3.5).
COUNTER_BITS: Mapping[str, int] = MappingProxyType(
    {
        "symbol_error": 16,
        "link_error_recovery": 8,
        "link_downed": 8,
        "port_rcv_errors": 16,
        "port_rcv_remote_physical_errors": 16,
        "port_rcv_switch_relay_errors": 16,
        "port_xmit_discards": 16,
        "port_xmit_constraint_errors": 8,
        "port_rcv_constraint_errors": 8,
        "local_link_integrity_errors": 4,
        "excessive_buffer_overrun_errors": 4,
        "VL15_dropped": 16,
        "port_xmit_wait": 32,
        # 32 bits in PortCounters, 64 in PortCountersExtended: a value above 2^32 proves the wide one.
        "port_xmit_data": 32,
        "port_rcv_data": 32,
        "port_xmit_packets": 32,
        "port_rcv_packets": 32,
    }
)
WRAPPING = frozenset({"port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets", "port_xmit_wait"})
DATA_WORD_COUNTERS = frozenset({"port_xmit_data", "port_rcv_data"})
ERROR_COUNTERS = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
)
_RATE_MARGIN = 1.25  # a link never carries more than its signalling rate; the margin absorbs sample jitter


@dataclass(frozen=True, slots=True)
class PortSample:
    """One port at one instant of the caller's clock (``at_s``; monotonic seconds)."""

    device: str  # "mlx5_0"
    port: int
    at_s: float
    state: str  # "ACTIVE"
    phys_state: str  # "LinkUp"
    rate_gbps: float
    link_layer: str  # "InfiniBand" or "Ethernet"
    counters: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def usable_for_ib(self) -> bool:
        """Only InfiniBand ports carry IB placement; a RoCE/Ethernet port is reported but never placed on."""
        return self.link_layer.lower() == "infiniband"

    @property
    def link_state(self) -> LinkState:
        return LinkState.UP if self.state == "ACTIVE" and self.phys_state == "LinkUp" else LinkState.DOWN


@dataclass(frozen=True, slots=True)
class PortRates:
    """Per-second rates between two samples of one port. ``per_s`` holds every counter present in both
    samples: a float, or None where the interval's rate is undefined (reset, saturated, no time passed)."""

    sample: PortSample  # the later one
    interval_s: float
    per_s: Mapping[str, float | None]

    def _bytes(self, name: str) -> float | None:
        words = self.per_s.get(name)
        return None if words is None else 4.0 * words

    @property
    def xmit_bytes_per_s(self) -> float | None:
        return self._bytes("port_xmit_data")

    @property
    def rcv_bytes_per_s(self) -> float | None:
        return self._bytes("port_rcv_data")

    @property
    def xmit_wait_per_s(self) -> float | None:
        return self.per_s.get("port_xmit_wait")

    @property
    def errors_per_s(self) -> Mapping[str, float | None]:
        return MappingProxyType({k: self.per_s[k] for k in ERROR_COUNTERS if k in self.per_s})


def _max_words_per_s(rate_gbps: float) -> float:
    return rate_gbps * 1e9 / 8 / 4 * _RATE_MARGIN


def counter_delta(name: str, prev: int, cur: int, interval_s: float, rate_gbps: float = 0.0) -> int | None:
    """How much ``name`` grew from ``prev`` to ``cur``; None when that cannot be known (see module doc)."""
    bits = COUNTER_BITS.get(name)
    if bits is not None and prev == cur == (1 << bits) - 1:
        return None  # pinned at all-ones: saturated, it no longer counts
    if cur >= prev:
        return cur - prev
    if name not in WRAPPING or bits is None or prev >= 1 << bits:
        return None  # a narrow (saturating) counter or a 64-bit one went down: reset
    wrapped = cur + (1 << bits) - prev
    if name in DATA_WORD_COUNTERS and rate_gbps > 0:
        plausible = wrapped <= _max_words_per_s(rate_gbps) * interval_s
    else:
        plausible = wrapped <= 1 << (bits - 1)  # went less than half way round: a wrap, not a reset
    return wrapped if plausible else None


def port_rates(prev: PortSample, cur: PortSample) -> PortRates:
    """Rates between two samples of the same port (``prev`` earlier)."""
    dt = cur.at_s - prev.at_s
    per_s: dict[str, float | None] = {}
    for name, now in cur.counters.items():
        before = prev.counters.get(name)
        if before is None:
            continue
        delta = counter_delta(name, before, now, dt, cur.rate_gbps) if dt > 0 else None
        per_s[name] = None if delta is None else delta / dt
    return PortRates(sample=cur, interval_s=dt, per_s=MappingProxyType(per_s))


def _sample(device: str, p: SysfsPort, at_s: float) -> PortSample:
    return PortSample(
        device=device,
        port=p.port,
        at_s=at_s,
        state=p.state,
        phys_state=p.phys_state,
        rate_gbps=p.rate_gbps,
        link_layer=p.link_layer,
        counters=p.counters,
    )


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().decode("ascii", errors="replace").strip()
    except OSError:
        return None  # absent, or a counter the firmware refuses to read: absent either way


class SysfsIbProbe:
    """Samples every port under ``root`` (``/sys/class/infiniband`` or the emulated node's copy).

    ``sample(at_s)`` reads; ``rates(at_s)`` reads and returns the rates since the previous call (empty the
    first time, and for a port that appeared since). The clock is the caller's, so tests need no sleeping.

    The first sample reads the whole tree with the fabric's ``read_sysfs_infiniband``. Later ones read only
    what changes (the four port state files and ``counters/``), about a third of the files on a real mlx5
    node (no identity files, no 26 ``hw_counters``); reading an IB counter costs the HCA a MAD query.
    Anything unexpected (a device added or gone, a file missing) falls back to the full reader, whose
    errors name the file.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._last: dict[tuple[str, int], PortSample] = {}
        self._layout: tuple[str, ...] = ()  # device names the fast path may assume
        self._ports: tuple[tuple[str, int], ...] = ()

    def _full(self, at_s: float) -> tuple[PortSample, ...]:
        devices = read_sysfs_infiniband(self.root)
        self._layout = tuple(d.name for d in devices)
        self._ports = tuple((d.name, p.port) for d in devices for p in d.ports)
        return tuple(_sample(d.name, p, at_s) for d in devices for p in d.ports)

    def _fast_port(self, device: str, port: int, at_s: float) -> PortSample | None:
        base = os.path.join(self.root, device, "ports", str(port))
        state, phys, rate, layer = (_read(os.path.join(base, n)) for n in ("state", "phys_state", "rate", "link_layer"))
        if state is None or phys is None or rate is None or layer is None:
            return None
        counters: dict[str, int] = {}
        cdir = os.path.join(base, "counters")
        try:
            names = os.listdir(cdir)
        except OSError:
            names = []
        for name in names:
            value = _read(os.path.join(cdir, name))
            if value is None:
                continue
            if not value.isdigit():
                raise ParseError(f"counters/{name}: {value!r} is not a number", source=os.path.join(cdir, name))
            counters[name] = int(value)
        return PortSample(
            device=device,
            port=port,
            at_s=at_s,
            state=parse_state_text(state, "state", source=os.path.join(base, "state"), line=None)[1],
            phys_state=parse_state_text(phys, "phys_state", source=os.path.join(base, "phys_state"), line=None)[1],
            rate_gbps=parse_rate_text(rate, source=os.path.join(base, "rate"), line=None)[0],
            link_layer=layer,
            counters=MappingProxyType(counters),
        )

    def sample(self, at_s: float) -> tuple[PortSample, ...]:
        if not self._layout or tuple(sorted(os.listdir(self.root))) != tuple(sorted(self._layout)):
            return self._full(at_s)
        out = []
        for device, port in self._ports:
            s = self._fast_port(device, port, at_s)
            if s is None:
                return self._full(at_s)
            out.append(s)
        return tuple(out)

    @property
    def latest(self) -> tuple[PortSample, ...]:
        """The samples the last ``rates`` call read: every port, including those without rates yet."""
        return tuple(self._last.values())

    def rates(self, at_s: float) -> tuple[PortRates, ...]:
        samples = self.sample(at_s)
        out = []
        for s in samples:
            prev = self._last.get((s.device, s.port))
            if prev is not None:
                out.append(port_rates(prev, s))
        self._last = {(s.device, s.port): s for s in samples}
        return tuple(out)
