"""Allocations: ranks releasing their GPUs (their job stopped, their process not yet confirmed gone).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

A job that leaves placed/running (cancelled, preempted, requeued, failed) no longer deletes the rows of its
ranks still running: they get ``releasing_s`` and keep holding their GPUs (the placement check counts every
row) until their agent confirms the process has exited, so no other job is placed on a GPU a stopping
process still uses.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(sa.Column("releasing_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.drop_column("releasing_s")
