"""The scheduling loop's journal on disk (setting ``journal_path``; off by default): every event the loop
applied to its ``ClusterState``, each cycle's inputs and decisions, as ``scheduler.journal`` records.

``gpupool sim replay JOURNAL`` feeds them to the same state, driver and scheduler and says whether every
decision comes out the same: a placement the server made can be reproduced, and explained, offline. The file
is appended to by the loop's thread only, flushed after each cycle's decisions; a restarted server appends a
new ``start``. It grows with every heartbeat's telemetry (one event per host and cycle): a tool for tests and
investigations, not for a fleet's steady state.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from gpupool.cluster import ClusterState
from gpupool.domain.errors import InputError
from gpupool.domain.events import Event
from gpupool.fabric.fabric import Fabric
from gpupool.scheduler import journal as records
from gpupool.scheduler.types import SchedulerConfig, ScheduleResult, SharingPolicy

log = logging.getLogger("gpupool.server.journal")


class NoJournal:
    """The default: nothing is written and the loop's state is a plain ``ClusterState``."""

    def new_state(self, fabric: Fabric) -> ClusterState:
        return ClusterState(fabric)

    def finished(self, job_id: str, service_gpu_s: float) -> None:
        return None

    def cycle(self, now_s: float, pending: Iterable[str], sharing: SharingPolicy) -> None:
        return None

    def decided(self, result: ScheduleResult) -> None:
        return None

    def close(self) -> None:
        return None


class Journal(NoJournal):
    """Writes records for one loop (not thread-safe: the loop's thread owns it)."""

    def __init__(self, path: str | Path, config: SchedulerConfig, usage_half_life_s: float) -> None:
        self._path = str(path)
        try:
            # Open for the loop's life (closed by ``close`` when the loop stops), not one write.
            self._file: IO[str] | None = Path(path).open("a", encoding="utf-8")  # noqa: SIM115
        except OSError as e:
            raise InputError(f"cannot open the journal: {e.strerror}", source=f"journal_path {path}") from None
        self._fabric: Fabric | None = None  # the last fabric written, and its id (records name it by id)
        self._fabric_id = -1
        self._sharing: SharingPolicy | None = None
        self._write(records.start(config, usage_half_life_s))

    def new_state(self, fabric: Fabric) -> ClusterState:
        """An empty state on ``fabric`` whose every accepted event is journaled."""
        if fabric is not self._fabric:
            self._fabric, self._fabric_id = fabric, self._fabric_id + 1
            self._write(records.fabric(self._fabric_id, fabric))
        self._write(records.state(self._fabric_id))
        return _JournaledState(fabric, self)

    def event(self, e: Event) -> None:
        self._write(records.event(e))

    def finished(self, job_id: str, service_gpu_s: float) -> None:
        self._write(records.finished(job_id, service_gpu_s))

    def cycle(self, now_s: float, pending: Iterable[str], sharing: SharingPolicy) -> None:
        if sharing != self._sharing:
            self._write(records.sharing_record(sharing))
            self._sharing = sharing
        self._write(records.cycle(now_s, pending))

    def decided(self, result: ScheduleResult) -> None:
        self._write(records.decided(result))
        if self._file is not None:
            try:
                self._file.flush()
            except OSError as e:
                self._stop(e)

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()

    def _write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            return
        try:
            self._file.write(records.line(record))
        except OSError as e:
            self._stop(e)

    def _stop(self, e: OSError) -> None:
        """A journal that cannot be written (a full disk) must not stop scheduling: it ends here, said once.
        What it holds up to the failure still replays; nothing is written after a gap."""
        log.error("the journal %s stops here: %s; the loop goes on without it", self._path, e.strerror or e)
        with contextlib.suppress(OSError):
            assert self._file is not None
            self._file.close()
        self._file = None


class _JournaledState(ClusterState):
    """A ``ClusterState`` that journals each event it accepted (one refused is not part of the state)."""

    def __init__(self, fabric: Fabric, journal: Journal) -> None:
        super().__init__(fabric)
        self._journal = journal

    def apply(self, event: Event) -> None:
        super().apply(event)
        self._journal.event(event)
