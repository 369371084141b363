from __future__ import annotations

import numpy as np
import pytest

from gpupool.cluster import ClusterState, FabricIndex, HealthRules
from gpupool.domain.errors import CapacityConflictError, TransitionError
from gpupool.domain.events import (
    GpuHealthChanged,
    HealthGrade,
    JobCancelled,
    JobFinished,
    JobPlaced,
    JobStarted,
    JobSubmitted,
    NodeDrained,
    NodeLost,
    NodeRestored,
    PortCountersReported,
    TelemetryReported,
)
from gpupool.domain.jobs import Allocation, GpuShare, JobSpec, TaskAllocation
from gpupool.domain.states import JOB_TRANSITIONS, NODE_TRANSITIONS, JobState, NodeState
from gpupool.fabric.generators import leaf_spine, superpod
from gpupool.fabric.model import Domain


def _state() -> ClusterState:
    return ClusterState(leaf_spine(2, 2, 2))


def _place(st: ClusterState, job_id: str, host: str, gpus: tuple[int, ...], milli: int = 1000, mem: int = 0) -> None:
    share = GpuShare(milli, mem) if milli < 1000 or mem else None
    st.apply(JobSubmitted(JobSpec(job_id, 0, gpus_per_task=1 if share else len(gpus), share=share), 0))
    st.apply(JobPlaced(Allocation(job_id, (TaskAllocation(host, gpus, milli, mem, 1000, 1024),)), 1))


def test_every_transition_names_its_cause() -> None:
    assert all(cause for cause in JOB_TRANSITIONS.values())
    assert all(cause for cause in NODE_TRANSITIONS.values())
    assert (JobState.FINISHED, JobState.RUNNING) not in JOB_TRANSITIONS
    assert (NodeState.LOST, NodeState.DRAINED) not in NODE_TRANSITIONS


def test_place_start_finish_frees_capacity_and_counts_service() -> None:
    st = _state()
    _place(st, "a", "node001", (0, 1))
    snap = st.snapshot()
    assert snap.free_gpus() == 30
    assert snap.host_cpu_used[0] == 1000
    assert st.job_state("a") is JobState.PLACED
    st.apply(JobStarted("a", 10))
    st.apply(JobFinished("a", 110))
    assert st.job_state("a") is JobState.FINISHED
    after = st.snapshot()
    assert after.free_gpus() == 32 and after.host_cpu_used[0] == 0
    # service counts while a job may come back (see the preemption test); a finished job's is dropped, since
    # every snapshot copies the map and a long simulation would grow quadratic
    assert "a" not in after.attained_gpu_s and "a" not in after.preemption_count
    assert snap.free_gpus() == 30  # the old snapshot did not change


def test_snapshot_arrays_are_read_only_and_cached_until_the_next_event() -> None:
    st = _state()
    s1 = st.snapshot()
    assert st.snapshot() is s1
    with pytest.raises(ValueError):
        s1.gpu_used_milli[0, 0] = 5
    _place(st, "a", "node001", (0,))
    assert st.snapshot() is not s1 and st.snapshot().version > s1.version


def test_conflicting_placement_is_refused_whole() -> None:
    st = _state()
    _place(st, "a", "node001", (0,), milli=600)
    st.apply(JobSubmitted(JobSpec("b", 0, share=GpuShare(500, 0)), 0))
    two = Allocation("b", (TaskAllocation("node002", (0,), 500, 0), TaskAllocation("node001", (0,), 500, 0)))
    with pytest.raises(CapacityConflictError, match="exceeds free capacity on node001"):
        st.apply(JobPlaced(two, 1))
    assert st.snapshot().gpu_used_milli[1, 0] == 0  # nothing of the refused allocation stuck
    with pytest.raises(CapacityConflictError, match="unknown host"):
        st.apply(JobPlaced(Allocation("b", (TaskAllocation("nope", (0,)),)), 1))


def test_invalid_transitions_raise() -> None:
    st = _state()
    with pytest.raises(TransitionError, match="unknown job"):
        st.apply(JobStarted("ghost", 0))
    st.apply(JobSubmitted(JobSpec("a"), 0))
    with pytest.raises(TransitionError, match="cannot go from pending to finished"):
        st.apply(JobFinished("a", 1))
    with pytest.raises(TransitionError, match="submitted twice"):
        st.apply(JobSubmitted(JobSpec("a"), 0))
    st.apply(JobCancelled("a", 2))
    assert st.snapshot().pending == ()


