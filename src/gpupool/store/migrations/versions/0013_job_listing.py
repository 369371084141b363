"""Jobs: their GPU demand as a column, and the indexes the jobs list pages with.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07

``jobs.gpu_milli`` (the job's GPUs in thousandths: tasks x GPUs per task, or tasks x its share) lets
``GET /v1/jobs?sort=gpus`` sort in the database instead of parsing every spec; jobs stored before get it
from their spec here. ``ix_jobs_pool_submit`` serves ``?pool=`` filtered pages, newest first, as
``ix_jobs_tenant_submit`` does for tenants.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BATCH = 1000


def _milli(spec_text: str) -> int:
    """The demand the spec asks for, as ``JobSpec.gpu_milli`` computes it (0 for a spec it cannot read)."""
    try:
        spec = json.loads(spec_text)
        share = spec.get("share")
        per_task = int(share["milli_gpu"]) if share else int(spec["gpus_per_task"]) * 1000
        return int(spec["tasks"]) * per_task
    except (ValueError, KeyError, TypeError):
        return 0


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("gpu_milli", sa.Integer(), server_default="0", nullable=False))
    op.create_index("ix_jobs_pool_submit", "jobs", ["pool", "submit_time_s"], unique=False)
    conn = op.get_bind()
    jobs = sa.table("jobs", sa.column("id", sa.String), sa.column("spec", sa.Text), sa.column("gpu_milli", sa.Integer))
    last = ""
    while True:  # in id order, a batch at a time: a large table is never held in memory whole
        rows = conn.execute(
            sa.select(jobs.c.id, jobs.c.spec).where(jobs.c.id > last).order_by(jobs.c.id).limit(_BATCH)
        ).all()
        if not rows:
            break
        for job_id, spec in rows:
            conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(gpu_milli=_milli(spec)))
        last = rows[-1][0]


def downgrade() -> None:
    op.drop_index("ix_jobs_pool_submit", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("gpu_milli")
