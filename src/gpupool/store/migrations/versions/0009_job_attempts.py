"""Job attempts: every run of a job kept with how it ended; usage intervals name their run; launch options.

Revision ID: 0009
Revises: 0007
Create Date: 2026-12-10

A job may now run several times (retries after a failure, requeues after a lost node or a preemption):
``job_attempts`` keeps one row per run (its hosts, GPUs, start and end, exit code and why it ended), which is
both the job's history and the accounting record; ``usage_intervals.attempt`` ties GPU time to its run, so
the accounting records sum to the usage exactly. ``jobs.attempt`` is the current run's number (0: never
placed). ``server_job_commands.launch`` holds how ranks are launched beyond argv and env (a container image,
a working directory, Slurm's variables), as a JSON object: ``{}`` for every job stored before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_attempts",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("assignment", sa.Integer(), nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=False),
        sa.Column("pool", sa.String(length=128), nullable=False),
        sa.Column("gpu_model", sa.String(length=256), nullable=False),
        sa.Column("milli_gpu", sa.Integer(), nullable=False),
        sa.Column("hosts", sa.Text(), nullable=False),
        sa.Column("placed_s", sa.Float(), nullable=False),
        sa.Column("started_s", sa.Float(), nullable=True),
        sa.Column("ended_s", sa.Float(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_job_attempts_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "attempt", name=op.f("pk_job_attempts")),
    )
    op.create_index("ix_job_attempts_window", "job_attempts", ["placed_s", "ended_s"], unique=False)
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("attempt", sa.Integer(), server_default="0", nullable=False))
    with op.batch_alter_table("usage_intervals") as batch:
        batch.add_column(sa.Column("attempt", sa.Integer(), nullable=True))
    with op.batch_alter_table("server_job_commands") as batch:
        batch.add_column(sa.Column("launch", sa.Text(), server_default="{}", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("server_job_commands") as batch:
        batch.drop_column("launch")
    with op.batch_alter_table("usage_intervals") as batch:
        batch.drop_column("attempt")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("attempt")
    op.drop_index("ix_job_attempts_window", table_name="job_attempts")
    op.drop_table("job_attempts")
