from __future__ import annotations

import numpy as np
import pytest
from sched_builders import make_fabric, make_job, run, submit_and_place

from gpupool.cluster import ClusterState
from gpupool.domain.errors import JobSpecError, UnknownNameError
from gpupool.domain.events import (
    GpuHealthChanged,
    HealthGrade,
    JobPlaced,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    LinkHealthChanged,
    LinkState,
    NodeDrained,
    NodeLabelled,
    NodeLost,
    TelemetryReported,
)
from gpupool.domain.jobs import PriorityClass, Scope
from gpupool.fabric.generators import ServerSpec, superpod
from gpupool.fabric.model import Domain
from gpupool.scheduler import PLACERS, POLICIES, ReasonCode, SchedulerConfig, ScheduleRequest, get_placer, get_policy
from gpupool.scheduler.policies import order


@pytest.fixture(scope="module")
def pod2():  # type: ignore[no-untyped-def]
    return superpod(2)


def test_registry_lists_every_placer_and_policy() -> None:
    assert set(PLACERS) == {"first-fit", "best-fit", "spread", "topology", "frag"}
    assert set(POLICIES) == {
        "fifo",
        "priority",
        "srt",
        "sjf",
        "hrrn",
        "las",
        "gittins",
        "sf-srpt",
        "sf-gittins",
        "edf",
        "slack",
        "fair",
    }
    with pytest.raises(UnknownNameError, match="unknown placer 'nope'"):
        get_placer("nope")
    with pytest.raises(UnknownNameError, match="unknown queue policy"):
        get_policy("nope")


def test_gang_of_four_whole_hosts_lands_in_one_su_with_every_gpu(pod2) -> None:  # type: ignore[no-untyped-def]
    state = ClusterState(pod2)
    r = run(state, [make_job("a", tasks=4, gpus=8)])
    (alloc,) = r.placements
    assert len(alloc.tasks) == 4
    hosts = [pod2.host_index(t.host) for t in alloc.tasks]
    assert len(set(hosts)) == 4
    assert pod2.smallest_domain(hosts) in (Domain.LEAF, Domain.SU)
    assert all(t.gpus == tuple(range(8)) for t in alloc.tasks)


def test_single_host_job_goes_to_the_fullest_host_that_fits() -> None:
    fab = make_fabric(1, 3)
    state = ClusterState(fab)
    first = [make_job("x", gpus=5), make_job("y", gpus=6, t=1)]
    r = run(state, first)
    submit_and_place(state, r, first)
    # node001 has 3 free, node002 2 free, node003 8 free: a 3-GPU job takes node001's three.
    r2 = run(state, [make_job("z", gpus=3, t=2)])
    (alloc,) = r2.placements
    hosts = {a.job_id: a.tasks[0].host for a in r.placements}
    assert hosts["x"] == "node001" and hosts["y"] == "node002"
    assert alloc.tasks[0].host == "node001"


