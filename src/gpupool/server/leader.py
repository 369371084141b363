"""Leadership: the replica holding the cluster's lease runs the scheduling loop; its writes carry the lease.

The lease (``store.lease``) is one database row per configured ``cluster_name`` (never the database URL:
replicas whose URLs differ in any byte are one cluster), judged on the database's clock. A standby takes it
over once it expires, bumping its token; the leader renews it every ``lease_renew_s`` from a thread of its own
(a long cycle does not starve renewal), and every write of the loop checks the token first (``store.fencing``),
so a leader paused or cut off past the expiry is refused by the database even before it notices.

This side also keeps a local deadline on the monotonic clock: the lease is taken as lost once ``lease_ttl_s``
has passed since the last renewal was SENT, which is never later than the database's own expiry. A leader
that wakes from a pause therefore stops at once, without a round trip; a renewal that fails on a database
error keeps the lease until that deadline (a blip does not cost a takeover), one the database refuses
(another holder, another token) loses it at once.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time

from gpupool.domain.errors import GpupoolError
from gpupool.store import Store
from gpupool.store.fencing import Fence

log = logging.getLogger("gpupool.server.leader")


def replica_id() -> str:
    """This process's name as a lease holder: host and pid (for people), and a random part (never reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class LeaderLease:
    def __init__(self, store: Store, cluster: str, ttl_s: float, renew_s: float, holder: str | None = None) -> None:
        self._store, self._cluster, self._ttl_s, self._renew_s = store, cluster, ttl_s, renew_s
        self.holder = holder or replica_id()
        self._lock = threading.Lock()  # the state below
        self._io = threading.Lock()  # one database call at a time (the loop's and the renewal thread's)
        self._fence: Fence | None = None
        self._renewed_at = 0.0  # monotonic time the last successful renewal (or takeover) was sent
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def held(self) -> bool:
        with self._lock:
            return self._fence is not None and time.monotonic() < self._renewed_at + self._ttl_s

    @property
    def fence(self) -> Fence | None:
        """The current lease, if this replica holds it (by its local deadline), without a database call."""
        with self._lock:
            if self._fence is not None and time.monotonic() < self._renewed_at + self._ttl_s:
                return self._fence
            return None

    def hold(self) -> Fence | None:
        """The lease while this replica holds it: renewed when due, or taken over when it is free; else None.
        One caller at a time talks to the database; ``fence`` and ``held`` never wait for it."""
        with self._io:
            sent = time.monotonic()
            with self._lock:
                fence = self._fence
                if fence is not None and sent >= self._renewed_at + self._ttl_s:
                    log.warning("leadership lease (token %d) ran out before it was renewed", fence.token)
                    self._fence = fence = None
                if fence is not None and sent - self._renewed_at < self._renew_s:
                    return fence
            if fence is not None:
                return self._renew(fence, sent)
            try:
                fence = self._store.take_lease(self._cluster, self.holder, self._ttl_s)
            except GpupoolError as e:
                log.warning("cannot try the leadership lease: %s", e)
                return None
            if fence is not None:
                log.info("took the leadership of cluster %r (token %d)", self._cluster, fence.token)
                with self._lock:
                    self._fence, self._renewed_at = fence, sent
            return fence

    def _renew(self, fence: Fence, sent: float) -> Fence | None:
        try:
            ok = self._store.renew_lease(fence, self._ttl_s)
        except GpupoolError as e:  # kept until the local deadline: a blip of the database costs no takeover
            log.warning("leadership lease not renewed (%s); held until it runs out", e)
            return self.fence
        with self._lock:
            if self._fence != fence:
                return None  # dropped meanwhile (a refused write)
            if not ok:
                log.warning("lost the leadership of cluster %r (token %d): a standby now", self._cluster, fence.token)
                self._fence = None
                return None
            self._renewed_at = sent
            return fence

    def lost(self) -> None:
        """A write was refused as stale: whatever the local deadline says, this replica does not lead."""
        with self._lock:
            self._fence = None

    # -- the renewal thread ------------------------------------------------------------------------------------
    def start(self) -> None:
        """Renew the lease every ``renew_s`` while held, however long the loop's cycle takes."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpupool-lease", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._renew_s / 2):
            if self.fence is None:
                continue
            try:
                self.hold()
            except Exception:  # the thread must outlive one failed renewal: the lease is held to its local deadline
                log.exception("leadership lease renewal failed")

    def release(self) -> None:
        """Stop renewing and give the lease up at once, so a standby need not wait for it to expire."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._io, self._lock:
            fence, self._fence = self._fence, None
        if fence is not None:
            try:
                self._store.drop_lease(fence)
            except GpupoolError as e:
                log.warning("could not give the leadership lease up (%s): it expires on its own", e)
