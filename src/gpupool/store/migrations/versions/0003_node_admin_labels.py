"""Nodes: admin-set labels beside the agent's, so an admin's label survives the agent registering again.

Revision ID: 0003
Revises: 0002
Create Date: 2025-02-01

``labels`` keeps what the node's agent registers (its configured labels and the derived ones) and is
replaced at every registration; ``admin_labels`` is written only by ``gpupool label`` / the labels API.
Existing nodes start with no admin labels.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("admin_labels", sa.Text(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("admin_labels")
