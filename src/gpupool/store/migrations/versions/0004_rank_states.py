"""Allocations: each rank's lifecycle (placed, launched, started, exited with its code, lost), stored.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

A gang's transitions (placed -> running when every rank started, finished when every rank exited 0, failed
when one exited otherwise or was lost) are decided from these columns by whichever replica receives a rank's
report, so a server restart or a heartbeat reaching another replica loses nothing. Existing rows have no
times (NULL): their ranks count as not yet reported, which the agents' next beats correct.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FLOATS = ("placed_s", "launched_s", "started_s", "exited_s")


def upgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        for name in _FLOATS:
            batch.add_column(sa.Column(name, sa.Float(), nullable=True))
        batch.add_column(sa.Column("exit_code", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("lost", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        for name in ("lost", "exit_code", *reversed(_FLOATS)):
            batch.drop_column(name)
