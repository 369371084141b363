"""Jobs: the array each element belongs to, and who submitted each job.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-11

``jobs.array_id`` (indexed) lets an array be queried and cancelled as one and a dependency on an array be
expanded to its elements; ``jobs.submitted_by`` keeps the submitting token's identity for accounting. Jobs
stored before are in no array and were submitted by "" (their audit events still say who).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("array_id", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("submitted_by", sa.String(length=128), server_default="", nullable=False))
    op.create_index("ix_jobs_array_id", "jobs", ["array_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_jobs_array_id", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("submitted_by")
        batch.drop_column("array_id")
