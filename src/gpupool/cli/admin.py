"""``gpupool admin``: the operator's commands in one group: tenants (``client_cmds``), API tokens and join
tokens (``tokens``)."""

from __future__ import annotations

from gpupool.cli.client_cmds import admin_app
from gpupool.cli.tokens import join_tokens_app, tokens_app

admin_app.add_typer(tokens_app, name="tokens")
admin_app.add_typer(join_tokens_app, name="join-tokens")

__all__ = ["admin_app"]
