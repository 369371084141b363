"""The durable store: SQLAlchemy rows <-> domain objects, Alembic migrations, guarded (versioned) updates; SQLite by default, PostgreSQL in production.
May import: gpupool.domain, gpupool.fabric (for fabric JSON), SQLAlchemy, Alembic.
Must not import: scheduler, server, sim, agent, cluster.
"""

from gpupool.store.engine import default_url
from gpupool.store.records import (
    AuditEvent,
    JobRecord,
    LoadedState,
    NodeRecord,
    PoolRecord,
    Principal,
    StoredFabric,
    TenantRecord,
    UsageTotal,
)

# Importing server_ops here means every row class is on Base.metadata whenever the store is imported, so the
# migrations and the drift check always see the whole schema.
from gpupool.store.server_ops import ServerOps
from gpupool.store.store import Store

__all__ = [
    "AuditEvent",
    "JobRecord",
    "LoadedState",
    "NodeRecord",
    "PoolRecord",
    "Principal",
    "ServerOps",
    "Store",
    "StoredFabric",
    "TenantRecord",
    "UsageTotal",
    "default_url",
]
