"""Operator records: hashed tokens, nodes, the fabric, tenants, quotas, pools, audit, and the start-up load."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sqlalchemy as sa

from gpupool.domain.errors import (
    ConflictError,
    InputError,
    NotFoundError,
    ParseError,
    StaleVersionError,
    TransitionError,
    UnknownNameError,
)
from gpupool.domain.events import HealthGrade
from gpupool.domain.jobs import Allocation, JobSpec, TaskAllocation
from gpupool.domain.sharing import Quota
from gpupool.domain.states import JobState, NodeState
from gpupool.fabric.generators import fat_tree
from gpupool.store import Principal, Store

Spec = Callable[..., JobSpec]

CALENDAR = """timezone = "Asia/Shanghai"
default_pool = "training"

[[pool]]
name = "inference"
sus = [1]
share = 0.5
share_outside = 0.1
windows = [{ days = "mon-fri", start = "08:00", end = "20:00" }]
"""


def _all_text(store: Store) -> list[str]:
    """Every value of every text-like column of every table: where a leaked secret would show."""
    values: list[str] = []
    insp = sa.inspect(store._engine)
    with store._engine.connect() as conn:
        for table in insp.get_table_names():
            cols = [c["name"] for c in insp.get_columns(table) if isinstance(c["type"], sa.String | sa.Text)]
            for col in cols:
                values += [v for (v,) in conn.execute(sa.text(f'SELECT "{col}" FROM "{table}"')) if v is not None]
    return values


def test_tokens_are_stored_hashed_and_authenticate(store: Store, clock: object) -> None:
    _, tenant_token = store.create_token("acme", actor="admin")
    _, admin_token = store.create_token(None, actor="bootstrap", admin=True)
    _, join_token = store.create_join_token(actor="admin", expires_in_s=60.0)
    texts = _all_text(store)
    assert len(texts) > 10  # the scan really read the tables
    for clear in (tenant_token, admin_token, join_token):
        secret = clear.split("_", 2)[2]
        assert not any(secret in v for v in texts), "a clear token secret is in the database"
    token_id = tenant_token.split("_")[1]
    assert any(token_id in v for v in texts)  # the lookup prefix is stored; the secret is not
    assert store.authenticate(tenant_token) == Principal(token_id, "acme", admin=False)
    assert store.authenticate(admin_token) == Principal(admin_token.split("_")[1], None, admin=True)
    assert store.check_join_token(join_token)


@pytest.mark.parametrize(
    "mangle", [lambda t: t + "x", lambda t: t[:-1], lambda t: "gpt_" + "0" * 16 + "_abc", str.upper]
)
def test_wrong_or_malformed_tokens_do_not_authenticate(store: Store, mangle: Callable[[str], str]) -> None:
    _, token = store.create_token("acme", actor="admin")
    assert store.authenticate(mangle(token)) is None
    assert store.authenticate("") is None
    assert store.authenticate("Bearer nonsense") is None


def test_revoked_and_expired_tokens_stop_working(store: Store, clock: object) -> None:
    from databases import Clock

    assert isinstance(clock, Clock)
    _, token = store.create_token("acme", actor="admin")
    store.revoke_token(token.split("_")[1], actor="admin")
    assert store.authenticate(token) is None
    _, join = store.create_join_token(actor="admin", expires_in_s=60.0)
    clock.t += 61.0
    assert not store.check_join_token(join)
    assert not store.check_join_token(token)  # an API token is not a join token
    with pytest.raises(UnknownNameError, match="unknown tenant 'ghost'"):
        store.create_token("ghost", actor="admin")
    with pytest.raises(InputError):
        store.create_token(None, actor="admin")
    assert {e.action for e in store.list_audit()} >= {"token.created", "token.revoked", "join_token.created"}


def test_node_lifecycle_follows_the_state_machine(store: Store) -> None:
    node = store.upsert_node("h1", gpu_model="H100", gpu_count=8, labels={"rack": "r1"}, actor="agent")
    assert (node.state, node.labels, node.version) == (NodeState.UP, (("rack", "r1"),), 1)
    assert store.upsert_node("h1", gpu_model="H100", gpu_count=8, labels={"rack": "r1"}, actor="agent") == node
    beat = store.heartbeat("h1", health=[HealthGrade.OK] * 7 + [HealthGrade.BAD], actor="agent")
    assert beat.health[-1] is HealthGrade.BAD and beat.last_heartbeat_s == 1_000.0
    drained = store.drain_node("h1", "xid 79", actor="op")
    assert drained.state is NodeState.DRAINED
    with pytest.raises(TransitionError, match="cannot go from drained to drained"):
        store.drain_node("h1", "again", actor="op")
    with pytest.raises(StaleVersionError):
        store.transition_node("h1", NodeState.LOST, "", actor="s", expected_version=1)
    store.transition_node("h1", NodeState.LOST, "silent", actor="s", expected_version=drained.version)
    back = store.heartbeat("h1", actor="agent")  # a lost node's agent reports again: up
    assert back.state is NodeState.UP
    actions = [e.action for e in store.list_audit(subject="node/h1")]
    assert actions == ["node.registered", "node.health", "node.drained", "node.lost", "node.up"]
    with pytest.raises(NotFoundError):
        store.heartbeat("nope", actor="agent")
    with pytest.raises(InputError, match="3 health grades for 8 GPUs"):
        store.heartbeat("h1", health=[HealthGrade.OK] * 3, actor="agent")
    assert [n.name for n in store.list_nodes()] == ["h1"]


def test_fabric_is_one_guarded_document(store: Store) -> None:
    assert store.get_fabric() is None
    fabric = fat_tree(4)
    assert store.put_fabric(fabric, actor="op", expected_version=0) == 1
    stored = store.get_fabric()
    assert stored is not None
    assert stored.version == 1
    assert [h.name for h in stored.fabric.hosts] == [h.name for h in fabric.hosts]
    assert len(stored.fabric.links) == len(fabric.links)
    with pytest.raises(StaleVersionError):
        store.put_fabric(fabric, actor="op", expected_version=0)
    assert store.put_fabric(fabric, actor="op", expected_version=1) == 2
    with store._engine.begin() as conn:
        conn.execute(sa.text('UPDATE fabric SET document = \'{"format": "other"}\''))
    with pytest.raises(ParseError):
        store.get_fabric()


def test_tenants_quotas_and_pools(store: Store) -> None:
    with pytest.raises(ConflictError, match="already exists"):
        store.create_tenant("acme", actor="admin")
    store.set_tenant_weight("beta", 3.0, actor="admin")
    assert [(t.name, t.weight) for t in store.list_tenants()] == [("acme", 1.0), ("beta", 3.0)]
    q = Quota("acme", "train", 16, borrowing_limit_gpus=8, cohort="research", gpu_model="H100")
    store.set_quota(q, actor="admin")
    assert store.list_quotas("acme") == [q]
    store.set_quota(Quota("acme", "train", 32, gpu_model="H100"), actor="admin")  # replaces, per key
    store.set_quota(Quota("beta", "train", 1, lending_limit_gpus=0), actor="admin")
    assert store.list_quotas("acme") == [Quota("acme", "train", 32, gpu_model="H100")]
    assert len(store.list_quotas()) == 2
    with pytest.raises(UnknownNameError):
        store.set_quota(Quota("ghost", "train", 1), actor="admin")
    store.delete_quota("acme", "train", "H100", actor="admin")
    with pytest.raises(NotFoundError):
        store.delete_quota("acme", "train", "H100", actor="admin")

    pool = store.put_pool("train", CALENDAR, actor="admin", expected_version=0)
    assert pool.version == 1
    stored = store.get_pool("train")
    assert stored.calendar_toml == CALENDAR
    assert (stored.calendar.timezone, stored.calendar.rules[0].pool) == ("Asia/Shanghai", "inference")
    with pytest.raises(StaleVersionError):
        store.put_pool("train", "", actor="admin", expected_version=0)
    with pytest.raises(ParseError, match="unknown time zone") as err:
        store.put_pool("train", 'timezone = "Mars/Olympus"\n', actor="admin")
    assert (err.value.source, err.value.line) == ("pool train calendar", 1)
    store.put_pool("train", "", actor="admin", expected_version=1)
    assert [(p.name, p.version, p.calendar.rules) for p in store.list_pools()] == [("train", 2, ())]
    store.delete_quota("beta", "train", "", actor="admin")  # a pool that quotas name is not deleted
    store.delete_pool("train", actor="admin")
    with pytest.raises(NotFoundError):
        store.get_pool("train")
    actions = {e.action for e in store.list_audit(limit=1000)}
    assert actions >= {"tenant.created", "tenant.weight", "quota.set", "quota.deleted", "pool.put", "pool.deleted"}


def test_load_state_has_live_jobs_allocations_nodes_and_fabric(store: Store, make_spec: Spec) -> None:
    store.put_fabric(fat_tree(4), actor="op")
    store.upsert_node("h1", gpu_model="H100", gpu_count=8, actor="agent")
    for i in range(4):
        store.submit_job(make_spec(f"j{i}", submit_time_s=float(i)), None, actor="u")
    store.record_allocation("j1", 1, Allocation("j1", (TaskAllocation("h1", (2,)),)), actor="s")
    store.transition_job("j2", 1, JobState.CANCELLED, "", actor="u")
    state = store.load_state()
    assert [(j.job_id, j.state) for j in state.jobs] == [
        ("j0", JobState.PENDING),
        ("j1", JobState.PLACED),
        ("j3", JobState.PENDING),
    ]
    assert state.allocations == (Allocation("j1", (TaskAllocation("h1", (2,)),)),)
    assert [n.name for n in state.nodes] == ["h1"]
    assert state.fabric is not None and state.fabric.version == 1


def test_audit_listing_pages_by_id(store: Store) -> None:
    for i in range(5):
        store.create_tenant(f"t{i}", actor="admin")
    first = store.list_audit(action="tenant.created", limit=3)
    rest = store.list_audit(action="tenant.created", after_id=first[-1].id)
    names = [e.subject for e in first + rest]
    assert names == ["tenant/acme", "tenant/beta"] + [f"tenant/t{i}" for i in range(5)]


def test_every_state_change_writes_exactly_one_audit_event(store: Store, make_spec: Spec) -> None:
    def one_event(action: str, change: Callable[[], object]) -> None:
        before = store.list_audit(limit=10_000)
        change()
        after = store.list_audit(limit=10_000)
        assert [e.action for e in after[len(before) :]] == [action]

    one_event("tenant.created", lambda: store.create_tenant("gamma", actor="admin"))
    one_event("tenant.weight", lambda: store.set_tenant_weight("gamma", 2.0, actor="admin"))
    one_event("quota.set", lambda: store.set_quota(Quota("gamma", "p", 1), actor="admin"))
    one_event("quota.deleted", lambda: store.delete_quota("gamma", "p", "", actor="admin"))
    one_event("pool.put", lambda: store.put_pool("p", "", actor="admin"))
    one_event("pool.deleted", lambda: store.delete_pool("p", actor="admin"))
    one_event("fabric.replaced", lambda: store.put_fabric(fat_tree(4), actor="admin"))
    one_event("token.created", lambda: store.create_token("gamma", actor="admin"))
    one_event("join_token.created", lambda: store.create_join_token(actor="admin"))
    one_event("node.registered", lambda: store.upsert_node("h1", gpu_model="H100", gpu_count=8, actor="agent"))
    one_event("node.updated", lambda: store.upsert_node("h1", gpu_model="H100", gpu_count=4, actor="agent"))
    one_event("node.health", lambda: store.heartbeat("h1", health=[HealthGrade.DEGRADED] * 4, actor="agent"))
    one_event("node.drained", lambda: store.drain_node("h1", "test", actor="op"))
    one_event("node.up", lambda: store.undrain_node("h1", actor="op"))
    one_event("job.submitted", lambda: store.submit_job(make_spec("j"), "k", actor="u"))
    alloc = Allocation("j", (TaskAllocation("h1", (0,)),))
    one_event("job.placed", lambda: store.record_allocation("j", 1, alloc, actor="s"))
    one_event("job.running", lambda: store.transition_job("j", 2, JobState.RUNNING, "", actor="agent"))
    one_event("job.pending", lambda: store.release_allocation("j", 3, actor="s", reason="preempted"))
    one_event("job.cancelled", lambda: store.transition_job("j", 4, JobState.CANCELLED, "", actor="u"))
    token_id = store.list_audit(action="token.created")[-1].data["token_id"]
    one_event("token.revoked", lambda: store.revoke_token(token_id, actor="admin"))
    # Reads and no-op writes leave the log alone.
    one_event_free = len(store.list_audit(limit=10_000))
    store.upsert_node("h1", gpu_model="H100", gpu_count=4, actor="agent")
    store.heartbeat("h1", actor="agent")
    store.load_state()
    store.usage(0, 10)
    assert len(store.list_audit(limit=10_000)) == one_event_free


def test_a_tenant_without_jobs_is_deleted_with_its_quotas_and_tokens(store: Store, make_spec: Spec) -> None:
    """Deleting a tenant takes its quotas and tokens with it (a token of a deleted tenant would authenticate
    nobody); a tenant whose jobs are stored stays, and so does everything of it."""
    store.create_tenant("gone", actor="admin")
    store.set_quota(Quota("gone", "train", 4), actor="admin")
    store.create_token("gone", actor="admin")
    store.delete_tenant("gone", actor="admin")
    assert "gone" not in [t.name for t in store.list_tenants()]
    assert store.list_quotas("gone") == [] and store.list_tokens("gone") == []
    assert store.list_audit(action="tenant.deleted")[-1].subject == "tenant/gone"
    with pytest.raises(UnknownNameError):
        store.delete_tenant("gone", actor="admin")
    store.set_quota(Quota("acme", "train", 4), actor="admin")
    store.submit_job(make_spec("j-acme"), None, actor="u")  # make_spec's tenant is acme
    with pytest.raises(ConflictError, match="has jobs"):
        store.delete_tenant("acme", actor="admin")
    assert "acme" in [t.name for t in store.list_tenants()] and len(store.list_quotas("acme")) == 1


def test_a_pool_that_quotas_name_is_not_deleted(store: Store) -> None:
    store.put_pool("train", "", actor="admin")
    store.set_quota(Quota("acme", "train", 4), actor="admin")
    with pytest.raises(ConflictError, match="'acme'"):
        store.delete_pool("train", actor="admin")
    assert [p.name for p in store.list_pools()] == ["train"]
    store.delete_quota("acme", "train", "", actor="admin")
    store.delete_pool("train", actor="admin")
    assert store.list_pools() == []
