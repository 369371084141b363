"""Bearer tokens: made from the OS's random source, kept only as salted PBKDF2 hashes, compared in constant time.

A clear token reads ``gpt_<id>_<secret>``. The id is stored in clear so a request finds its row with one
indexed lookup; the secret is 32 random bytes and is never stored or logged. Because the secret carries 256
bits of entropy, a slow hash buys nothing against guessing; the iteration count is modest so authenticating
stays cheap per request, and it is written into each hash so it can be raised later without a migration.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

ITERATIONS = 1_000
_SCHEME = "pbkdf2_sha256"


@dataclass(frozen=True, slots=True)
class ClearToken:
    """A freshly made token: ``clear`` is shown to its owner once; ``id`` and ``hashed`` are what is stored."""

    id: str
    clear: str
    hashed: str


def _digest(secret: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", secret.encode(), salt, iterations)


def hash_secret(secret: str, *, iterations: int = ITERATIONS) -> str:
    salt = secrets.token_bytes(16)
    return f"{_SCHEME}${iterations}${salt.hex()}${_digest(secret, salt, iterations).hex()}"


def verify_secret(secret: str, hashed: str) -> bool:
    """True when ``secret`` matches ``hashed``; a malformed stored hash never matches."""
    parts = hashed.split("$")
    if len(parts) != 4 or parts[0] != _SCHEME:
        return False
    try:
        iterations, salt, want = int(parts[1]), bytes.fromhex(parts[2]), bytes.fromhex(parts[3])
    except ValueError:
        return False
    return hmac.compare_digest(_digest(secret, salt, iterations), want)


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


# Checked against when a token's id is unknown or revoked, so that path costs one hash like a real check.
DUMMY_HASH = f"{_SCHEME}${ITERATIONS}${'00' * 16}${'00' * 32}"
