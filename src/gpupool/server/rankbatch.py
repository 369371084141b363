"""Rank reports' group commit: the reports of concurrent requests (beats and reports of many nodes) are stored in
one transaction (``groupcommit.GroupCommit`` over ``Store.record_ranks``), each caller answered with the
outcomes of its own reports.

A fleet reports two states per rank (running, then exited), and one transaction each made the reports' commit rate
the intake's limit. A request (a report, or a beat carrying states) waits for the commit on the event loop
(``stored``), holding no beat worker while the writer thread commits, and returns only after the commit that
holds its reports, so an acknowledged end is durable as before; a report is idempotent (an end is final, a repeat changes nothing), so an
agent that repeats one whose answer it never got changes nothing. A report refused alone (a job another replica
changed meanwhile) is that report's outcome, not acknowledged: its agent repeats it. A database that is away is not
waited for (no retry): every caller of the batch gets the error, and each agent repeats its reports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future

from gpupool.domain.errors import GpupoolError, StoreUnavailableError
from gpupool.server.groupcommit import GroupCommit
from gpupool.store.ranks import RankOutcome, RankReport

Report = tuple[RankReport, str]  # (report, actor)
Outcome = RankOutcome | GpupoolError  # per report: what storing it did, or why it alone was not stored


class RankBatcher:
    def __init__(self, record_ranks: Callable[[Sequence[Report]], list[RankOutcome]]) -> None:
        # One writer: one transaction at a time, as the reports' jobs are locked together.
        self._commit: GroupCommit[Report, RankOutcome] = GroupCommit(
            lambda reports, _retrying: record_ranks(reports),
            name="gpupool-rank-reports",
            full=lambda n: StoreUnavailableError(f"{n} rank reports are waiting", reason="busy", transient=True),
        )

    @property
    def batches(self) -> int:
        """Transactions that stored reports (tests and benchmarks read it)."""
        return self._commit.batches

    def close(self) -> None:
        self._commit.close()

    async def stored(self, reports: Sequence[Report]) -> list[Outcome]:
        """Store ``reports`` (with those of concurrent callers); returns after the commit that holds them, one
        outcome per report in order. Raises what failed the whole batch (the database away)."""
        return _outcomes(await self._commit.stored(reports))


def _outcomes(futs: Sequence[Future[RankOutcome]]) -> list[Outcome]:
    """One outcome per done future, in order; raises what failed the whole batch (the database away)."""
    out: list[Outcome] = []
    for fut in futs:
        e = fut.exception()
        if e is None:
            out.append(fut.result())
        elif isinstance(e, GpupoolError) and not isinstance(e, StoreUnavailableError):
            out.append(e)  # refused alone
        else:
            raise e
    return out
