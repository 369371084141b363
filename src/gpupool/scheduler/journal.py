"""The scheduling loop's journal: what one loop applied to its state and what it decided, as JSON lines.

The server writes it (``server.journal``, setting ``journal_path``); ``gpupool sim replay`` (``sim.replay``)
feeds the same events to a fresh ``ClusterState``, runs the same ``CycleDriver`` and scheduler at each cycle
and reports any decision that differs. Both sides build and read records here, with one codec
(``domain.codec``) over the domain's and the scheduler's own types; this module does no I/O.

One JSON object per line, in the order things happened in the loop:

- ``start``: ``config`` (``SchedulerConfig``), ``usage_half_life_s``, ``version``: a loop began.
- ``fabric``: ``id``, ``fabric`` (``fabric.jsonio`` document): a fabric, written once before first used.
- ``state``: ``fabric`` (an id): a new, empty ``ClusterState`` on it (the loop rebuilt its state).
- ``event``: ``event``: one event applied to the current state (only those it accepted).
- ``finished``: ``job``, ``service_gpu_s``: the driver learnt a completion (``CycleDriver.finished``).
- ``sharing``: ``sharing`` (``SharingPolicy``): the sharing rules from the next cycle on.
- ``cycle``: ``now_s``, ``pending`` (job ids, in the order given): ``run_cycle`` on the state as it is now.
- ``decided``: ``result`` (``ScheduleResult``): what that cycle decided; the events its actuator applied
  were written between the two.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.domain import events
from gpupool.domain.codec import Codec, reachable
from gpupool.domain.errors import GpupoolError, ParseError
from gpupool.fabric import jsonio
from gpupool.fabric.fabric import Fabric
from gpupool.scheduler import types

VERSION = 1
KINDS = ("start", "fabric", "state", "event", "finished", "sharing", "cycle", "decided")

# Every type an event, the scheduler's configuration and sharing rules, or a cycle's result can hold.
CODEC = Codec(reachable([events.Event, types.SchedulerConfig, types.SharingPolicy, types.ScheduleResult]))


def start(config: types.SchedulerConfig, usage_half_life_s: float) -> dict[str, Any]:
    return {"kind": "start", "version": VERSION, "config": CODEC.encode(config), "usage_half_life_s": usage_half_life_s}


def fabric(fabric_id: int, fab: Fabric) -> dict[str, Any]:
    return {"kind": "fabric", "id": fabric_id, "fabric": jsonio.to_dict(fab)}


def state(fabric_id: int) -> dict[str, Any]:
    return {"kind": "state", "fabric": fabric_id}


def event(e: events.Event) -> dict[str, Any]:
    return {"kind": "event", "event": CODEC.encode(e)}


def finished(job_id: str, service_gpu_s: float) -> dict[str, Any]:
    return {"kind": "finished", "job": job_id, "service_gpu_s": service_gpu_s}


def sharing_record(policy: types.SharingPolicy) -> dict[str, Any]:
    return {"kind": "sharing", "sharing": CODEC.encode(policy)}


def cycle(now_s: float, pending: Iterable[str]) -> dict[str, Any]:
    return {"kind": "cycle", "now_s": now_s, "pending": list(pending)}


def decided(result: types.ScheduleResult) -> dict[str, Any]:
    return {"kind": "decided", "result": CODEC.encode(result)}


def line(record: dict[str, Any]) -> str:
    """One record as its line (NaN temperatures stay NaN: ``json`` reads them back)."""
    return json.dumps(record, separators=(",", ":")) + "\n"


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded line: its ``kind``, 1-based ``line``, the one object the kind carries decoded (``value``:
    the config, fabric, event, sharing policy or result; None for the others) and its raw ``fields``."""

    kind: str
    line: int
    value: Any
    fields: Mapping[str, Any]


_VALUE = {"start": "config", "event": "event", "sharing": "sharing", "decided": "result"}


def read(lines: Iterable[str], source: str) -> Iterator[Record]:
    """The records of a journal's lines; ``ParseError`` at the first line that is not one. A last line without
    its newline is one the server is still writing: it is left out (a cycle without its decisions, too)."""
    for no, text in enumerate(lines, start=1):
        if not text.endswith("\n") or not text.strip():
            continue
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ParseError(f"not JSON: {e.msg}", source=source, line=no) from None
        kind = data.get("kind") if isinstance(data, dict) else None
        if kind not in KINDS:
            expected = ", ".join(KINDS)
            raise ParseError(f"not a journal record (kind {kind!r}; expected {expected})", source=source, line=no)
        if kind == "start" and data.get("version") != VERSION:
            got = data.get("version")
            raise ParseError(f"journal version {got!r}; this gpupool reads {VERSION}", source=source, line=no)
        try:
            value: Any = None
            if kind == "fabric":
                value = jsonio.from_dict(data["fabric"], source=f"{source}:{no}")
            elif kind in _VALUE:
                value = CODEC.decode(data[_VALUE[kind]], _VALUE[kind])
        except (KeyError, ValueError, TypeError, GpupoolError) as e:
            raise ParseError(f"bad {kind} record: {e}", source=source, line=no) from None
        yield Record(kind, no, value, data)
