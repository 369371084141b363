"""Queue order: every policy's ``order`` (stable attribute sorts for fifo and priority) is its key's order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.cluster import ClusterState
from gpupool.domain.jobs import JobSpec, PriorityClass
from gpupool.fabric.generators import leaf_spine
from gpupool.scheduler import POLICIES, SchedulerConfig, ScheduleRequest
from gpupool.scheduler.policies import get_policy

STATE = ClusterState(leaf_spine(2, 1, 2, gpus_per_host=4))


@st.composite
def queue(draw: st.DrawFn) -> list[JobSpec]:
    n = draw(st.integers(0, 30))
    ids = draw(st.lists(st.text("abc", min_size=1, max_size=3), min_size=n, max_size=n, unique=True))
    return [
        JobSpec(
            job_id,
            submit_time_s=float(draw(st.integers(0, 3))),  # ties: the order must fall back to priority, then id
            priority=draw(st.sampled_from(list(PriorityClass))),
            estimated_runtime_s=draw(st.sampled_from([None, 10.0, 100.0])),
            deadline_s=draw(st.sampled_from([None, 50.0, 500.0])),
        )
        for job_id in ids
    ]


@settings(max_examples=200, deadline=None)
@given(pending=queue(), policy=st.sampled_from(sorted(POLICIES)), now=st.sampled_from([0.0, 40.0]))
def test_each_policy_orders_the_queue_by_its_key(pending: list[JobSpec], policy: str, now: float) -> None:
    req = ScheduleRequest(STATE.snapshot(), tuple(pending), now, SchedulerConfig(policy=policy))
    p = get_policy(policy)
    assert p.order(req) == sorted(pending, key=p.prepare(req))
    assert p.order(req) == p.order(ScheduleRequest(STATE.snapshot(), tuple(reversed(pending)), now, req.config))
