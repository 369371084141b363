"""The one cycle without sharing rules decides as the plain cycle did (``reference_core``), and its stages
keep out of the way: a plain request never preempts, reserves, signals or refuses for a deadline."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_core import schedule_plain
from sched_builders import make_fabric, make_job
from test_properties import FABRICS, _state, jobs

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobPlaced, JobSubmitted
from gpupool.domain.jobs import JobSpec, Scaling, Scope, TopologyMode, TopologyRequirement
from gpupool.scheduler import NO_SHARING, PLACERS, POLICIES, ReasonCode, SchedulerConfig, ScheduleRequest, schedule
from gpupool.scheduler.capacity import Capacity
from gpupool.scheduler.diagnose import diagnose
from gpupool.scheduler.placement import make_need
from gpupool.scheduler.shapes import host_mask
from gpupool.scheduler.telemetry import penalties


def _exact(job: JobSpec) -> JobSpec:
    """The job made monotone (``refusals.monotone``): the reference remembered every refusal of a shape for
    the rest of the cycle, also of bounded searches (rail-aligned gangs, required-scope shares), which the
    one cycle searches again after a placement, as deciding afresh would. Only those may differ. Every rule
    that applies is applied (a rail-aligned gang that requires no scope used to keep its requirement)."""
    if job.share is not None and job.topology.required:
        job = replace(job, topology=TopologyRequirement(job.topology.scope, TopologyMode.PREFERRED))
    if job.rail_aligned and job.tasks > 1:
        job = replace(job, rail_aligned=False)
    if job.topology == TopologyRequirement(Scope.ANY, TopologyMode.REQUIRED):
        # Issue 20: required with no scope named means the smallest domain that holds the gang
        # (scheduler.topowait), which the reference does not know; there it meant anywhere.
        job = replace(job, topology=TopologyRequirement(Scope.ANY, TopologyMode.PREFERRED))
    return job


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    fab_key=st.sampled_from(sorted(FABRICS)),
    placer=st.sampled_from(sorted(PLACERS)),
    policy=st.sampled_from(sorted(POLICIES)),
    limit=st.sampled_from([1000, 2]),
    strict=st.booleans(),
)
def test_without_sharing_rules_the_one_cycle_places_what_the_plain_cycle_placed(
    data: st.DataObject, fab_key: str, placer: str, policy: str, limit: int, strict: bool
) -> None:
    state = _state(fab_key, data)
    pending = [_exact(j) for j in data.draw(jobs("j", 14))]
    # Deadlines and elastic sizes: without deadline admission they only order the queue.
    deadline = data.draw(st.sampled_from([None, 1.5, 5000.0]))
    pending = [
        replace(j, deadline_s=deadline, estimated_runtime_s=100.0) if i % 3 == 0 else j for i, j in enumerate(pending)
    ]
    # The reference predates topology waits (scheduler.topowait, tested on their own): gangs cross domains there.
    cfg = SchedulerConfig(
        policy=policy, placer=placer, max_placements_per_cycle=limit, strict=strict, topology_wait_s=0.0
    )
    req = ScheduleRequest(state.snapshot(), tuple(pending), 1.0, cfg)
    by_id = {j.job_id: j for j in pending}
    got = schedule(req)
    ref = schedule_plain(req)
    assert got.placements == ref.placements
    assert [w.job_id for w in got.waiting] == [w.job_id for w in ref.waiting]
    # Reasons: the reference diagnosed a shape when its first job was refused and repeated that; the one
    # cycle diagnoses every waiting job on the capacity the cycle leaves (what it waits for now). So the
    # reasons that do not depend on capacity agree, and the rest are the diagnosis of the final state.
    static = {ReasonCode.CYCLE_LIMIT, ReasonCode.BLOCKED, ReasonCode.NO_MATCHING_HOSTS, ReasonCode.UNSATISFIABLE}
    for g, r in zip(got.waiting, ref.waiting, strict=True):
        assert (g.reason in static or r.reason in static) <= (g.reason == r.reason)
    for a in got.placements:
        state.apply(JobSubmitted(by_id[a.job_id], 1.0))
        state.apply(JobPlaced(a, 1.0))
    final = state.snapshot()
    cap = Capacity(final, penalties(final, cfg.telemetry))
    for w in got.waiting:
        if w.reason not in (ReasonCode.CYCLE_LIMIT, ReasonCode.BLOCKED):
            job = by_id[w.job_id]
            assert (w.reason, w.message) == diagnose(cap, make_need(job, cap, host_mask(cap, job, final.host_labels)))
    assert not got.preemptions and not got.signals and not got.reservations
    assert got == schedule(req, remember_refusals=False)


def test_a_plain_request_starts_an_elastic_deadline_job_only_at_its_full_size() -> None:
    state = ClusterState(make_fabric(1, 1))  # 8 GPUs
    busy = make_job("busy", gpus=6)
    r = schedule(ScheduleRequest(state.snapshot(), (busy,), 0.0))
    state.apply(JobSubmitted(busy, 0.0))
    state.apply(JobPlaced(r.placements[0], 0.0))
    elastic = make_job(
        "el", tasks=4, gpus=1, deadline_s=50.0, estimated_runtime_s=10.0, min_tasks=1, scaling=Scaling.LINEAR
    )
    assert NO_SHARING.plain and ScheduleRequest(state.snapshot(), (), 0.0).sharing is NO_SHARING
    plain = schedule(ScheduleRequest(state.snapshot(), (elastic,), 0.0))
    assert not plain.placements  # 4 GPUs needed, 2 free: it waits at its full size
    admission = replace(NO_SHARING, deadline_admission=True)
    shrunk = schedule(ScheduleRequest(state.snapshot(), (elastic,), 0.0, sharing=admission))
    assert [len(a.tasks) for a in shrunk.placements] == [2]  # 2 tasks (20 s) still meet the deadline
