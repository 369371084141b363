"""Admin routes for tokens: ``/v1/tokens`` (API tokens) and ``/v1/join-tokens`` (agents' join tokens).

Create (the clear text is in the answer once, never again), list (never a secret), revoke (``DELETE``;
again is a no-op). Each change is an audit event naming the admin who made it. A revoked or expired token is
refused on its next request: the server checks every request against the store (``server.auth``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpupool.schemas import accounts
from gpupool.server.auth import actor
from gpupool.server.routes import Admin, Srv
from gpupool.store.tokens import JoinTokenInfo, TokenInfo

router = APIRouter(prefix="/v1")


def _state(revoked_s: float | None, expires_s: float | None, now: float) -> accounts.TokenState:
    if revoked_s is not None:
        return "revoked"
    return "expired" if expires_s is not None and now >= expires_s else "active"


def _out(t: TokenInfo, now: float) -> accounts.TokenInfoOut:
    return accounts.TokenInfoOut(
        id=t.id,
        tenant=t.tenant,
        admin=t.admin,
        note=t.note,
        created_s=t.created_s,
        expires_s=t.expires_s,
        revoked_s=t.revoked_s,
        state=_state(t.revoked_s, t.expires_s, now),
    )


def _join_out(t: JoinTokenInfo, now: float) -> accounts.JoinTokenInfoOut:
    return accounts.JoinTokenInfoOut(
        id=t.id,
        note=t.note,
        created_s=t.created_s,
        expires_s=t.expires_s,
        revoked_s=t.revoked_s,
        max_nodes=t.max_nodes,
        used_nodes=t.used_nodes,
        state=_state(t.revoked_s, t.expires_s, now),
    )


@router.get("/tokens", response_model=accounts.TokenList)
def list_tokens(
    srv: Srv, who: Admin, tenant: Annotated[str | None, Query(min_length=1, max_length=128)] = None
) -> accounts.TokenList:
    """API tokens (admin): ids, tenants, states and expiries, never the secrets."""
    now = srv.clock()
    return accounts.TokenList(tokens=[_out(t, now) for t in srv.store.list_tokens(tenant)])


@router.post("/tokens", response_model=accounts.TokenOut, status_code=201)
def create_token(body: accounts.TokenIn, srv: Srv, who: Admin) -> accounts.TokenOut:
    """Make an API token (admin); its secret is in this answer only."""
    info, clear = srv.store.create_token(
        body.tenant,
        actor(who),
        admin=body.admin,
        expires_in_s=body.expires_in_s,
        expires_at_s=body.expires_at_s,
        note=body.note,
    )
    return accounts.TokenOut(token=clear, id=info.id, expires_s=info.expires_s)


@router.delete("/tokens/{token_id}", response_model=accounts.TokenInfoOut)
def revoke_token(token_id: str, srv: Srv, who: Admin) -> accounts.TokenInfoOut:
    """Revoke an API token (admin): refused from its next request on every replica."""
    return _out(srv.store.revoke_token(token_id, actor(who)), srv.clock())


@router.get("/join-tokens", response_model=accounts.JoinTokenList)
def list_join_tokens(srv: Srv, who: Admin) -> accounts.JoinTokenList:
    """Agent join tokens (admin)."""
    now = srv.clock()
    return accounts.JoinTokenList(join_tokens=[_join_out(t, now) for t in srv.store.list_join_tokens()])


@router.post("/join-tokens", response_model=accounts.TokenOut, status_code=201)
def create_join_token(body: accounts.JoinTokenIn, srv: Srv, who: Admin) -> accounts.TokenOut:
    """Make a join token with which new agents register (admin)."""
    info, clear = srv.store.create_join_token(
        actor(who),
        expires_in_s=body.expires_in_s,
        expires_at_s=body.expires_at_s,
        max_nodes=body.max_nodes,
        note=body.note,
    )
    return accounts.TokenOut(token=clear, id=info.id, expires_s=info.expires_s)


@router.delete("/join-tokens/{token_id}", response_model=accounts.JoinTokenInfoOut)
def revoke_join_token(token_id: str, srv: Srv, who: Admin) -> accounts.JoinTokenInfoOut:
    """Revoke a join token (admin)."""
    return _join_out(srv.store.revoke_join_token(token_id, actor(who)), srv.clock())
