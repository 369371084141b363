"""Server tables: job commands and agent registrations (until now created outside Alembic with create_all).

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-15 (generated from gpupool.store.rows, then tidied)

A database that a server before this revision already used holds both tables, made by ``create_all`` with
the same columns but without the naming convention's primary-key names: those tables are kept (their rows
are live job commands and node tokens) and only missing ones are created.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    if "server_job_commands" not in existing:
        op.create_table(
            "server_job_commands",
            sa.Column("job_id", sa.String(length=128), nullable=False),
            sa.Column("argv", sa.Text(), nullable=False),
            sa.Column("env", sa.Text(), nullable=False),
            sa.PrimaryKeyConstraint("job_id", name=op.f("pk_server_job_commands")),
        )
    if "server_agents" not in existing:
        op.create_table(
            "server_agents",
            sa.Column("host", sa.String(length=256), nullable=False),
            sa.Column("token_id", sa.String(length=32), nullable=False),
            sa.Column("token_hash", sa.String(length=256), nullable=False),
            sa.Column("agent_url", sa.Text(), nullable=False),
            sa.Column("address", sa.String(length=256), nullable=False),
            sa.Column("inventory", sa.Text(), nullable=False),
            sa.Column("registered_s", sa.Float(), nullable=False),
            sa.PrimaryKeyConstraint("host", name=op.f("pk_server_agents")),
        )


def downgrade() -> None:
    op.drop_table("server_agents")
    op.drop_table("server_job_commands")
