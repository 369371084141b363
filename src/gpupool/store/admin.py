"""Nodes, the fabric, tenants, quotas, pools and the audit log: the operator's side of the store.

Node state changes go through ``gpupool.domain.states.transition`` like jobs do; every change here writes an
audit event in the same transaction. Tokens are the store's too, in ``tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import closing
from functools import lru_cache
from typing import Any, Protocol

from sqlalchemy import bindparam, delete, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpupool.domain.calendar import parse_calendar
from gpupool.domain.errors import ConflictError, FabricError, InputError, NotFoundError, ParseError, StaleVersionError
from gpupool.domain.events import HealthGrade
from gpupool.domain.sharing import Quota
from gpupool.domain.states import NODE_TRANSITIONS, NodeState, transition
from gpupool.fabric import jsonio
from gpupool.fabric.fabric import Fabric
from gpupool.store.base import StoreBase, dumps, loads
from gpupool.store.fencing import Fence
from gpupool.store.records import AuditEvent, NodeRecord, PoolRecord, StoredFabric, TenantRecord
from gpupool.store.rows import (
    ApiTokenRow,
    AuditRow,
    FabricRow,
    JobRow,
    NodeRow,
    PoolRow,
    QuotaRow,
    TenantRow,
)

_FABRIC_ID = 1


def _labels(text: str, source: str) -> dict[str, str]:
    labels = loads(text, source)
    if not isinstance(labels, dict):
        raise ParseError("stored labels are not a JSON object", source=source)
    return {str(k): str(v) for k, v in labels.items()}


class NodeColumns(Protocol):
    """A node's stored columns, as an ORM ``NodeRow`` has them."""

    @property
    def name(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def gpu_model(self) -> str: ...
    @property
    def gpu_count(self) -> int: ...
    @property
    def labels(self) -> str: ...
    @property
    def admin_labels(self) -> str: ...
    @property
    def health(self) -> str: ...
    @property
    def last_heartbeat_s(self) -> float | None: ...
    @property
    def version(self) -> int: ...


NodeTuple = tuple[Any, ...]  # a row of ``AdminMixin.node_rows``: the columns below, in their order
_NODE_COLUMNS = "name, state, gpu_model, gpu_count, labels, admin_labels, health, last_heartbeat_s, version"


def node_record(row: NodeColumns) -> NodeRecord:
    columns = (row.name, row.state, row.gpu_model, row.gpu_count, row.labels, row.admin_labels, row.health)
    return node_of((*columns, row.last_heartbeat_s, row.version))


def node_of(row: NodeTuple) -> NodeRecord:
    name, state_text, gpu_model, gpu_count, labels_text, admin_text, health_text, last_heartbeat_s, version = row
    state, health, labels, agent, admin = _node_parts(name, state_text, health_text, labels_text, admin_text)
    return NodeRecord(
        name=name,
        state=state,
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        labels=labels,
        health=health,
        last_heartbeat_s=last_heartbeat_s,
        version=version,
        agent_labels=agent,
        admin_labels=admin,
    )


Labels = tuple[tuple[str, str], ...]


@lru_cache(maxsize=1 << 16)
def _node_parts(
    name: str, state_text: str, health_text: str, labels_text: str, admin_text: str
) -> tuple[NodeState, tuple[HealthGrade, ...], Labels, Labels, Labels]:
    """A node's parsed columns, remembered per distinct stored text (a pure function of it): the host cache
    reads every node once per ``host_cache_s``, and parsing their JSON each time was most of that read (and a
    fifth of the server's CPU at a thousand nodes), though a node's grades and labels seldom change."""
    source = f"node {name}"
    try:
        state = NodeState(state_text)
        health = tuple(HealthGrade(int(g)) for g in loads(health_text, f"{source} (health)"))
    except (ValueError, TypeError) as e:
        raise ParseError(f"stored node is malformed: {e}", source=source) from None
    agent = _labels(labels_text, f"{source} (labels)")
    admin = _labels(admin_text, f"{source} (admin labels)")
    merged = tuple(sorted({**agent, **admin}.items()))  # an admin's value wins for a key both set
    return state, health, merged, tuple(sorted(agent.items())), tuple(sorted(admin.items()))


def stored_fabric(row: FabricRow) -> StoredFabric:
    source = f"stored fabric (version {row.version})"
    try:
        return StoredFabric(jsonio.from_dict(loads(row.document, source), source=source), row.version)
    except InputError as e:
        # Whatever jsonio calls it, a stored document the store cannot read back is a ParseError of that record.
        raise ParseError(e.reason, source=source, line=e.line) from None
    except FabricError as e:
        raise ParseError(e.message, source=source) from None


def quota_from_row(r: QuotaRow) -> Quota:
    try:
        return Quota(
            tenant=r.tenant,
            pool=r.pool,
            nominal_gpus=r.nominal_gpus,
            borrowing_limit_gpus=r.borrowing_limit_gpus,
            lending_limit_gpus=r.lending_limit_gpus,
            cohort=r.cohort,
            gpu_model=r.gpu_model,
        )
    except InputError as e:
        raise ParseError(e.reason, source=f"stored quota {r.tenant}/{r.pool}/{r.gpu_model}") from None


def pool_record(r: PoolRow) -> PoolRecord:
    return PoolRecord(
        r.name, r.calendar, parse_calendar(r.calendar, source=f"stored pool {r.name} calendar"), r.version
    )


class AdminMixin(StoreBase):
    # -- nodes -------------------------------------------------------------------------------------------------
    def upsert_node(
        self, name: str, *, gpu_model: str, gpu_count: int, labels: Mapping[str, str] | None = None, actor: str
    ) -> NodeRecord:
        """Register a node (up) or update what it reports about itself; its state is left alone on update."""
        if not name or gpu_count < 0:
            raise InputError("a node needs a name and a GPU count >= 0", source=name or "<node>")
        labels_json = dumps(dict(labels or {}))
        with self._tx(write=True) as s:
            now = self._clock()
            row = s.get(NodeRow, name, with_for_update=self._postgres)
            if row is None:
                row = NodeRow(
                    name=name,
                    state=NodeState.UP.value,
                    gpu_model=gpu_model,
                    gpu_count=gpu_count,
                    labels=labels_json,
                    health="[]",
                    last_heartbeat_s=None,
                    version=1,
                )
                s.add(row)
                action = "node.registered"
            elif (row.gpu_model, row.gpu_count, row.labels) != (gpu_model, gpu_count, labels_json):
                row.gpu_model, row.gpu_count, row.labels = gpu_model, gpu_count, labels_json
                row.version += 1
                action = "node.updated"
            else:
                return node_record(row)
            data = {"gpu_model": gpu_model, "gpu_count": gpu_count, "labels": dict(labels or {})}
            self._audit(s, actor, action, f"node/{name}", data, now)
            s.flush()
            return node_record(row)

    def set_node_labels(self, name: str, set_: Mapping[str, str], remove: Sequence[str], actor: str) -> NodeRecord:
        """Set and remove admin labels of a node (audited). Removing a label only the node's agent sets is
        refused: it would come back at the next registration, so it is changed in the agent's configuration."""
        with self._tx(write=True) as s:
            row = self._node(s, name)
            admin = _labels(row.admin_labels, f"node {name} (admin labels)")
            agent = _labels(row.labels, f"node {name} (labels)")
            for key in remove:
                if key not in admin and key in agent:
                    raise ConflictError(
                        f"label {key} of node {name} is set by its agent (--label, its labels file, or derived): "
                        "change the agent's configuration, or set another value here to override it"
                    )
            new = {k: v for k, v in admin.items() if k not in remove} | dict(set_)
            if new != admin:
                row.admin_labels = dumps(new)
                row.version += 1
                data = {"set": dict(set_), "removed": [k for k in remove if k in admin]}
                self._audit(s, actor, "node.labels", f"node/{name}", data, self._clock())
            s.flush()
            return node_record(row)

    def heartbeat(
        self,
        name: str,
        *,
        health: Sequence[HealthGrade] | None = None,
        xids: Sequence[Mapping[str, object]] = (),
        actor: str,
    ) -> NodeRecord:
        """An agent's sign of life: a lost node comes back up; a change of GPU health is recorded and audited,
        and so is every XID the beat carries (``{"gpu", "code", "at_s", "message"}``), in the same write."""
        with self._tx(write=True) as s:
            row = self._node(s, name)
            now = self._clock()
            row.last_heartbeat_s = now
            if row.state == NodeState.LOST.value:
                self._move_node(s, row, NodeState.UP, "its agent reported again", actor, now)
            if health is not None:
                if len(health) != row.gpu_count:
                    raise InputError(f"{len(health)} health grades for {row.gpu_count} GPUs", source=f"node {name}")
                new = dumps([int(g) for g in health])
                if new != row.health:
                    row.health = new
                    row.version += 1
                    self._audit(s, actor, "node.health", f"node/{name}", {"health": loads(new, name)}, now)
            if xids:
                self._audit(s, actor, "node.xid", f"node/{name}", {"xids": [dict(x) for x in xids]}, now)
            s.flush()
            return node_record(row)

    def touch_nodes(self, seen: Mapping[str, float]) -> None:
        """Record heartbeat times (host -> time) in one transaction, never moving a time backwards. Only the
        time changes: a beat that changes state or health goes through ``heartbeat``."""
        if not seen:
            return
        stmt = (
            update(NodeRow)
            .where(NodeRow.name == bindparam("n"))
            .where(or_(NodeRow.last_heartbeat_s.is_(None), NodeRow.last_heartbeat_s < bindparam("t")))
            .values(last_heartbeat_s=bindparam("t"))
            .execution_options(synchronize_session=False)
        )
        with self._tx(write=True) as s:
            s.connection().execute(stmt, [{"n": n, "t": t} for n, t in sorted(seen.items())])

    def transition_node(
        self,
        name: str,
        new_state: NodeState,
        reason: str,
        actor: str,
        *,
        expected_version: int | None = None,
        fence: Fence | None = None,
    ) -> NodeRecord:
        """``fence``: the scheduling loop's lease (a node judged lost by a stale leader is refused)."""
        with self._tx(write=True, fence=fence) as s:
            row = self._node(s, name)
            if expected_version is not None and row.version != expected_version:
                raise StaleVersionError(f"node {name}: expected version {expected_version}, stored {row.version}")
            self._move_node(s, row, new_state, reason, actor, self._clock())
            s.flush()
            return node_record(row)

    def drain_node(self, name: str, reason: str, actor: str) -> NodeRecord:
        return self.transition_node(name, NodeState.DRAINED, reason, actor)

    def undrain_node(self, name: str, actor: str) -> NodeRecord:
        return self.transition_node(name, NodeState.UP, "returned to service", actor)

    def get_node(self, name: str) -> NodeRecord:
        with self._tx(write=False) as s:
            return node_record(self._node(s, name, lock=False))

    def list_nodes(self) -> list[NodeRecord]:
        return [node_of(r) for r in self.node_rows()]

    def node_rows(self) -> list[NodeTuple]:
        """Every node's row as read, by name (``node_of`` makes each one a ``NodeRecord``): the host cache keeps
        the record of each row it read before and makes only the changed rows' ones."""
        # On the DB-API cursor, not ORM entities nor Core rows: the host cache reads every node once per
        # ``host_cache_s``, and at a thousand nodes the per-row loading cost as much as the records' parsing.
        sql = f"SELECT {_NODE_COLUMNS} FROM {NodeRow.__tablename__} ORDER BY name"
        with self._core_tx(write=False) as conn, closing(conn.connection.cursor()) as cur:
            cur.execute(sql)
            return [tuple(r) for r in cur.fetchall()]

    def _node(self, s: Session, name: str, *, lock: bool = True) -> NodeRow:
        row = s.get(NodeRow, name, with_for_update=lock and self._postgres)
        if row is None:
            raise NotFoundError(f"node {name!r} is not registered")
        return row

    def _move_node(self, s: Session, row: NodeRow, new: NodeState, reason: str, actor: str, now: float) -> None:
        current = NodeState(row.state)
        transition(NODE_TRANSITIONS, current, new, f"node {row.name}")
        row.state = new.value
        row.version += 1
        data = {"from": current.value, "to": new.value, "reason": reason}
        self._audit(s, actor, f"node.{new.value}", f"node/{row.name}", data, now)

    # -- fabric ------------------------------------------------------------------------------------------------
    def put_fabric(self, fabric: Fabric, actor: str, *, expected_version: int | None = None) -> int:
        """Replace the current fabric; ``expected_version`` (0 = none stored yet) guards against a lost update."""
        document = dumps(jsonio.to_dict(fabric))
        with self._tx(write=True) as s:
            now = self._clock()
            row = s.get(FabricRow, _FABRIC_ID, with_for_update=self._postgres)
            stored = 0 if row is None else row.version
            if expected_version is not None and expected_version != stored:
                raise StaleVersionError(f"fabric: expected version {expected_version}, stored {stored}")
            if row is None:
                row = FabricRow(id=_FABRIC_ID, document=document, version=1, updated_s=now)
                s.add(row)
            else:
                row.document, row.version, row.updated_s = document, row.version + 1, now
            data = {"name": fabric.name, "version": row.version, "hosts": len(fabric.hosts)}
            self._audit(s, actor, "fabric.replaced", "fabric", data, now)
            return row.version

    def get_fabric(self) -> StoredFabric | None:
        with self._tx(write=False) as s:
            row = s.get(FabricRow, _FABRIC_ID)
            return None if row is None else stored_fabric(row)

    # -- tenants and quotas ------------------------------------------------------------------------------------
    def create_tenant(self, name: str, actor: str, *, weight: float = 1.0) -> TenantRecord:
        if not name or weight <= 0:
            raise InputError("a tenant needs a name and a weight > 0", source=name or "<tenant>")
        try:
            with self._tx(write=True) as s:
                if s.get(TenantRow, name) is not None:
                    raise ConflictError(f"tenant {name!r} already exists")
                now = self._clock()
                s.add(TenantRow(name=name, weight=weight, created_s=now))
                self._audit(s, actor, "tenant.created", f"tenant/{name}", {"weight": weight}, now)
        except IntegrityError:
            raise ConflictError(f"tenant {name!r} already exists") from None
        return TenantRecord(name, weight)

    def set_tenant_weight(self, name: str, weight: float, actor: str) -> TenantRecord:
        if weight <= 0:
            raise InputError("a tenant's weight must be > 0", source=name)
        with self._tx(write=True) as s:
            self._require_tenant(s, name)
            row = s.get(TenantRow, name, with_for_update=self._postgres)
            assert row is not None
            row.weight = weight
            self._audit(s, actor, "tenant.weight", f"tenant/{name}", {"weight": weight}, self._clock())
        return TenantRecord(name, weight)

    def delete_tenant(self, name: str, actor: str) -> None:
        """Delete a tenant that never had a job, with its quotas and API tokens.

        One with jobs is refused (409): its jobs, their accounting and audit name it, and the job rows hold a
        foreign key to it; to retire such a tenant, set its quotas to 0 and revoke its tokens instead.
        """
        with self._tx(write=True) as s:
            self._require_tenant(s, name)
            jobs = s.scalar(select(JobRow.id).where(JobRow.tenant == name).limit(1))
            if jobs is not None:
                raise ConflictError(
                    f"tenant {name!r} has jobs, which keep its name in their history: set its quotas to 0 and"
                    " revoke its tokens instead"
                )
            s.execute(delete(QuotaRow).where(QuotaRow.tenant == name))
            s.execute(delete(ApiTokenRow).where(ApiTokenRow.tenant == name))
            s.execute(delete(TenantRow).where(TenantRow.name == name))
            self._audit(s, actor, "tenant.deleted", f"tenant/{name}", {}, self._clock())

    def list_tenants(self) -> list[TenantRecord]:
        with self._tx(write=False) as s:
            return [TenantRecord(r.name, r.weight) for r in s.scalars(select(TenantRow).order_by(TenantRow.name))]

    def set_quota(self, quota: Quota, actor: str) -> Quota:
        """Create or replace the quota of (tenant, pool, GPU model); the domain type has validated its amounts."""
        with self._tx(write=True) as s:
            self._require_tenant(s, quota.tenant)
            row = s.get(QuotaRow, quota.key, with_for_update=self._postgres)
            if row is None:
                row = QuotaRow(tenant=quota.tenant, pool=quota.pool, gpu_model=quota.gpu_model)
                s.add(row)
            row.nominal_gpus = quota.nominal_gpus
            row.borrowing_limit_gpus = quota.borrowing_limit_gpus
            row.lending_limit_gpus = quota.lending_limit_gpus
            row.cohort = quota.cohort
            data = {
                "pool": quota.pool,
                "gpu_model": quota.gpu_model,
                "nominal_gpus": quota.nominal_gpus,
                "borrowing_limit_gpus": quota.borrowing_limit_gpus,
                "lending_limit_gpus": quota.lending_limit_gpus,
                "cohort": quota.cohort,
            }
            self._audit(s, actor, "quota.set", f"tenant/{quota.tenant}", data, self._clock())
        return quota

    def delete_quota(self, tenant: str, pool: str, gpu_model: str, actor: str) -> None:
        with self._tx(write=True) as s:
            gone = s.execute(
                delete(QuotaRow).where(
                    QuotaRow.tenant == tenant, QuotaRow.pool == pool, QuotaRow.gpu_model == gpu_model
                )
            )
            if getattr(gone, "rowcount", 0) == 0:
                raise NotFoundError(f"no quota for tenant {tenant!r} in pool {pool!r} on model {gpu_model!r}")
            data = {"pool": pool, "gpu_model": gpu_model}
            self._audit(s, actor, "quota.deleted", f"tenant/{tenant}", data, self._clock())

    def list_quotas(self, tenant: str | None = None) -> list[Quota]:
        q = select(QuotaRow).order_by(QuotaRow.tenant, QuotaRow.pool, QuotaRow.gpu_model)
        if tenant is not None:
            q = q.where(QuotaRow.tenant == tenant)
        with self._tx(write=False) as s:
            return [quota_from_row(r) for r in s.scalars(q)]

    # -- pools -------------------------------------------------------------------------------------------------
    def put_pool(self, name: str, calendar_toml: str, actor: str, *, expected_version: int | None = None) -> PoolRecord:
        """Create or replace a pool and its calendar (TOML; "" for none); ``expected_version`` (0 = new) guards.

        The calendar is parsed before anything is written, so a bad one is refused with the line it is on.
        """
        if not name:
            raise InputError("a pool needs a name", source="<pool>")
        calendar = parse_calendar(calendar_toml, source=f"pool {name} calendar")
        with self._tx(write=True) as s:
            now = self._clock()
            row = s.get(PoolRow, name, with_for_update=self._postgres)
            stored = 0 if row is None else row.version
            if expected_version is not None and expected_version != stored:
                raise StaleVersionError(f"pool {name}: expected version {expected_version}, stored {stored}")
            if row is None:
                row = PoolRow(name=name, calendar=calendar_toml, version=1, updated_s=now)
                s.add(row)
            else:
                row.calendar, row.version, row.updated_s = calendar_toml, row.version + 1, now
            self._audit(s, actor, "pool.put", f"pool/{name}", {"version": row.version}, now)
            return PoolRecord(name, calendar_toml, calendar, row.version)

    def get_pool(self, name: str) -> PoolRecord:
        with self._tx(write=False) as s:
            row = s.get(PoolRow, name)
            if row is None:
                raise NotFoundError(f"pool {name!r} is not defined")
            return pool_record(row)

    def list_pools(self) -> list[PoolRecord]:
        with self._tx(write=False) as s:
            return [pool_record(r) for r in s.scalars(select(PoolRow).order_by(PoolRow.name))]

    def delete_pool(self, name: str, actor: str) -> None:
        """Delete a pool; one that quotas still name is refused (409, naming a tenant): delete those first."""
        with self._tx(write=True) as s:
            holder = s.scalar(select(QuotaRow.tenant).where(QuotaRow.pool == name).limit(1))
            if holder is not None:
                raise ConflictError(f"pool {name!r} has quotas (of tenant {holder!r}, maybe others): delete them first")
            gone = s.execute(delete(PoolRow).where(PoolRow.name == name))
            if getattr(gone, "rowcount", 0) == 0:
                raise NotFoundError(f"pool {name!r} is not defined")
            self._audit(s, actor, "pool.deleted", f"pool/{name}", {}, self._clock())

    # -- audit -------------------------------------------------------------------------------------------------
    def list_audit(
        self, *, subject: str | None = None, action: str | None = None, after_id: int = 0, limit: int = 100
    ) -> list[AuditEvent]:
        q = select(AuditRow).where(AuditRow.id > after_id)
        if subject is not None:
            q = q.where(AuditRow.subject == subject)
        if action is not None:
            q = q.where(AuditRow.action == action)
        with self._tx(write=False) as s:
            rows = s.scalars(q.order_by(AuditRow.id).limit(max(0, limit)))
            return [
                AuditEvent(r.id, r.at_s, r.actor, r.action, r.subject, loads(r.data, f"audit event {r.id}"))
                for r in rows
            ]
