"""The REST API v1 wire formats of who may call and what they used: API and join tokens (never their secrets
once made), GPU usage, the accounting records of every run and the monthly statement.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpupool.schemas.base import In, Out, Text


class _Expiry(In):
    # At most one of the two (the store says so, naming the field); neither: the token never expires.
    expires_in_s: float | None = Field(default=None, gt=0, le=10 * 365 * 86_400)
    expires_at_s: float | None = Field(default=None, gt=0, le=1e12)  # seconds since the epoch
    note: Text = Field(default="", max_length=256)  # what it is for: shown in listings, never a secret


class TokenIn(_Expiry):
    tenant: Text | None = Field(default=None, min_length=1, max_length=128)
    admin: bool = False


class JoinTokenIn(_Expiry):
    max_nodes: int | None = Field(default=None, ge=1, le=1_000_000)  # new node names it may register; None: any


class TokenOut(Out):
    token: str  # the clear text: shown once, never stored
    id: str
    expires_s: float | None = None


TokenState = Literal["active", "expired", "revoked"]


class TokenInfoOut(Out):
    """An API token as listed: never its secret."""

    id: str
    tenant: str | None
    admin: bool
    note: str
    created_s: float
    expires_s: float | None
    revoked_s: float | None
    state: TokenState


class TokenList(Out):
    tokens: list[TokenInfoOut]


class JoinTokenInfoOut(Out):
    id: str
    note: str
    created_s: float
    expires_s: float | None
    revoked_s: float | None
    max_nodes: int | None
    used_nodes: int  # new node names it registered
    state: TokenState


class JoinTokenList(Out):
    join_tokens: list[JoinTokenInfoOut]


class UsageRow(Out):
    tenant: str
    gpu_model: str
    pool: str
    gpu_seconds: float


class UsageOut(Out):
    from_s: float
    to_s: float
    usage: list[UsageRow]


class AccountingOut(Out):
    """One run of a job (a retried job has one per attempt) with its GPU time in the window asked for."""

    job_id: str
    attempt: int
    name: str
    tenant: str
    user: str  # who submitted it (its token's actor)
    pool: str
    gpu_model: str
    gpus: float
    hosts: list[str]
    submit_s: float
    start_s: float | None
    end_s: float | None
    elapsed_s: float  # start to end (to now while it runs); 0 if it never started
    state: str
    exit_code: int | None
    gpu_hours: float  # in the window


class AccountingPage(Out):
    from_s: float
    to_s: float
    records: list[AccountingOut]
    next_offset: int | None  # where the next page starts; None: this was the last


class StatementLineOut(Out):
    gpu_model: str
    pool: str
    gpu_hours: float
    per_gpu_hour: float | None
    cost: float | None  # None: no rate on the card matched


class TenantStatement(Out):
    tenant: str
    lines: list[StatementLineOut]
    gpu_hours: float
    total: float  # the priced lines' cost
    unpriced: bool  # some usage matched no rate


class StatementOut(Out):
    month: str
    from_s: float
    to_s: float
    currency: str
    tenants: list[TenantStatement]
