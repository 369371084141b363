"""Bearer tokens: made from the OS's random source, kept only as SHA-256 hashes, checked by one indexed lookup.

A clear token reads ``<kind>_<id>_<secret>`` (``gpt`` API, ``gpj`` join, ``gpn`` node). The id is stored in
clear so a request finds its row with one primary-key read; the secret is 32 random bytes (256 bits) and is
never stored or logged. A secret that long cannot be guessed, so a slow hash buys nothing: the stored hash
is ``sha256$<hex>`` and checking one costs a microsecond. That is what lets the server check every request
against the store, with no cache: a revoked or expired token is refused on its very next request, on every
replica.

Tokens made before migration 0011 were kept as salted PBKDF2 hashes (``pbkdf2_sha256$...``). They keep
working: the first request that presents one rewrites its hash as SHA-256 (the clear secret is only ever
known there), so each costs PBKDF2 once.

``TokensMixin`` is the store's side: create, list, revoke (audited, with the actor), expiry, and the checks.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
from dataclasses import dataclass

from sqlalchemy import Connection, select, update
from sqlalchemy.orm import Session

from gpupool.domain.errors import InputError, NotFoundError
from gpupool.store.base import StoreBase
from gpupool.store.engine import single_read
from gpupool.store.records import Principal
from gpupool.store.rows import ApiTokenRow, JoinTokenRow

_SCHEME = "sha256"
_LEGACY = "pbkdf2_sha256"
MAX_LIFETIME_S = 10 * 365 * 86_400.0  # an expiry further out than ten years is a mistake (ms for s?)


@dataclass(frozen=True, slots=True)
class ClearToken:
    """A freshly made token: ``clear`` is shown to its owner once; ``id`` and ``hashed`` are what is stored."""

    id: str
    clear: str
    hashed: str


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """An API token as listed: never its secret."""

    id: str
    tenant: str | None
    admin: bool
    note: str
    created_s: float
    expires_s: float | None
    revoked_s: float | None


@dataclass(frozen=True, slots=True)
class JoinTokenInfo:
    """A join token as listed: how many new nodes it may still register (``max_nodes`` None: any number)."""

    id: str
    note: str
    created_s: float
    expires_s: float | None
    revoked_s: float | None
    max_nodes: int | None
    used_nodes: int


def hash_secret(secret: str) -> str:
    return f"{_SCHEME}${hashlib.sha256(secret.encode()).hexdigest()}"


def _legacy_digest(secret: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", secret.encode(), salt, iterations)


def verify_secret(secret: str, hashed: str) -> bool:
    """True when ``secret`` matches ``hashed`` (either scheme); a malformed stored hash never matches."""
    parts = hashed.split("$")
    if len(parts) == 2 and parts[0] == _SCHEME:
        return hmac.compare_digest(hash_secret(secret), hashed)
    if len(parts) != 4 or parts[0] != _LEGACY:
        return False
    try:
        iterations, salt, want = int(parts[1]), bytes.fromhex(parts[2]), bytes.fromhex(parts[3])
    except ValueError:
        return False
    if not 0 < iterations <= 10_000_000:
        return False
    return hmac.compare_digest(_legacy_digest(secret, salt, iterations), want)


def is_legacy(hashed: str) -> bool:
    return hashed.startswith(_LEGACY + "$")


def new_token(kind: str = "gpt") -> ClearToken:
    token_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    return ClearToken(id=token_id, clear=f"{kind}_{token_id}_{secret}", hashed=hash_secret(secret))


def split_token(clear: str, kind: str = "gpt") -> tuple[str, str] | None:
    """``(id, secret)`` of a token in our format, or None (the caller then answers "not authenticated")."""
    prefix, sep, rest = clear.partition("_")
    if prefix != kind or not sep:
        return None
    token_id, sep, secret = rest.partition("_")
    if not sep or len(token_id) != 16 or not secret:
        return None
    return token_id, secret


def expiry(now: float, expires_in_s: float | None, expires_at_s: float | None) -> float | None:
    """The absolute expiry of a token made at ``now``: in so many seconds, or at a time; None: never."""
    if expires_in_s is not None and expires_at_s is not None:
        raise InputError("give expires_in_s or expires_at_s, not both", source="body.expires_in_s")
    if expires_in_s is not None:
        if not (math.isfinite(expires_in_s) and 0 < expires_in_s <= MAX_LIFETIME_S):
            raise InputError(f"expires_in_s must be in (0, {MAX_LIFETIME_S:.0f}]", source="body.expires_in_s")
        return now + expires_in_s
    if expires_at_s is not None:
        if not (math.isfinite(expires_at_s) and now < expires_at_s <= now + MAX_LIFETIME_S):
            raise InputError(
                f"expires_at_s must be after now ({now:.0f}) and within ten years", source="body.expires_at_s"
            )
        return expires_at_s
    return None


def _live(revoked_s: float | None, expires_s: float | None, now: float) -> bool:
    return revoked_s is None and (expires_s is None or now < expires_s)


def _info(r: ApiTokenRow) -> TokenInfo:
    return TokenInfo(r.id, r.tenant, r.admin, r.note, r.created_s, r.expires_s, r.revoked_s)


def join_info(r: JoinTokenRow) -> JoinTokenInfo:
    return JoinTokenInfo(r.id, r.note, r.created_s, r.expires_s, r.revoked_s, r.max_nodes, r.used_nodes)


def spend_join_token(s: Session, token_id: str, now: float) -> bool:
    """Take one new-node use of a join token inside the caller's transaction; False: none left (or revoked,
    expired meanwhile). One guarded UPDATE, so two registrations racing for its last use cannot both win."""
    live = JoinTokenRow.revoked_s.is_(None) & (JoinTokenRow.expires_s.is_(None) | (JoinTokenRow.expires_s > now))
    room = JoinTokenRow.max_nodes.is_(None) | (JoinTokenRow.used_nodes < JoinTokenRow.max_nodes)
    done = s.execute(
        update(JoinTokenRow)
        .where(JoinTokenRow.id == token_id, live, room)
        .values(used_nodes=JoinTokenRow.used_nodes + 1)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(done, "rowcount", 0))


def join_usable(r: JoinTokenRow | None, now: float) -> bool:
    """Whether a join token may register a node at ``now``: not revoked, not expired (uses are the caller's)."""
    return r is not None and _live(r.revoked_s, r.expires_s, now)


class TokensMixin(StoreBase):
    # -- API tokens --------------------------------------------------------------------------------------------
    def create_token(
        self,
        tenant: str | None,
        actor: str,
        *,
        admin: bool = False,
        expires_in_s: float | None = None,
        expires_at_s: float | None = None,
        note: str = "",
    ) -> tuple[TokenInfo, str]:
        """A new API token for a tenant (or an admin token, ``tenant`` None): its listing and the clear text,
        shown once."""
        if (tenant is None) != admin:
            raise InputError("a token speaks for a tenant, or is an admin token (not both)", source="body.tenant")
        made = new_token("gpt")
        with self._tx(write=True) as s:
            if tenant is not None:
                self._require_tenant(s, tenant)
            now = self._clock()
            expires = expiry(now, expires_in_s, expires_at_s)
            row = ApiTokenRow(
                id=made.id,
                tenant=tenant,
                admin=admin,
                secret_hash=made.hashed,
                created_s=now,
                revoked_s=None,
                expires_s=expires,
                note=note,
            )
            s.add(row)
            data = {"token_id": made.id, "tenant": tenant, "admin": admin, "expires_s": expires, "note": note}
            self._audit(s, actor, "token.created", f"token/{made.id}", data, now)
            s.flush()
            return _info(row), made.clear

    def list_tokens(self, tenant: str | None = None) -> list[TokenInfo]:
        q = select(ApiTokenRow).order_by(ApiTokenRow.created_s, ApiTokenRow.id)
        if tenant is not None:
            q = q.where(ApiTokenRow.tenant == tenant)
        with self._tx(write=False) as s:
            return [_info(r) for r in s.scalars(q)]

    def revoke_token(self, token_id: str, actor: str) -> TokenInfo:
        """Revoke an API token (audited); revoking it again changes nothing and is not audited again."""
        with self._tx(write=True) as s:
            row = s.get(ApiTokenRow, token_id, with_for_update=self._postgres)
            if row is None:
                raise NotFoundError(f"token {token_id!r} is not stored")
            if row.revoked_s is None:
                now = self._clock()
                row.revoked_s = now
                self._audit(s, actor, "token.revoked", f"token/{token_id}", {"tenant": row.tenant}, now)
            s.flush()
            return _info(row)

    def authenticate(self, clear: str) -> Principal | None:
        """The principal a clear token speaks for, or None for an unknown, revoked, expired or malformed token:
        one primary-key read and a SHA-256, on every request (nothing is cached). A bare statement, outside a
        transaction: through the ORM a session cost more than the read, and on PostgreSQL a transaction's BEGIN
        and ROLLBACK are two more round trips."""
        parts = split_token(clear, "gpt")
        if parts is None:
            return None
        token_id, secret = parts
        with single_read(self._engine) as conn:
            found = conn.exec_driver_sql(self._token_sql(conn), (token_id,)).fetchone()
        if found is None:
            return None
        hashed, tenant, admin, revoked_s, expires_s = found
        if not _live(revoked_s, expires_s, self._clock()) or not verify_secret(secret, hashed):
            return None
        if is_legacy(hashed):
            self._rehash(s_hash=hashed, token_id=token_id, secret=secret)
        return Principal(token_id=token_id, tenant=tenant, admin=bool(admin))

    @staticmethod
    def _token_sql(conn: Connection) -> str:
        mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
        return (
            f"SELECT secret_hash, tenant, admin, revoked_s, expires_s FROM {ApiTokenRow.__tablename__}"
            f" WHERE id = {mark}"
        )

    def _rehash(self, *, s_hash: str, token_id: str, secret: str) -> None:
        """A PBKDF2-hashed token (before migration 0011) just matched: keep it as SHA-256 from now on."""
        with self._tx(write=True) as s:
            s.execute(
                update(ApiTokenRow)
                .where(ApiTokenRow.id == token_id, ApiTokenRow.secret_hash == s_hash)
                .values(secret_hash=hash_secret(secret))
            )

    # -- join tokens -------------------------------------------------------------------------------------------
    def create_join_token(
        self,
        actor: str,
        *,
        expires_in_s: float | None = None,
        expires_at_s: float | None = None,
        max_nodes: int | None = None,
        note: str = "",
    ) -> tuple[JoinTokenInfo, str]:
        """A token an agent presents to register a new node (at most ``max_nodes`` of them; None: any number):
        its listing and the clear text, shown once."""
        if max_nodes is not None and max_nodes < 1:
            raise InputError("max_nodes must be >= 1 (or absent: any number)", source="body.max_nodes")
        made = new_token("gpj")
        with self._tx(write=True) as s:
            now = self._clock()
            expires = expiry(now, expires_in_s, expires_at_s)
            row = JoinTokenRow(
                id=made.id,
                secret_hash=made.hashed,
                created_s=now,
                expires_s=expires,
                revoked_s=None,
                max_nodes=max_nodes,
                used_nodes=0,
                note=note,
            )
            s.add(row)
            data = {"expires_s": expires, "max_nodes": max_nodes, "note": note}
            self._audit(s, actor, "join_token.created", f"join_token/{made.id}", data, now)
            s.flush()
            return join_info(row), made.clear

    def list_join_tokens(self) -> list[JoinTokenInfo]:
        with self._tx(write=False) as s:
            return [join_info(r) for r in s.scalars(select(JoinTokenRow).order_by(JoinTokenRow.created_s))]

    def revoke_join_token(self, token_id: str, actor: str) -> JoinTokenInfo:
        """Revoke a join token (audited): no node registers with it again; nodes it registered keep theirs."""
        with self._tx(write=True) as s:
            row = s.get(JoinTokenRow, token_id, with_for_update=self._postgres)
            if row is None:
                raise NotFoundError(f"join token {token_id!r} is not stored")
            if row.revoked_s is None:
                now = self._clock()
                row.revoked_s = now
                self._audit(s, actor, "join_token.revoked", f"join_token/{token_id}", {}, now)
            s.flush()
            return join_info(row)

    def check_join_token(self, clear: str) -> JoinTokenInfo | None:
        """The join token ``clear`` is, if it is stored, unrevoked and unexpired (its uses left are not judged
        here: re-registering a node that is not live takes none)."""
        parts = split_token(clear, "gpj")
        if parts is None:
            return None
        with self._tx(write=False) as s:
            row = s.get(JoinTokenRow, parts[0])
        # Checked after the read's transaction: a legacy (PBKDF2) hash costs real CPU, which no transaction waits on.
        if row is None or not join_usable(row, self._clock()) or not verify_secret(parts[1], row.secret_hash):
            return None
        return join_info(row)
