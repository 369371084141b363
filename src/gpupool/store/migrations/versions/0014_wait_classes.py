"""Waiting reasons shared by a shape's pending jobs: one row per reason, a pointer per job.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07

``wait_classes`` (id, reason_code, reason) and ``jobs.wait_class`` (NULL: the job's own ``reason_code`` and
``reason``). The scheduling loop points the jobs of one shape and expected runtime at one class, so a reason
that changes for all of them at once (the EASY reservation came, went or moved: up to 48,000 jobs of a
50,000-job backlog) is one row written instead of one per job. Jobs stored before keep their own reasons.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "wait_classes",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("reason_code", sa.String(length=64), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_wait_classes")),
    )
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("wait_class", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("wait_class")
    op.drop_table("wait_classes")
