"""Who is calling: bearer tokens checked against the bootstrap admin token and the store's hashed tokens.

Checks are cached for ``auth_cache_s`` under the SHA-256 of the token (never the clear text), because the
store's PBKDF2 check costs a millisecond and every request carries a token. The cost: a revoked token may
still be honoured for that long.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Callable

from gpupool.server.gateway import AuthError
from gpupool.store import Principal, Store

BOOTSTRAP = Principal(token_id="bootstrap", tenant=None, admin=True)
_MAX_CACHED = 10_000


class Authenticator:
    def __init__(self, store: Store, admin_token: str, cache_s: float, clock: Callable[[], float]) -> None:
        self._store = store
        self._admin = hashlib.sha256(admin_token.encode()).digest() if admin_token else None
        self._cache_s = cache_s
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[bytes, tuple[Principal | None, float]] = {}

    def cached(self, authorization: str | None) -> Principal | None:
        """The principal without touching the store, or None when only ``principal`` (a store read) can tell.

        For the event loop: a hit costs a hash and a dict lookup; a miss must not run PBKDF2 there.
        """
        token = bearer(authorization)
        digest = hashlib.sha256(token.encode()).digest()
        if self._admin is not None and hmac.compare_digest(digest, self._admin):
            return BOOTSTRAP
        with self._lock:
            hit = self._cache.get(digest)
        if hit is None or hit[1] <= self._clock():
            return None
        if hit[0] is None:
            raise AuthError("the token is unknown or revoked")
        return hit[0]

    def principal(self, authorization: str | None) -> Principal:
        token = bearer(authorization)
        digest = hashlib.sha256(token.encode()).digest()
        if self._admin is not None and hmac.compare_digest(digest, self._admin):
            return BOOTSTRAP
        now = self._clock()
        with self._lock:
            hit = self._cache.get(digest)
        if hit is not None and hit[1] > now:
            found = hit[0]
        else:
            found = self._store.authenticate(token)
            with self._lock:
                if len(self._cache) >= _MAX_CACHED:
                    self._cache.clear()
                self._cache[digest] = (found, now + self._cache_s)
        if found is None:
            raise AuthError("the token is unknown or revoked")
        return found


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
