"""The fencing check every write of the scheduling loop makes first, and the database's clock it judges by.

A ``Fence`` is what a leader holds: the cluster name, its replica id and the token of its current lease
(``store.lease``). A transaction opened with a fence (``StoreBase._tx(write=True, fence=...)``) runs the
check as its first statement and is refused with ``StaleLeaderError`` unless the lease row still names this
holder and token and has not expired on the DATABASE's clock, so a leader's own clock (or a pause) cannot
fool it. PostgreSQL: the check takes the row ``FOR SHARE``, which a takeover's ``UPDATE`` waits for, so a
fenced transaction either commits before the takeover or is refused after it. SQLite: the transaction already
holds the one write lock (``BEGIN IMMEDIATE``), so no takeover can commit between the check and the commit.

A leader paused (SIGSTOP) or cut off inside such a transaction would hold the row, and so the takeover, as long
as its pause: every transaction that locks the leadership row (this check, the lease's own statements) lowers
PostgreSQL's idle-in-transaction limit for itself to ``LEASE_IDLE_S``, below the lease's 6 s, so the database
ends it and frees the row. Only these: the sessions' own limit (``engine.IDLE_IN_TRANSACTION_S``) is longer,
since a live process under load stalls for seconds between two statements and must not lose its transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

from gpupool.domain.errors import StaleLeaderError


@dataclass(frozen=True, slots=True)
class Fence:
    """A leader's credentials for its writes: ``token`` grows with every takeover of ``cluster``'s lease."""

    cluster: str
    holder: str
    token: int


# How long a transaction that locks the leadership row may sit idle (PostgreSQL): SET LOCAL, this transaction only.
LEASE_IDLE_S = 5
_LEASE_IDLE = f"set_config('idle_in_transaction_session_timeout', '{LEASE_IDLE_S * 1000}', true)"


def db_now(postgres: bool) -> str:
    """SQL for the database's current time in seconds since the epoch (a float), read when the statement runs."""
    if postgres:
        return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"
    return "((julianday('now') - 2440587.5) * 86400.0)"


def lease_idle_limit(conn: Connection, postgres: bool) -> None:
    """Give the open transaction ``LEASE_IDLE_S`` of idleness (PostgreSQL), before it locks the leadership row."""
    if postgres:
        conn.execute(text(f"SELECT {_LEASE_IDLE}"))


def _check_sql(postgres: bool) -> str:
    # PostgreSQL: the short idle limit is set by the check itself (no round trip of its own), in the statement
    # that takes the row; a check that finds no row refuses the transaction anyway.
    limit, lock = (f", {_LEASE_IDLE}", " FOR SHARE") if postgres else ("", "")
    return (
        f"SELECT token{limit} FROM leadership WHERE cluster = :cluster AND holder = :holder AND token = :token"
        f" AND expires_s > {db_now(postgres)}{lock}"
    )


_CHECK = {False: text(_check_sql(False)), True: text(_check_sql(True))}


def check_fence(conn: Connection | Session, fence: Fence, postgres: bool) -> None:
    """Refuse the open transaction unless ``fence`` is the current, unexpired lease (StaleLeaderError)."""
    params = {"cluster": fence.cluster, "holder": fence.holder, "token": fence.token}
    if conn.execute(_CHECK[postgres], params).first() is None:
        raise StaleLeaderError(
            f"the leadership of cluster {fence.cluster!r} under token {fence.token} is no longer {fence.holder}'s: "
            "another replica took over or the lease expired; this write is refused"
        )
