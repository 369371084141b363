"""Durable commands for agents: what the stored assignments cannot say (a checkpoint signal), kept until done.

Launches and stops are derived from the assignments by whichever replica an agent talks to; a signal is an
event, so it is a row (``AgentCommandRow``): queued by the scheduling loop under its lease (``fence``), sent
by any replica on every reply to the agent until the agent reports it carried it out (``ack_commands``),
then kept, marked done (``done_s``), so that a new leader deciding the same checkpoint again finds the rank
signalled already. The agent carries out a command id at most once, so a repeat (a replica whose cache is a
moment old, a reply lost on the way) is harmless. A command dies with its rank's row (``ON DELETE CASCADE``):
a rank whose process is gone needs no signal.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gpupool.store.base import StoreBase, dumps, loads
from gpupool.store.fencing import Fence
from gpupool.store.ranks import parse_assignment_id
from gpupool.store.rows import AgentCommandRow, AllocationRow


@dataclass(frozen=True, slots=True)
class AgentCommand:
    """A stored command for ``host``'s agent; ``command_id`` names it on the wire (a decimal number)."""

    command_id: str
    host: str
    assignment_id: str
    kind: str
    payload: dict[str, Any]


def _command(row: AgentCommandRow) -> AgentCommand:
    payload = loads(row.payload, f"agent command {row.id}")
    return AgentCommand(
        str(row.id),
        row.host,
        f"{row.job_id}.{row.assignment}.{row.task_index}",
        row.kind,
        payload if isinstance(payload, dict) else {},
    )


class CommandsMixin(StoreBase):
    def queue_signals(
        self, assignment_ids: Sequence[str], signal: str = "checkpoint", *, fence: Fence | None = None
    ) -> list[AgentCommand]:
        """A ``signal`` command for each named rank that still has its row (others are gone: nothing to
        signal), in one transaction; ``fence``: the scheduling loop's lease, checked first. A rank that already
        has the same signal stored gets no second one: a new leader, whose cycle decides again the checkpoint
        its predecessor stored, must not double it. A pending one is returned; one carried out is not (there is
        nothing more to send)."""
        with self._tx(write=True, fence=fence) as s:
            rows = self._signal_rows(s, assignment_ids, signal, fence)
            s.flush()  # the ids
            return [_command(r) for r in rows]

    def _signal_rows(
        self, s: Session, assignment_ids: Sequence[str], signal: str, fence: Fence | None
    ) -> list[AgentCommandRow]:
        now = self._clock()
        out = []
        for key in map(parse_assignment_id, assignment_ids):
            rank = None if key is None else s.get(AllocationRow, key)
            if rank is None:
                continue
            payload = dumps({"signal": signal})
            stored = s.scalars(
                select(AgentCommandRow).where(
                    AgentCommandRow.job_id == rank.job_id,
                    AgentCommandRow.assignment == rank.assignment,
                    AgentCommandRow.task_index == rank.task_index,
                    AgentCommandRow.kind == "signal",
                    AgentCommandRow.payload == payload,
                )
            ).first()
            if stored is not None:
                if stored.done_s is None:
                    out.append(stored)
                continue
            row = AgentCommandRow(
                host=rank.host,
                job_id=rank.job_id,
                assignment=rank.assignment,
                task_index=rank.task_index,
                kind="signal",
                payload=payload,
                created_s=now,
                leader_token=None if fence is None else fence.token,
            )
            s.add(row)
            out.append(row)
        return out

    def agent_commands(self) -> dict[str, tuple[AgentCommand, ...]]:
        """Every stored command not yet carried out, per host, oldest first: one read for all hosts (the host
        cache's reload)."""
        by_host: dict[str, list[AgentCommand]] = defaultdict(list)
        with self._tx(write=False) as s:
            pending = select(AgentCommandRow).where(AgentCommandRow.done_s.is_(None)).order_by(AgentCommandRow.id)
            for row in s.scalars(pending):
                by_host[row.host].append(_command(row))
        return {h: tuple(c) for h, c in by_host.items()}

    def ack_commands(self, host: str, command_ids: Collection[str]) -> int:
        """``host``'s agent carried these out: mark them done (another host's ids are left alone). How many."""
        ids = [int(c) for c in command_ids if c.isdigit()]
        if not ids:
            return 0
        with self._tx(write=True) as s:
            done = s.execute(
                update(AgentCommandRow)
                .where(AgentCommandRow.host == host, AgentCommandRow.id.in_(ids), AgentCommandRow.done_s.is_(None))
                .values(done_s=self._clock())
                .execution_options(synchronize_session=False)
            )
            return int(getattr(done, "rowcount", 0) or 0)
