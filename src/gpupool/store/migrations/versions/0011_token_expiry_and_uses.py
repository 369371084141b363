"""Tokens: API tokens expire; join tokens register at most so many new nodes; both carry an admin's note.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02

``api_tokens.expires_s`` (NULL: never, as every token stored before), ``agent_join_tokens.max_nodes`` (NULL:
any number of new node names, as every join token stored before) and ``used_nodes`` (how many it has
registered; 0 for those stored before, which are unlimited anyway), and a ``note`` on both. Hashes are not
touched: tokens stored as PBKDF2 keep working and are rewritten as SHA-256 on first use (``store.tokens``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("expires_s", sa.Float(), nullable=True))
        batch.add_column(sa.Column("note", sa.String(length=256), server_default="", nullable=False))
    with op.batch_alter_table("agent_join_tokens") as batch:
        batch.add_column(sa.Column("max_nodes", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("used_nodes", sa.Integer(), server_default="0", nullable=False))
        batch.add_column(sa.Column("note", sa.String(length=256), server_default="", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("agent_join_tokens") as batch:
        batch.drop_column("note")
        batch.drop_column("used_nodes")
        batch.drop_column("max_nodes")
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("note")
        batch.drop_column("expires_s")