def test_small_jobs_pack_into_one_leaf_so_the_other_stays_whole_for_a_leaf_gang() -> None:
    fab = make_fabric(2, 4)  # 32 GPUs per leaf
    state = ClusterState(fab)
    for i in range(2):
        job = [make_job(f"f{i}", gpus=8, t=i)]
        submit_and_place(state, run(state, job), job)
    leaves = {fab.host_index(r.allocation.tasks[0].host) // 4 for r in state.snapshot().running.values()}
    assert len(leaves) == 1
    res = run(state, [make_job("big", tasks=4, gpus=8, t=2, scope=Scope.LEAF, required=True)])
    assert len(res.placements) == 1


def test_required_leaf_message_when_each_leaf_has_24_free() -> None:
    fab = make_fabric(2, 4)
    state = ClusterState(fab)
    jobs = [
        make_job("f1", gpus=8, node_selector=(("slot", "a"),)),
        make_job("f2", gpus=8, t=1, node_selector=(("slot", "b"),)),
    ]
    state.apply(NodeLabelled("node001", (("slot", "a"),), 0))
    state.apply(NodeLabelled("node005", (("slot", "b"),), 0))
    submit_and_place(state, run(state, jobs), jobs)
    res = run(state, [make_job("big", tasks=4, gpus=8, scope=Scope.LEAF, required=True)])
    assert res.waiting[0].reason is ReasonCode.TOPOLOGY
    assert res.waiting[0].message == "needs 32 GPUs under one leaf; the best leaf has 24 free"
    # Preferred: the jobs holding the leaves started now, without estimates, so they are expected to end
    # within the topology wait and it waits for a leaf; without a wait it runs across the two leaves.
    res1 = run(state, [make_job("big", tasks=4, gpus=8, scope=Scope.LEAF)])
    assert res1.waiting[0].reason is ReasonCode.TOPOLOGY
    res2 = run(state, [make_job("big", tasks=4, gpus=8, scope=Scope.LEAF)], topology_wait_s=0.0)
    assert len(res2.placements) == 1


@pytest.mark.parametrize(
    ("job", "reason"),
    [
        (make_job("u", gpus=16), ReasonCode.UNSATISFIABLE),
        (make_job("m", gpus=1, gpu_models=("NVIDIA B200",)), ReasonCode.NO_MATCHING_HOSTS),
        (make_job("c", gpus=1, cpu_millicores=10**9), ReasonCode.UNSATISFIABLE),
        (make_job("n", tasks=9, gpus=8), ReasonCode.UNSATISFIABLE),
    ],
)
def test_reasons_for_jobs_that_can_never_fit(job, reason) -> None:  # type: ignore[no-untyped-def]
    state = ClusterState(make_fabric(2, 4))
    res = run(state, [job])
    assert [w.reason for w in res.waiting] == [reason]
    assert res.waiting[0].message


def test_no_capacity_and_fragmented_reasons() -> None:
    state = ClusterState(make_fabric(1, 2))
    jobs = [make_job("a", gpus=7), make_job("b", gpus=7, t=1)]
    submit_and_place(state, run(state, jobs), jobs)
    res = run(state, [make_job("c", gpus=4), make_job("d", tasks=1, gpus=2, t=1), make_job("e", gpus=3, t=2)])
    reasons = {w.job_id: (w.reason, w.message) for w in res.waiting}
    assert reasons["c"][0] is ReasonCode.NO_CAPACITY
    assert reasons["c"][1] == "needs 4 GPUs; 2 are free"
    assert reasons["d"][0] is ReasonCode.FRAGMENTED
    assert "the best host has 1 free" in reasons["d"][1]


def test_priority_policy_places_high_class_first_and_fifo_does_not() -> None:
    state = ClusterState(make_fabric(1, 1))
    jobs = [make_job("old", gpus=8, t=0), make_job("vip", gpus=8, t=5, priority=PriorityClass.HIGH)]
    assert [a.job_id for a in run(state, jobs, policy="priority").placements] == ["vip"]
    assert [a.job_id for a in run(state, jobs, policy="fifo").placements] == ["old"]


def test_sjf_las_and_edf_orders() -> None:
    state = ClusterState(make_fabric(1, 1))
    long_ = make_job("long", gpus=8, t=0, estimated_runtime_s=1000)
    short = make_job("short", gpus=8, t=1, estimated_runtime_s=10)
    assert run(state, [long_, short], policy="sjf").placements[0].job_id == "short"
    late = make_job("late", gpus=8, t=0, deadline_s=500)
    soon = make_job("soon", gpus=8, t=1, deadline_s=100)
    assert run(state, [late, soon], now=50, policy="edf").placements[0].job_id == "soon"
    # LAS: a job that already had service waits behind one that had none.
    st = ClusterState(make_fabric(1, 1))
    served = make_job("served", gpus=8, t=0)
    st.apply(JobSubmitted(served, 0))
    r = run(st, [served])
    st.apply(JobPlaced(r.placements[0], 0))
    st.apply(JobStarted("served", 0))
    st.apply(JobPreempted("served", 1000))
    fresh = make_job("fresh", gpus=8, t=5)
    assert st.snapshot().attained_gpu_s["served"] == 8000.0
    assert run(st, [served, fresh], policy="las").placements[0].job_id == "fresh"
    assert run(st, [served, fresh], policy="fifo").placements[0].job_id == "served"


def test_hrrn_ranks_by_wait_plus_estimate_over_estimate() -> None:
    state = ClusterState(make_fabric(1, 1))
    first = lambda jobs, now: run(state, jobs, now=now, policy="hrrn").placements[0].job_id  # noqa: E731
    long_ = make_job("long", gpus=8, t=0, estimated_runtime_s=1000)
    # At 100 s: long (100 + 1000) / 1000 = 1.1; short, 5 s old, (5 + 10) / 10 = 1.5. SJF would agree, FIFO not.
    short = make_job("short", gpus=8, t=95, estimated_runtime_s=10)
    assert first([long_, short], 100) == "short"
    assert run(state, [long_, short], now=100, policy="fifo").placements[0].job_id == "long"
    # A long job that waited long enough beats a short one that just came: at 5000 s 6.0 against 1.0.
    fresh = make_job("fresh", gpus=8, t=5000, estimated_runtime_s=10)
    assert first([fresh, long_], 5000) == "long"
    assert run(state, [fresh, long_], now=5000, policy="sjf").placements[0].job_id == "fresh"
    # Around the crossing at 1000 s (long: 2.0): a 100 s job that has waited 110 s (2.1) goes first, one that
    # has waited 90 s (1.9) does not.
    assert first([long_, make_job("mid", gpus=8, t=890, estimated_runtime_s=100)], 1000) == "mid"
    assert first([long_, make_job("mid", gpus=8, t=910, estimated_runtime_s=100)], 1000) == "long"
    # The full order: ratios, then jobs without an estimate last, FIFO among themselves (not by priority).
    none_old = make_job("none-old", gpus=8, t=0)
    none_vip = make_job("none-vip", gpus=8, t=10, priority=PriorityClass.HIGH)
    pending = (none_vip, none_old, fresh, long_, short)
    ranked = order(get_policy("hrrn"), ScheduleRequest(state.snapshot(), pending, 5000, SchedulerConfig()))
    assert [j.job_id for j in ranked] == ["short", "long", "fresh", "none-old", "none-vip"]  # 491.5, 6, 1
    # Equal ratios fall back to (-priority, submit, id).
    twin = make_job("twin", gpus=8, t=0, estimated_runtime_s=1000, priority=PriorityClass.HIGH)
    assert first([long_, twin], 100) == "twin"


def test_strict_blocks_behind_the_head_and_cycle_limit_bounds_the_cycle() -> None:
    state = ClusterState(make_fabric(1, 2))
    jobs = [make_job("huge", gpus=8, tasks=3), make_job("small", gpus=1, t=1), make_job("small2", gpus=1, t=2)]
    res = run(state, jobs, policy="fifo", strict=True)
    assert not res.placements
    assert [w.reason for w in res.waiting] == [ReasonCode.UNSATISFIABLE, ReasonCode.BLOCKED, ReasonCode.BLOCKED]
    res2 = run(state, jobs, policy="fifo", max_placements_per_cycle=1)
    assert [a.job_id for a in res2.placements] == ["small"]
    assert {w.job_id: w.reason for w in res2.waiting} == {
        "huge": ReasonCode.UNSATISFIABLE,
        "small2": ReasonCode.CYCLE_LIMIT,
    }


def test_duplicate_pending_job_is_rejected() -> None:
    state = ClusterState(make_fabric(1, 1))
    with pytest.raises(JobSpecError, match="pending twice"):
        run(state, [make_job("a"), make_job("a")])


def test_job_spec_validation() -> None:
    with pytest.raises(JobSpecError, match="tasks must be >= 1"):
        make_job("x", tasks=0)
    with pytest.raises(JobSpecError, match="gpus_per_task must be 1"):
        make_job("x", gpus=2, share=(500, 0))
    with pytest.raises(JobSpecError, match=r"milli_gpu must be in 0\.\.1000"):
        make_job("x", share=(1500, 0))


def test_shares_pack_onto_one_gpu_before_opening_another() -> None:
    state = ClusterState(make_fabric(1, 2))
    jobs = [make_job(f"s{i}", share=(250, 1000), t=i) for i in range(5)]
    res = run(state, jobs)
    gpus = [(a.tasks[0].host, a.tasks[0].gpus) for a in res.placements]
    assert len(gpus) == 5
    assert len(set(gpus[:4])) == 1 and gpus[4] != gpus[0]
    assert all(a.tasks[0].milli_gpu == 250 and a.tasks[0].gpu_memory_mib == 1000 for a in res.placements)


def test_bad_gpus_and_drained_hosts_are_never_used_and_hot_gpus_are_avoided() -> None:
    state = ClusterState(make_fabric(1, 2))
    state.apply(GpuHealthChanged("node001", 0, HealthGrade.BAD, 0))
    state.apply(NodeDrained("node002", 0))
    res = run(state, [make_job("a", gpus=8)])
    # Not "waiting for capacity": no host in service could ever hold it; it waits for hosts to come back.
    assert res.waiting[0].reason is ReasonCode.UNSCHEDULABLE
    res = run(state, [make_job("a", gpus=7)])
    assert res.placements[0].tasks[0].gpus == (1, 2, 3, 4, 5, 6, 7)
    st = ClusterState(make_fabric(1, 2))
    st.apply(TelemetryReported("node001", (88.0,) * 8, 0))  # hot: degraded and penalised
    res = run(st, [make_job("b", gpus=2)])
    assert res.placements[0].tasks[0].host == "node002"


def test_a_job_larger_than_the_hosts_in_service_is_unschedulable_not_waiting_for_capacity() -> None:
    """Issue 17: hosts without an agent (lost to the state) count in the fabric but not in service. A job that
    fits the fabric but not the hosts in service says so, naming both; one that fits them waits for capacity."""
    state = ClusterState(make_fabric(1, 4))  # 4 hosts, 32 GPUs
    for host in ("node003", "node004"):
        state.apply(NodeLost(host, 0))
    res = run(state, [make_job("big", tasks=3, gpus=8)])
    (w,) = res.waiting
    assert w.reason is ReasonCode.UNSCHEDULABLE
    assert "in service have 16 GPUs, room for 2 such task(s); 16 more GPU(s)" in w.message
    busy = run(state, [make_job("holds", gpus=8), make_job("two", tasks=2, gpus=8)])
    assert [(x.job_id, x.reason) for x in busy.waiting] == [("two", ReasonCode.NO_CAPACITY)]


def test_realtime_gets_the_coolest_gpus_and_congested_leaves_are_avoided() -> None:
    st = ClusterState(make_fabric(1, 2))
    st.apply(TelemetryReported("node001", (40.0,) * 8, 0))
    st.apply(TelemetryReported("node002", (75.0,) * 8, 0))
    packers = [make_job("p", gpus=6)]
    submit_and_place(st, run(st, packers), packers)
    rt = make_job("rt", gpus=2, t=1, priority=PriorityClass.REALTIME)
    batch = make_job("bt", gpus=2, t=1)
    assert run(st, [rt]).placements[0].tasks[0].host == "node001"
    # A batch job packs onto the fuller host regardless of a mild temperature difference.
    p_host = next(iter(st.snapshot().running.values())).allocation.tasks[0].host
    assert run(st, [batch]).placements[0].tasks[0].host == p_host
    fab = make_fabric(2, 2)
    st2 = ClusterState(fab)
    st2.apply(LinkHealthChanged("leaf-01", LinkState.DEGRADED, 0))
    res = run(st2, [make_job("g", tasks=2, gpus=8)])
    assert {t.host for t in res.placements[0].tasks} == {"node003", "node004"}


def test_node_selector_and_gpu_models() -> None:
    fab = superpod(1, ServerSpec.pcie())
    st = ClusterState(fab)
    st.apply(NodeLabelled("dgx007", (("zone", "b"),), 0))
    res = run(st, [make_job("a", gpus=2, node_selector=(("zone", "b"),), gpu_models=("NVIDIA L40S",))])
    assert res.placements[0].tasks[0].host == "dgx007"


def test_required_nvlink_on_pcie_hosts_is_unsatisfiable_beyond_one_gpu() -> None:
    st = ClusterState(superpod(1, ServerSpec.pcie()))
    res = run(
        st,
        [
            make_job("a", gpus=2, scope=Scope.NVLINK, required=True),
            make_job("b", gpus=1, t=1, scope=Scope.NVLINK, required=True),
        ],
    )
    assert [a.job_id for a in res.placements] == ["b"]
    assert res.waiting[0].reason is ReasonCode.TOPOLOGY


def test_rail_aligned_gang_uses_the_same_gpu_indices_on_every_host() -> None:
    fab = make_fabric(1, 4)
    st = ClusterState(fab)
    # Occupy different GPUs on each host so naive picks would misalign.
    for i, h in enumerate(["node001", "node002", "node003"]):
        st.apply(NodeLabelled(h, (("h", str(i)),), 0))
    fill = [make_job(f"f{i}", gpus=i + 1, t=i, node_selector=(("h", str(i)),)) for i in range(3)]
    submit_and_place(st, run(st, fill, placer="first-fit"), fill)
    res = run(st, [make_job("g", tasks=4, gpus=4, rail_aligned=True)])
    (alloc,) = res.placements
    assert {t.gpus for t in alloc.tasks} == {(4, 5, 6, 7)}
    assert len({t.host for t in alloc.tasks}) == 4
    # First-fit does not align: it takes the lowest free indices host by host.
    ff = run(st, [make_job("g", tasks=4, gpus=4)], placer="first-fit").placements[0]
    assert len({t.gpus for t in ff.tasks}) > 1


@pytest.mark.parametrize("placer", sorted(PLACERS))
def test_every_placer_is_deterministic_under_shuffled_pending(placer: str) -> None:
    fab = make_fabric(2, 4)
    jobs = [make_job(f"j{i}", tasks=1 + i % 3, gpus=1 + i % 4, t=i % 5) for i in range(20)]
    jobs += [make_job(f"s{i}", share=(300, 2000), t=i) for i in range(6)]
    st = ClusterState(fab)
    base = run(st, jobs, placer=placer)
    shuffled = [jobs[i] for i in np.random.default_rng(7).permutation(len(jobs))]
    assert run(st, shuffled, placer=placer) == base
    assert base.placements
