"""Alembic environment: run with a connection handed in by ``gpupool.store.engine.migrate``.

There is no alembic.ini and no URL here: the store owns its engine, so migrations run on the very
connection (and SQLite pragmas, or PostgreSQL search_path) the store uses.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from gpupool.store.rows import Base


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        # SQLite alters tables by copying them; batch mode does that for us in later migrations.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("gpupool migrations run through gpupool.store (Store.migrate), which passes a connection")
_run(connection)
