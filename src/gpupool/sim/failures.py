"""A failure trace: failures at given times instead of (or beside) the rates' random draws.

Text, one failure per line, comma-separated ``time_s,kind,host[,gpu]``; blank lines and ``#`` comments
are skipped, and so is a first line that starts with ``time``. Kinds:

- ``gpu``: GPU ``gpu`` (0-based index on the host) fails (an XID): its jobs are preempted;
- ``host``: the host is lost: its jobs go back to the queue;
- ``leaf``: the leaf switch(es) above the host go down: multi-host jobs under them are preempted.

Each failed part is repaired ``repair_s`` later (``FailureRates.repair_s``), as the drawn failures are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from gpupool.domain.errors import ParseError
from gpupool.fabric.fabric import Fabric


class FailureKind(StrEnum):
    GPU = "gpu"
    HOST = "host"
    LEAF = "leaf"


@dataclass(frozen=True, slots=True)
class FailureEvent:
    time_s: float
    kind: FailureKind
    host: int  # host index in the fabric
    gpu: int = -1  # GPU index on the host (``gpu`` failures only)


def parse_failures(text: str, source: str, fabric: Fabric) -> tuple[FailureEvent, ...]:
    """Parse a failure trace for ``fabric``; a bad line raises ParseError naming ``source`` and the line."""
    out: list[FailureEvent] = []
    kinds = ", ".join(k.value for k in FailureKind)
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line or (n == 1 and line.lower().startswith("time")):
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) not in (3, 4):
            raise ParseError(f"expected time_s,kind,host[,gpu], got {len(parts)} fields", source=source, line=n)
        try:
            t = float(parts[0])
        except ValueError:
            raise ParseError(f"time_s is not a number: {parts[0]!r}", source=source, line=n) from None
        if not math.isfinite(t) or t < 0:
            raise ParseError(f"time_s must be a finite number >= 0, got {parts[0]!r}", source=source, line=n)
        try:
            kind = FailureKind(parts[1].lower())
        except ValueError:
            raise ParseError(f"unknown kind {parts[1]!r}; kinds are {kinds}", source=source, line=n) from None
        if not fabric.has_host(parts[2]):
            raise ParseError(f"unknown host {parts[2]!r} (not in fabric {fabric.name})", source=source, line=n)
        h = fabric.host_index(parts[2])
        gpu = -1
        if kind is FailureKind.GPU:
            count = fabric.hosts[h].gpu_count
            if len(parts) != 4 or not parts[3].isdigit() or int(parts[3]) >= count:
                raise ParseError(
                    f"a gpu failure needs a GPU index from 0 to {count - 1} on {parts[2]}, got "
                    f"{parts[3] if len(parts) == 4 else 'none'!r}",
                    source=source,
                    line=n,
                )
            gpu = int(parts[3])
        elif len(parts) == 4:
            raise ParseError(
                f"only gpu failures name a GPU; a {kind.value} failure has 3 fields", source=source, line=n
            )
        out.append(FailureEvent(t, kind, h, gpu))
    return tuple(sorted(out, key=lambda e: e.time_s))
