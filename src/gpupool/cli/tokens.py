"""``gpupool admin tokens`` and ``gpupool admin join-tokens``: create (printed once), list, revoke.

API tokens speak for a tenant or are admin tokens; join tokens let agents register new nodes (at most
``--max-nodes`` of them). Both take an expiry (``--expires-in 30d`` or ``--expires-at`` seconds since the
epoch). Every change is audited on the server, naming the admin token that made it.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel, ValidationError

from gpupool.cli.client_cmds import Fmt, FmtOpt, _client, _emit
from gpupool.domain.errors import InputError
from gpupool.domain.units import parse_duration
from gpupool.schemas.accounts import JoinTokenIn, TokenIn

tokens_app = typer.Typer(help="API tokens: create, list, revoke.", no_args_is_help=True)
join_tokens_app = typer.Typer(help="Agents' join tokens: create, list, revoke.", no_args_is_help=True)

ExpiresIn = Annotated[str | None, typer.Option("--expires-in", help="lifetime: 3600, 90m, 12h, 30d")]
ExpiresAt = Annotated[float | None, typer.Option("--expires-at", help="expiry, seconds since the epoch")]
Note = Annotated[str, typer.Option("--note", help="what it is for (listed, never secret)")]
_COLS = ["id", "state", "tenant", "admin", "expires_s", "note"]
_JOIN_COLS = ["id", "state", "used_nodes", "max_nodes", "expires_s", "note"]


M = TypeVar("M", bound=BaseModel)
_FLAG = {"expires_in_s": "--expires-in", "expires_at_s": "--expires-at", "max_nodes": "--max-nodes"}


def _body(model: type[M], **fields: Any) -> M:
    """The request, checked as the server checks it; a bad value is one line naming its flag."""
    try:
        return model.model_validate(fields)
    except ValidationError as e:
        err = e.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        raise InputError(f"{err['msg']} (got {err.get('input')!r})", source=_FLAG.get(name, f"--{name}")) from None


def _lifetime(text: str | None) -> float | None:
    return None if text is None else parse_duration(text, "--expires-in")


def _when(t: float | None) -> str:
    return "never" if t is None else f"{t:.0f}"


@tokens_app.command("create")
def create(
    tenant: Annotated[str | None, typer.Option(help="the tenant it speaks for")] = None,
    admin: Annotated[bool, typer.Option("--admin", help="an admin token instead")] = False,
    expires_in: ExpiresIn = None,
    expires_at: ExpiresAt = None,
    note: Note = "",
) -> None:
    """Create an API token; it is printed once and never stored in clear."""
    body = _body(
        TokenIn, tenant=tenant, admin=admin, expires_in_s=_lifetime(expires_in), expires_at_s=expires_at, note=note
    )
    with _client() as c:
        typer.echo(c.create_token(body).token)


@tokens_app.command("list")
def list_(
    tenant: Annotated[str | None, typer.Option(help="only this tenant's")] = None, fmt: FmtOpt = Fmt.TABLE
) -> None:
    """List API tokens (ids, never secrets), revoked and expired ones included."""
    with _client() as c:
        out = c.tokens(tenant).tokens
    rows: list[list[Any]] = [[t.id, t.state, t.tenant or "-", t.admin, _when(t.expires_s), t.note] for t in out]
    _emit(fmt, _COLS, rows, [t.model_dump(mode="json") for t in out])


@tokens_app.command("revoke")
def revoke(token_id: Annotated[str, typer.Argument(help="the token's id (see 'list')")]) -> None:
    """Revoke an API token: refused from its next request on."""
    with _client() as c:
        t = c.revoke_token(token_id)
    typer.echo(f"token {t.id} revoked")


@join_tokens_app.command("create")
def join_create(
    max_nodes: Annotated[
        int | None, typer.Option("--max-nodes", help="new nodes it may register (default: any)")
    ] = None,
    expires_in: ExpiresIn = None,
    expires_at: ExpiresAt = None,
    note: Note = "",
) -> None:
    """Create a join token for agents; it is printed once."""
    body = _body(
        JoinTokenIn, max_nodes=max_nodes, expires_in_s=_lifetime(expires_in), expires_at_s=expires_at, note=note
    )
    with _client() as c:
        typer.echo(c.create_join_token(body).token)


@join_tokens_app.command("list")
def join_list(fmt: FmtOpt = Fmt.TABLE) -> None:
    """List join tokens: how many nodes each registered, of how many it may."""
    with _client() as c:
        out = c.join_tokens().join_tokens
    rows: list[list[Any]] = [
        [t.id, t.state, t.used_nodes, "any" if t.max_nodes is None else t.max_nodes, _when(t.expires_s), t.note]
        for t in out
    ]
    _emit(fmt, _JOIN_COLS, rows, [t.model_dump(mode="json") for t in out])


@join_tokens_app.command("revoke")
def join_revoke(token_id: Annotated[str, typer.Argument(help="the join token's id (see 'list')")]) -> None:
    """Revoke a join token: no agent registers a node with it again (nodes it registered keep theirs)."""
    with _client() as c:
        t = c.revoke_join_token(token_id)
    typer.echo(f"join token {t.id} revoked")
