"""Durable agent commands: checkpoint signals stored until their agent reports them carried out.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

Launches and stops are derived from the stored assignments; a checkpoint signal is not, and lived in the
leader's memory: lost with it, and sent only by it while heartbeats may reach any replica. Each is now a row,
sent by whichever replica the agent talks to until the agent acknowledges it, and deleted with its rank.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "agent_commands",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("host", sa.String(length=256), nullable=False),
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("assignment", sa.Integer(), nullable=False),
        sa.Column("task_index", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("created_s", sa.Float(), nullable=False),
        sa.Column("leader_token", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id", "assignment", "task_index"],
            ["allocations.job_id", "allocations.assignment", "allocations.task_index"],
            name=op.f("fk_agent_commands_job_id_allocations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_commands")),
    )
    op.create_index(op.f("ix_agent_commands_host"), "agent_commands", ["host"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_agent_commands_host"), table_name="agent_commands")
    op.drop_table("agent_commands")
