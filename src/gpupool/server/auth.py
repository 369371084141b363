"""Who is calling: bearer tokens checked against the bootstrap admin token and the store's hashed tokens.

Nothing is cached: every request's token is looked up in the store (one primary-key read and a SHA-256, see
``store.tokens``), so a revoked or expired token is refused on its very next request, whichever replica
answers it. The bootstrap admin token (a setting, never stored) is compared without the store. ``/metrics``
also takes the ``metrics_token`` setting, compared the same way.
"""

from __future__ import annotations

import hashlib
import hmac

from gpupool.domain.errors import GpupoolError
from gpupool.store import Principal, Store

BOOTSTRAP = Principal(token_id="bootstrap", tenant=None, admin=True)


class AuthError(GpupoolError):
    code = "UNAUTHENTICATED"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class Authenticator:
    def __init__(self, store: Store, admin_token: str, metrics_token: str = "") -> None:
        self._store = store
        self._admin = _digest(admin_token) if admin_token else None
        self._metrics = _digest(metrics_token) if metrics_token else None

    def bootstrap(self, authorization: str | None) -> Principal | None:
        """The bootstrap admin, recognised without the store (so on the event loop), or None: then only
        ``principal`` (a store read, for a worker thread) can tell."""
        token = bearer(authorization)
        if self._admin is not None and hmac.compare_digest(_digest(token), self._admin):
            return BOOTSTRAP
        return None

    def principal(self, authorization: str | None) -> Principal:
        found = self.bootstrap(authorization) or self._store.authenticate(bearer(authorization))
        if found is None:
            raise AuthError("the token is unknown, revoked or expired")
        return found

    def may_scrape(self, authorization: str | None) -> bool:
        """Whether ``authorization`` may read ``/metrics``: the metrics token or an admin token."""
        token = bearer(authorization)
        if self._metrics is not None and hmac.compare_digest(_digest(token), self._metrics):
            return True
        return self.principal(authorization).admin


def bearer(authorization: str | None) -> str:
    if not authorization:
        raise AuthError("no token: send Authorization: Bearer <token>")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError("the Authorization header must read 'Bearer <token>'")
    return token.strip()


def actor(p: Principal) -> str:
    """Who, for the audit log: the token's id (never its secret) and what it speaks for."""
    return f"admin:{p.token_id}" if p.admin else f"tenant:{p.tenant}:{p.token_id}"
