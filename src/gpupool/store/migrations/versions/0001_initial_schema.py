"""Initial schema: jobs, allocations, nodes, fabric, tenants, quotas, pools, tokens, audit, usage.

Revision ID: 0001
Revises: (none)
Create Date: 2025-01-01 (generated from gpupool.store.rows, then tidied)
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "agent_join_tokens",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("secret_hash", sa.String(length=256), nullable=False),
        sa.Column("created_s", sa.Float(), nullable=False),
        sa.Column("expires_s", sa.Float(), nullable=True),
        sa.Column("revoked_s", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_join_tokens")),
    )
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at_s", sa.Float(), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("subject", sa.String(length=256), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )
    op.create_index(op.f("ix_audit_events_at_s"), "audit_events", ["at_s"])
    op.create_index(op.f("ix_audit_events_subject"), "audit_events", ["subject"])
    op.create_table(
        "fabric",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("document", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_s", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fabric")),
    )
    op.create_table(
        "nodes",
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("gpu_model", sa.String(length=128), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("labels", sa.Text(), nullable=False),
        sa.Column("health", sa.Text(), nullable=False),
        sa.Column("last_heartbeat_s", sa.Float(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_nodes")),
    )
    op.create_table(
        "pools",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("calendar", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_s", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_pools")),
    )
    op.create_table(
        "tenants",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("created_s", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_tenants")),
    )
    op.create_table(
        "usage_intervals",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=False),
        sa.Column("pool", sa.String(length=128), nullable=False),
        sa.Column("gpu_model", sa.String(length=128), nullable=False),
        sa.Column("milli_gpu", sa.Integer(), nullable=False),
        sa.Column("start_s", sa.Float(), nullable=False),
        sa.Column("end_s", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_intervals")),
    )
    op.create_index(op.f("ix_usage_intervals_job_id"), "usage_intervals", ["job_id"])
    op.create_index("ix_usage_intervals_window", "usage_intervals", ["start_s", "end_s"])
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=True),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("secret_hash", sa.String(length=256), nullable=False),
        sa.Column("created_s", sa.Float(), nullable=False),
        sa.Column("revoked_s", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant"], ["tenants.name"], name=op.f("fk_api_tokens_tenant_tenants"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=False),
        sa.Column("pool", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("submit_time_s", sa.Float(), nullable=False),
        sa.Column("spec", sa.Text(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=256), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("reason_code", sa.String(length=64), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_s", sa.Float(), nullable=False),
        sa.Column("updated_s", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["tenant"], ["tenants.name"], name=op.f("fk_jobs_tenant_tenants")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("tenant", "idempotency_key", name=op.f("uq_jobs_tenant_idempotency_key")),
    )
    op.create_index("ix_jobs_state_submit", "jobs", ["state", "submit_time_s"])
    op.create_index("ix_jobs_submit_id", "jobs", ["submit_time_s", "id"])
    op.create_index("ix_jobs_tenant_submit", "jobs", ["tenant", "submit_time_s"])
    op.create_table(
        "quotas",
        sa.Column("tenant", sa.String(length=128), nullable=False),
        sa.Column("pool", sa.String(length=128), nullable=False),
        sa.Column("gpu_model", sa.String(length=128), nullable=False),
        sa.Column("nominal_gpus", sa.Integer(), nullable=False),
        sa.Column("borrowing_limit_gpus", sa.Integer(), nullable=True),
        sa.Column("lending_limit_gpus", sa.Integer(), nullable=True),
        sa.Column("cohort", sa.String(length=128), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant"], ["tenants.name"], name=op.f("fk_quotas_tenant_tenants"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("tenant", "pool", "gpu_model", name=op.f("pk_quotas")),
    )
    op.create_table(
        "allocations",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("assignment", sa.Integer(), nullable=False),
        sa.Column("task_index", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=256), nullable=False),
        sa.Column("gpus", sa.Text(), nullable=False),
        sa.Column("milli_gpu", sa.Integer(), nullable=False),
        sa.Column("gpu_memory_mib", sa.Integer(), nullable=False),
        sa.Column("cpu_millicores", sa.Integer(), nullable=False),
        sa.Column("memory_mib", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["host"], ["nodes.name"], name=op.f("fk_allocations_host_nodes")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_allocations_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "assignment", "task_index", name=op.f("pk_allocations")),
    )
    op.create_index(op.f("ix_allocations_host"), "allocations", ["host"])


def downgrade() -> None:
    op.drop_index(op.f("ix_allocations_host"), table_name="allocations")
    op.drop_table("allocations")
    op.drop_table("quotas")
    op.drop_index("ix_jobs_tenant_submit", table_name="jobs")
    op.drop_index("ix_jobs_submit_id", table_name="jobs")
    op.drop_index("ix_jobs_state_submit", table_name="jobs")
    op.drop_table("jobs")
    op.drop_table("api_tokens")
    op.drop_index("ix_usage_intervals_window", table_name="usage_intervals")
    op.drop_index(op.f("ix_usage_intervals_job_id"), table_name="usage_intervals")
    op.drop_table("usage_intervals")
    op.drop_table("tenants")
    op.drop_table("pools")
    op.drop_table("nodes")
    op.drop_table("fabric")
    op.drop_index(op.f("ix_audit_events_subject"), table_name="audit_events")
    op.drop_index(op.f("ix_audit_events_at_s"), table_name="audit_events")
    op.drop_table("audit_events")
    op.drop_table("agent_join_tokens")
