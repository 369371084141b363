"""The scheduling loop's leadership lease: take it over once expired, renew it while held, give it up.

One row per cluster name (``LeadershipRow``). Every judgement of expiry uses the database's clock inside the
statement (``fencing.db_now``), never a replica's, so replicas with skewed clocks agree. A takeover bumps the
token; a renewal is guarded by holder, token and not-yet-expired, so a leader that lost its lease can never
renew its way back in under the old token: it must take over anew (a new token) once the lease is free.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text

from gpupool.domain.errors import InputError
from gpupool.store.base import StoreBase
from gpupool.store.fencing import Fence, db_now, lease_idle_limit


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The lease of one cluster as stored, with the database's time when it was read."""

    cluster: str
    holder: str
    token: int
    expires_s: float
    acquired_s: float
    db_now_s: float

    @property
    def live(self) -> bool:
        return self.expires_s > self.db_now_s


class LeaseMixin(StoreBase):
    def take_lease(self, cluster: str, holder: str, ttl_s: float) -> Fence | None:
        """Become ``cluster``'s leader if its lease has expired (or never existed): the new token, else None."""
        if not cluster or not holder or ttl_s <= 0:
            raise InputError("a lease needs a cluster name, a holder and a positive ttl", source="leadership")
        now = db_now(self._postgres)
        with self._core_tx(write=True) as conn:
            lease_idle_limit(conn, self._postgres)
            conn.execute(
                text(
                    "INSERT INTO leadership (cluster, holder, token, expires_s, acquired_s)"
                    " VALUES (:c, '', 0, 0, 0) ON CONFLICT (cluster) DO NOTHING"
                ),
                {"c": cluster},
            )
            token = conn.execute(
                text(
                    f"UPDATE leadership SET holder = :h, token = token + 1, expires_s = {now} + :ttl,"
                    f" acquired_s = {now} WHERE cluster = :c AND expires_s <= {now} RETURNING token"
                ),
                {"c": cluster, "h": holder, "ttl": float(ttl_s)},
            ).scalar()
        return None if token is None else Fence(cluster, holder, int(token))

    def renew_lease(self, fence: Fence, ttl_s: float) -> bool:
        """Extend ``fence``'s lease by ``ttl_s`` from now; False when it is no longer the current, live lease."""
        now = db_now(self._postgres)
        with self._core_tx(write=True) as conn:
            lease_idle_limit(conn, self._postgres)
            done = conn.execute(
                text(
                    f"UPDATE leadership SET expires_s = {now} + :ttl WHERE cluster = :c AND holder = :h"
                    f" AND token = :t AND expires_s > {now}"
                ),
                {"c": fence.cluster, "h": fence.holder, "t": fence.token, "ttl": float(ttl_s)},
            )
            return bool(done.rowcount == 1)

    def drop_lease(self, fence: Fence) -> None:
        """Give the lease up at once (a clean shutdown): a standby takes over on its next try, not at expiry."""
        with self._core_tx(write=True) as conn:
            lease_idle_limit(conn, self._postgres)
            conn.execute(
                text("UPDATE leadership SET expires_s = 0 WHERE cluster = :c AND holder = :h AND token = :t"),
                {"c": fence.cluster, "h": fence.holder, "t": fence.token},
            )

    def lease(self, cluster: str) -> LeaseRecord | None:
        """``cluster``'s lease as stored (None before anyone took it), with the database's time of the read."""
        with self._core_tx(write=False) as conn:
            row = conn.execute(
                text(
                    f"SELECT cluster, holder, token, expires_s, acquired_s, {db_now(self._postgres)}"
                    " FROM leadership WHERE cluster = :c"
                ),
                {"c": cluster},
            ).first()
        if row is None:
            return None
        return LeaseRecord(str(row[0]), str(row[1]), int(row[2]), float(row[3]), float(row[4]), float(row[5]))