def test_node_lost_requeues_its_jobs_and_blocks_new_placements() -> None:
    st = _state()
    _place(st, "a", "node001", (0, 1, 2))
    st.apply(NodeLost("node001", 5))
    snap = st.snapshot()
    assert st.job_state("a") is JobState.PENDING
    assert [j.job_id for j in snap.pending] == ["a"]
    assert snap.free_gpus() == 24
    with pytest.raises(CapacityConflictError, match="is lost"):
        st.apply(JobPlaced(Allocation("a", (TaskAllocation("node001", (0,)),)), 6))
    st.apply(NodeRestored("node001", 7))
    st.apply(NodeDrained("node002", 8, "maintenance"))
    assert st.snapshot().free_gpus() == 24
    with pytest.raises(TransitionError):
        st.apply(NodeDrained("node002", 9))


def test_health_rules_turn_telemetry_into_grades_and_congestion() -> None:
    st = ClusterState(leaf_spine(2, 2, 2), HealthRules(xmit_wait_saturated_per_s=1000.0))
    st.apply(TelemetryReported("node001", (50.0, 86.0, 95.0), 0))
    st.apply(GpuHealthChanged("node002", 3, HealthGrade.DEGRADED, 0))
    g = st.snapshot().gpu_grade
    assert list(g[0, :4]) == [0, 1, 2, 0] and g[1, 3] == 1
    st.apply(PortCountersReported("leaf-01", 100, 0, 0.0))
    assert st.snapshot().switch_congestion.max() == 0.0
    st.apply(PortCountersReported("leaf-01", 600, 5, 1.0))
    snap = st.snapshot()
    s = st.index.switch_ix["leaf-01"]
    assert snap.switch_congestion[s] == pytest.approx(0.5)
    assert bool(snap.switch_erroring[s])


def test_fabric_index_levels_on_a_superpod() -> None:
    fab = superpod(2)
    ix = FabricIndex(fab)
    doms = [lv.domain for lv in ix.levels]
    assert doms == [Domain.LEAF, Domain.SU, Domain.SPINE_GROUP, Domain.CORE]
    leaf, su = ix.levels[0], ix.levels[1]
    assert leaf.count == 2 and su.same_as_previous
    assert sorted(np.concatenate([leaf.hosts(d) for d in range(leaf.count)]).tolist()) == list(range(len(fab.hosts)))
    assert ix.host_gpus.tolist() == [8] * len(fab.hosts)


def test_preempted_job_goes_back_to_the_queue_with_its_history() -> None:
    from gpupool.domain.events import JobCheckpointed, JobFinished, JobPlaced, JobPreempted, JobStarted, JobSubmitted
    from gpupool.domain.jobs import Allocation, JobSpec, TaskAllocation
    from gpupool.fabric.generators import leaf_spine

    fab = leaf_spine(1, 1, 2, gpus_per_host=4)
    state = ClusterState(fab)
    job = JobSpec("j", tasks=2, gpus_per_task=2)
    alloc = Allocation("j", (TaskAllocation("node001", (0, 1)), TaskAllocation("node002", (0, 1))))
    state.apply(JobSubmitted(job, 0.0))
    state.apply(JobPlaced(alloc, 0.0))
    state.apply(JobStarted("j", 10.0))
    state.apply(JobCheckpointed("j", 60.0))
    r = state.snapshot().running["j"]
    assert r.last_checkpoint_s == 60.0 and r.work_lost_s(100.0) == 40.0 and r.runtime_s(100.0) == 90.0
    state.apply(JobPreempted("j", 110.0, "priority"))
    snap = state.snapshot()
    assert snap.free_gpus() == 8  # both tasks released: a gang goes whole
    assert [p.job_id for p in snap.pending] == ["j"]
    assert snap.preemption_count["j"] == 1 and snap.attained_gpu_s["j"] == 400.0
    state.apply(JobPlaced(alloc, 120.0))
    assert state.snapshot().running["j"].preemptions == 1
    state.apply(JobStarted("j", 130.0))
    # the service of every run, the current one up to the time asked (what the server's loop records for
    # ``gittins`` as the job finishes)
    assert state.service_gpu_s("j", 140.0) == 400.0 + 40.0
    assert state.job_spec("j") == job
    state.apply(JobFinished("j", 140.0))
    done = state.snapshot()
    assert "j" not in done.attained_gpu_s and "j" not in done.preemption_count
