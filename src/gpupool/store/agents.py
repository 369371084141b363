"""Agents' registrations: who may register a node's name, its node token, the log server's URL, its inventory.

A join token registers a new name (taking one of its uses) or the name of a node that is not live; the
node's own token or an admin registers any name (``AgentRegistry.register_agent``). Node tokens are kept as
SHA-256 hashes like every token (``tokens``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpupool.domain.errors import JoinTokenSpentError, NodeNameTakenError, NotFoundError
from gpupool.domain.states import NodeState
from gpupool.store import tokens
from gpupool.store.base import dumps, loads
from gpupool.store.rows import AgentRow, NodeRow
from gpupool.store.store import Store


@dataclass(frozen=True, slots=True)
class AgentRecord:
    host: str
    agent_url: str
    address: str
    inventory: dict[str, Any]
    registered_s: float


@dataclass(frozen=True, slots=True)
class Registrant:
    """Who registers a node: an agent with a join token or with the node's own token (``token_id``: that
    token's id), or an admin (``token_id``: the admin's)."""

    kind: Literal["join", "node", "admin"]
    token_id: str


class AgentRegistry:
    """The registration use cases, on ``store``'s engine."""

    store: Store
    _dbapi_integrity: type[Exception]

    def register_agent(
        self,
        host: str,
        *,
        by: Registrant,
        log_url: str,
        address: str,
        inventory: Mapping[str, Any],
        actor: str,
        live_within_s: float,
    ) -> str:
        """Record an agent's registration and give it a new node token (clear text, shown once).

        With a join token (``by.kind == "join"``) a new name takes one of the token's uses, and a name already
        registered is refused (NodeNameTakenError) while its node is live: not lost and beating within
        ``live_within_s``; a node that is not live may be registered again with any usable join token, taking
        no use. With the node's own token (checked by the caller, and here that it is still the current one)
        or as an admin, any name. Decided in the registration's own transaction, so two racing for one name
        or for a token's last use cannot both win.
        """
        made = tokens.new_token("gpn")
        st = self.store
        try:
            with st._tx(write=True) as s:
                now = st._clock()
                row = s.get(AgentRow, host, with_for_update=st._postgres)
                self._may_register(s, host, row, by, now, live_within_s)
                if row is None:
                    row = AgentRow(host=host, registered_s=now)
                    s.add(row)
                row.token_id, row.token_hash = made.id, made.hashed
                row.agent_url, row.address, row.inventory, row.registered_s = (
                    log_url,
                    address,
                    dumps(dict(inventory)),
                    now,
                )
                data = {"agent_url": log_url, "address": address, "token_id": made.id}
                data |= {"by": by.kind, "by_token": by.token_id}
                st._audit(s, actor, "agent.registered", f"node/{host}", data, now)
        except (IntegrityError, self._dbapi_integrity):
            raise NodeNameTakenError(f"node {host!r} was registered by another agent at the same time") from None
        return made.clear

    @staticmethod
    def _may_register(
        s: Session, host: str, row: AgentRow | None, by: Registrant, now: float, live_within_s: float
    ) -> None:
        if by.kind == "node":
            if row is None or row.token_id != by.token_id:
                raise NodeNameTakenError(f"node {host!r}: that node token is no longer its current one")
            return
        if by.kind != "join":
            return  # an admin
        node = s.get(NodeRow, host)
        if row is None and node is None:
            if not tokens.spend_join_token(s, by.token_id, now):
                raise JoinTokenSpentError(
                    f"join token {by.token_id} has registered as many new nodes as it may (or was revoked)"
                )
            return
        seen = None if node is None or node.state == NodeState.LOST.value else node.last_heartbeat_s
        if seen is not None and now - seen < live_within_s:
            raise NodeNameTakenError(
                f"node {host!r} is registered and live (last heartbeat {now - seen:.0f} s ago): registering its name "
                "again needs its node token or an admin token, or wait until it is lost"
            )

    def check_node_token(self, host: str, clear: str) -> str | None:
        """The stored hash ``clear`` matched (so a caller may cache the check while that hash stands), or None."""
        parts = tokens.split_token(clear, "gpn")
        if parts is None:
            return None
        found = self.node_token_hash(host)
        if found is None or found[0] != parts[0]:
            return None
        return found[1] if tokens.verify_secret(parts[1], found[1]) else None

    def node_token_hashes(self) -> dict[str, str]:
        """Every host's current node-token hash, in one read (the gateway's cache compares against it)."""
        with self.store._tx(write=False) as s:
            return {h: t for h, t in s.execute(select(AgentRow.host, AgentRow.token_hash))}

    def node_token_hash(self, host: str) -> tuple[str, str] | None:
        """``(token id, token hash)`` of ``host``'s current node token, or None: one indexed read, no hashing."""
        with self.store._tx(write=False) as s:
            row = s.get(AgentRow, host)
            return None if row is None else (row.token_id, row.token_hash)

    def agents(self) -> list[AgentRecord]:
        with self.store._tx(write=False) as s:
            rows = s.scalars(select(AgentRow).order_by(AgentRow.host)).all()
            return [
                AgentRecord(r.host, r.agent_url, r.address, loads(r.inventory, f"agent {r.host}"), r.registered_s)
                for r in rows
            ]

    def agent(self, host: str) -> AgentRecord:
        with self.store._tx(write=False) as s:
            r = s.get(AgentRow, host)
            if r is None:
                raise NotFoundError(f"no agent registered for node {host!r}")
            return AgentRecord(r.host, r.agent_url, r.address, loads(r.inventory, f"agent {r.host}"), r.registered_s)
