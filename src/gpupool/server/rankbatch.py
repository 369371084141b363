"""Group commit for rank reports: the reports of concurrent requests (beats and reports of many nodes) are stored
in one transaction (``Store.record_ranks``), each caller answered with the outcomes of its own reports.

A fleet reports two states per rank (running, then exited), and one transaction each made the reports' commit
rate the intake's limit. Here a caller queues its reports and then takes the commit turn: whoever holds it
stores everything queued so far in one transaction and hands each caller its outcomes; a caller whose
reports were stored by another's turn returns as soon as it gets the turn. No thread of its own and no wait
for company: a lone report is a batch of one, as before. A caller returns only after the commit that holds
its reports, so an acknowledged end is durable as before; a report is idempotent (an end is final, a repeat
changes nothing), so an agent that repeats one whose answer it never got (the server died between the
commit and the answer) changes nothing.

A batch the store refuses for one report's sake (a domain error: a job changed by another replica meanwhile)
is stored again one report at a time, so that report alone fails (not acknowledged: its agent repeats it);
a database that is away fails every caller of the batch (each agent repeats its reports).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpupool.domain.errors import GpupoolError, StoreUnavailableError
from gpupool.store.ranks import RankOutcome, RankReport

log = logging.getLogger("gpupool.server.rankbatch")

Reports = Sequence[tuple[RankReport, str]]  # (report, actor)
Outcome = RankOutcome | GpupoolError  # per report: what storing it did, or why it was not stored


@dataclass(slots=True)
class _Item:
    reports: Reports
    outcomes: list[Outcome] | None = None
    error: BaseException | None = None  # the whole batch failed (not a per-report domain error)
    done: bool = field(default=False)


class RankBatcher:
    def __init__(self, record_ranks: Callable[[Reports], list[RankOutcome]]) -> None:
        self._record_ranks = record_ranks
        self._lock = threading.Lock()  # guards the queue
        self._turn = threading.Lock()  # one commit at a time: the holder stores everything queued
        self._queue: list[_Item] = []
        self.batches = 0  # transactions that stored reports (tests and benchmarks read it)

    def record(self, reports: Reports) -> list[Outcome]:
        """Store ``reports`` (with those of concurrent callers); returns after the commit that holds them, one
        outcome per report in order. Raises what failed the whole batch (the database away)."""
        if not reports:
            return []
        item = _Item(reports)
        with self._lock:
            self._queue.append(item)
        with self._turn:
            if not item.done:
                with self._lock:
                    batch, self._queue = self._queue, []
                self._commit(batch)
        if item.error is not None:
            raise item.error
        assert item.outcomes is not None
        return item.outcomes

    def _commit(self, batch: list[_Item]) -> None:
        flat = [r for item in batch for r in item.reports]
        try:
            outcomes: list[Outcome] = list(self._record_ranks(flat))
            self.batches += 1
        except StoreUnavailableError as e:
            return self._fail(batch, e)
        except GpupoolError as e:
            if len(flat) == 1:
                outcomes = [e]
            else:
                log.info("a batch of %d rank reports was refused (%s): storing them one at a time", len(flat), e)
                try:
                    outcomes = [self._alone(r) for r in flat]
                except BaseException as e2:
                    return self._fail(batch, e2)
        except BaseException as e:
            return self._fail(batch, e)
        at = 0
        for item in batch:
            item.outcomes, at = outcomes[at : at + len(item.reports)], at + len(item.reports)
            item.done = True
        return None

    def _alone(self, report: tuple[RankReport, str]) -> Outcome:
        try:
            out = self._record_ranks([report])[0]
            self.batches += 1
            return out
        except StoreUnavailableError:
            raise
        except GpupoolError as e:
            return e

    @staticmethod
    def _fail(batch: list[_Item], e: BaseException) -> None:
        for item in batch:
            item.error, item.done = e, True
