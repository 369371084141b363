"""Jobs: a change counter, so the scheduling loop reads only the jobs that changed since its last cycle.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07

``jobs.change_seq`` (indexed) is set by the database itself, by triggers on every insert and on every update
that changes ``state`` or ``version``, whichever code path writes the row: the loop's sync
(``ServerOps.job_changes``) must not miss a change, so no writer is trusted to set it.

SQLite: one more than the largest stored (writers are serialized, so the order of the counter is the order of
the commits; a reader that saw counter n has seen every change up to n). PostgreSQL: the writing transaction's
64-bit id (``pg_current_xact_id``); ids are handed out in start order, not commit order, so the reader keeps as
its mark what its read's snapshot could not see (ids from ``pg_snapshot_xmax`` on, and those it saw running:
``server_ops.ChangeMark``), and a row is read once, never missed. Rows stored before keep 0: the loop's rebuild
reads every live job.

A later migration that rebuilds ``jobs`` on SQLite (``batch_alter_table``) drops these triggers and must create
them again (``tests/integration/store/test_store_changes.py`` fails without them).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CHANGED = "NEW.state IS NOT OLD.state OR NEW.version IS NOT OLD.version"
_NEXT = "UPDATE jobs SET change_seq = (SELECT COALESCE(MAX(change_seq), 0) + 1 FROM jobs) WHERE rowid = NEW.rowid"

SQLITE = (
    f"CREATE TRIGGER jobs_change_seq_insert AFTER INSERT ON jobs BEGIN {_NEXT}; END",
    f"CREATE TRIGGER jobs_change_seq_update AFTER UPDATE OF state, version ON jobs WHEN {_CHANGED} BEGIN {_NEXT}; END",
)
POSTGRES = (
    "CREATE FUNCTION jobs_change_seq() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "NEW.change_seq := pg_current_xact_id()::text::bigint; RETURN NEW; END $$",
    "CREATE TRIGGER jobs_change_seq_insert BEFORE INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION jobs_change_seq()",
    "CREATE TRIGGER jobs_change_seq_update BEFORE UPDATE OF state, version ON jobs FOR EACH ROW "
    "WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.version IS DISTINCT FROM NEW.version) "
    "EXECUTE FUNCTION jobs_change_seq()",
)


def upgrade() -> None:
    op.add_column("jobs", sa.Column("change_seq", sa.BigInteger(), server_default="0", nullable=False))
    op.create_index("ix_jobs_change_seq", "jobs", ["change_seq"], unique=False)
    for statement in POSTGRES if op.get_bind().dialect.name == "postgresql" else SQLITE:
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS jobs_change_seq_update" + (" ON jobs" if _pg() else ""))
    op.execute("DROP TRIGGER IF EXISTS jobs_change_seq_insert" + (" ON jobs" if _pg() else ""))
    if _pg():
        op.execute("DROP FUNCTION IF EXISTS jobs_change_seq()")
    op.drop_index("ix_jobs_change_seq", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("change_seq")


def _pg() -> bool:
    return bool(op.get_bind().dialect.name == "postgresql")
