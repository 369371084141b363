"""Agent commands carried out are kept, marked done, for as long as their rank lives.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02

``agent_commands.done_s`` (NULL: not yet carried out). A carried-out signal used to be deleted, so a new leader
that decided the same checkpoint again (its rank still in its grace period) stored and sent it a second time;
the kept row says the rank was signalled. It still goes with its rank (ON DELETE CASCADE).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("agent_commands") as batch:
        batch.add_column(sa.Column("done_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agent_commands") as batch:
        batch.drop_column("done_s")
