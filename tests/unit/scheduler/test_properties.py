"""Property tests: whatever the jobs and the cluster's state, placements never break the rules."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_builders import make_job

from gpupool.cluster import ClusterState, FabricIndex
from gpupool.domain.events import GpuHealthChanged, HealthGrade, JobPlaced, JobSubmitted, NodeDrained
from gpupool.domain.jobs import MILLI_PER_GPU, JobSpec, Scope
from gpupool.fabric.generators import leaf_spine, superpod
from gpupool.scheduler import PLACERS, SchedulerConfig, ScheduleRequest, schedule

FABRICS = {"ls": leaf_spine(3, 2, 3, gpus_per_host=4), "pod": superpod(1)}
INDEXES = {k: FabricIndex(f) for k, f in FABRICS.items()}
MEM = 81559


@st.composite
def jobs(draw: st.DrawFn, prefix: str, n_max: int) -> list[JobSpec]:
    out = []
    for i in range(draw(st.integers(1, n_max))):
        kind = draw(st.sampled_from(["whole", "whole", "gang", "share"]))
        scope = draw(st.sampled_from(list(Scope)))
        required = draw(st.booleans())
        kw: dict[str, object] = {
            "t": float(draw(st.integers(0, 5))),
            "cpu_millicores": draw(st.sampled_from([0, 1000, 60_000])),
            "memory_mib": draw(st.sampled_from([0, 4096, 600_000])),
            "rail_aligned": draw(st.booleans()),
            "priority": draw(st.sampled_from([1, 2, 4])),
        }
        if kind == "share":
            kw["rail_aligned"] = False
            share = (draw(st.sampled_from([100, 300, 700])), draw(st.sampled_from([0, 1000, 30000])))
            job = make_job(
                f"{prefix}{i}", tasks=draw(st.integers(1, 3)), share=share, scope=scope, required=required, **kw
            )  # type: ignore[arg-type]
        elif kind == "gang":
            job = make_job(
                f"{prefix}{i}",
                tasks=draw(st.integers(2, 6)),
                gpus=draw(st.sampled_from([1, 2, 4, 8])),
                scope=scope,
                required=required,
                **kw,
            )  # type: ignore[arg-type]
        else:
            job = make_job(f"{prefix}{i}", gpus=draw(st.integers(1, 8)), scope=scope, required=required, **kw)  # type: ignore[arg-type]
        out.append(job)
    return out


def _state(fab_key: str, data: st.DataObject) -> ClusterState:
    state = ClusterState(INDEXES[fab_key])
    fab = FABRICS[fab_key]
    for h in data.draw(st.lists(st.integers(0, len(fab.hosts) - 1), max_size=2, unique=True)):
        state.apply(NodeDrained(fab.hosts[h].name, 0))
    for h in data.draw(st.lists(st.integers(0, len(fab.hosts) - 1), max_size=3)):
        state.apply(GpuHealthChanged(fab.hosts[h].name, 0, HealthGrade.BAD, 0))
    # Prior running work placed by the scheduler itself (first cycle), so the second cycle starts fragmented.
    place_first(state, data.draw(jobs("pre", 8)))
    return state


def place_first(state: ClusterState, pre: list[JobSpec]) -> None:
    """Run ``pre`` as the cluster's running work: what a first-fit cycle places of it, applied to ``state``."""
    res = schedule(ScheduleRequest(state.snapshot(), tuple(pre), 0.0, SchedulerConfig(placer="first-fit")))
    by_id = {j.job_id: j for j in pre}
    for a in res.placements:
        state.apply(JobSubmitted(by_id[a.job_id], 0))
        state.apply(JobPlaced(a, 0))


def _check(state: ClusterState, pending: list[JobSpec], placer: str) -> None:
    snap = state.snapshot()
    ix = snap.index
    res = schedule(ScheduleRequest(snap, tuple(pending), 1.0, SchedulerConfig(placer=placer)))
    by_id = {j.job_id: j for j in pending}
    # Every pending job is either placed or waiting with a reason, exactly once.
    assert sorted([a.job_id for a in res.placements] + [w.job_id for w in res.waiting]) == sorted(by_id)
    assert all(w.message for w in res.waiting)
    used_m = snap.gpu_used_milli.copy()
    used_g = snap.gpu_used_memory_mib.copy()
    cpu = snap.host_cpu_used.copy()
    mem = snap.host_memory_used.copy()
    exclusive = (used_m >= MILLI_PER_GPU).copy()
    for a in res.placements:
        job = by_id[a.job_id]
        assert len(a.tasks) == job.tasks  # the whole gang or nothing
        hosts = [ix.host_index(t.host) for t in a.tasks]
        for t, h in zip(a.tasks, hosts, strict=True):
            assert snap.node_state[h] == 0
            assert len(t.gpus) == job.gpus_per_task and len(set(t.gpus)) == len(t.gpus)
            for g in t.gpus:
                assert snap.gpu_grade[h, g] < HealthGrade.BAD
                if job.share is None:
                    assert not exclusive[h, g] and used_m[h, g] == 0 and used_g[h, g] == 0  # never given twice
                    used_m[h, g] = MILLI_PER_GPU
                    used_g[h, g] = ix.gpu_memory_mib[h, g]
                    exclusive[h, g] = True
                else:
                    assert not exclusive[h, g]
                    used_m[h, g] += job.share.milli_gpu
                    used_g[h, g] += job.share.memory_mib
            cpu[h] += job.cpu_millicores
            mem[h] += job.memory_mib
        if job.topology.required:
            if job.topology.scope is Scope.LEAF:
                assert len({int(ix.levels[0].ids[h]) for h in hosts}) == 1
            elif job.topology.scope is Scope.SU:
                su = next(lv for lv in ix.levels if lv.domain.name == "SU")
                assert len({int(su.ids[h]) for h in hosts}) == 1
            elif job.topology.scope is Scope.NVLINK:
                assert len(set(hosts)) == 1
        if job.rail_aligned and len(set(hosts)) > 1:
            per_host: dict[int, set[int]] = {}
            for t, h in zip(a.tasks, hosts, strict=True):
                per_host.setdefault(h, set()).update(t.gpus)
            assert len({frozenset(s) for s in per_host.values()}) == 1
    assert (used_m <= MILLI_PER_GPU).all()
    assert (used_g <= ix.gpu_memory_mib).all()
    assert (cpu <= ix.host_cpu_millicores).all() and (mem <= ix.host_memory_mib).all()
    # The state accepts every placement (its own capacity checks agree), and the result is reproducible.
    for a in res.placements:
        state.apply(JobSubmitted(by_id[a.job_id], 1))
        state.apply(JobPlaced(a, 1))
    perm = np.random.default_rng(len(pending)).permutation(len(pending))
    again = schedule(ScheduleRequest(snap, tuple(pending[i] for i in perm), 1.0, SchedulerConfig(placer=placer)))
    assert again == res


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), fab_key=st.sampled_from(sorted(FABRICS)), placer=st.sampled_from(sorted(PLACERS)))
def test_placements_never_break_capacity_gangs_topology_or_determinism(
    data: st.DataObject, fab_key: str, placer: str
) -> None:
    state = _state(fab_key, data)
    _check(state, data.draw(jobs("j", 12)), placer)
