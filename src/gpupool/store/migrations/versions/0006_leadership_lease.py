"""Leadership as a lease with a fencing token; the token each placement was written under.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02

One ``leadership`` row per configured cluster name (not per database URL, so replicas whose URLs differ in
any byte still share it): the holder's replica id, a token bumped on every takeover, and the expiry on the
database's own clock. Every write of the scheduling loop checks the holder and token first in its transaction,
so the writes of a leader that lost its lease (paused, partitioned) are refused. ``allocations.leader_token``
records the token a placement was written under.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "leadership",
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("holder", sa.String(length=256), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("expires_s", sa.Float(), nullable=False),
        sa.Column("acquired_s", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("cluster", name=op.f("pk_leadership")),
    )
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(sa.Column("leader_token", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.drop_column("leader_token")
    op.drop_table("leadership")
