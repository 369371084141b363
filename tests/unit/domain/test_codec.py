"""The journal's codec (``domain.codec`` over ``scheduler.journal.CODEC``'s types): every event, a job spec
with every optional part, the sharing rules with a calendar and quotas round-trip equal; input that is not
one of its types is refused with where it is."""

from __future__ import annotations

import json
import math
import typing
from types import MappingProxyType

import pytest

from gpupool.domain import events as ev
from gpupool.domain.calendar import parse_calendar
from gpupool.domain.codec import Codec
from gpupool.domain.jobs import (
    Allocation,
    Dependency,
    DependencyKind,
    GpuShare,
    JobSpec,
    PriorityClass,
    RetryPolicy,
    Scaling,
    Scope,
    TaskAllocation,
    TopologyMode,
    TopologyRequirement,
)
from gpupool.domain.sharing import Quota
from gpupool.domain.states import JobState
from gpupool.scheduler.journal import CODEC
from gpupool.scheduler.settings import SchedulerSettings, scheduler_config, sharing_policy
from gpupool.scheduler.types import ReasonCode, ScheduleResult, Signal, SignalKind, Waiting, Waits

SPEC = JobSpec(
    "j1",
    submit_time_s=12.5,
    tasks=4,
    gpus_per_task=2,
    tenant="acme",
    priority=PriorityClass.HIGH,
    gpu_models=("NVIDIA H100 80GB HBM3",),
    node_selector=(("zone", "b"),),
    topology=TopologyRequirement(Scope.LEAF, TopologyMode.REQUIRED),
    estimated_runtime_s=600.0,
    deadline_s=None,
    min_tasks=2,
    scaling=Scaling.LINEAR,
    time_limit_s=3600.0,
    retry=RetryPolicy(count=2),
    after=(Dependency(DependencyKind.AFTEROK, ("j0",)),),
)
ALLOC = Allocation("j1", (TaskAllocation("node001", (0, 1)), TaskAllocation("node002", (4, 5), cpu_millicores=8)))
EVENTS: list[ev.Event] = [
    ev.JobSubmitted(SPEC, 1.0),
    ev.JobSubmitted(JobSpec("j2", share=GpuShare(250, 1024)), 1.0),
    ev.JobPlaced(ALLOC, 2.0),
    ev.JobStarted("j1", 3.0),
    ev.JobFinished("j1", 4.0, succeeded=False),
    ev.JobCancelled("j2", 4.0),
    ev.JobPreempted("j1", 5.0, "GPU 3 of node001 turned bad"),
    ev.JobCheckpointed("j1", 5.0),
    ev.RanksReleasing(ALLOC, 6.0),
    ev.RanksReleased("j1", 7.0),
    ev.JobEnded("j1", JobState.TIMEOUT, 7.5),
    ev.NodeLost("node001", 8.0),
    ev.NodeDrained("node001", 8.0, "maintenance"),
    ev.NodeRestored("node001", 9.0),
    ev.NodeLabelled("node001", (("gpupool/leaf", "leaf-01"), ("zone", "b")), 9.0),
    ev.GpuHealthChanged("node001", 3, ev.HealthGrade.BAD, 10.0, "XID 79"),
    ev.LinkHealthChanged("leaf-01", ev.LinkState.DEGRADED, 10.0),
    ev.TelemetryReported("node001", (40.0, math.nan, 88.5), 11.0, (0.0, math.nan, 100.0)),
    ev.PortCountersReported("leaf-01", 10**12, 3, 11.5),
]


def through_json(value: object) -> object:
    return CODEC.decode(json.loads(json.dumps(CODEC.encode(value))))


def test_every_kind_of_event_is_covered() -> None:
    assert {type(e) for e in EVENTS} == set(typing.get_args(ev.Event))


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_an_event_round_trips_equal(event: ev.Event) -> None:
    got = through_json(event)
    if isinstance(event, ev.TelemetryReported):  # NaN != NaN: compare what is there
        assert isinstance(got, ev.TelemetryReported)
        assert str(got) == str(event)
    else:
        assert got == event and type(got) is type(event)


def test_the_scheduler_config_and_sharing_rules_round_trip_equal() -> None:
    cal = parse_calendar(
        'timezone = "Europe/Paris"\ndefault_pool = "train"\n[[pool]]\nname = "infer"\nsus = [1]\nshare = 0.5\n'
        'share_outside = 0.25\nwindows = [{days = "mon-fri", start = "08:00", end = "20:00"}]\n',
        "cal.toml",
    )
    quotas = (Quota("acme", "train", 16, borrowing_limit_gpus=8, cohort="c"),)
    policy = sharing_policy(SchedulerSettings(), quotas=quotas, weights={"acme": 2.0}, calendar=cal)
    got = through_json(policy)
    assert got == policy
    config = scheduler_config(SchedulerSettings(policy="gittins", las_thresholds_gpu_s=(10.0, 100.0)))
    assert through_json(config) == config


def test_a_schedule_result_round_trips_equal() -> None:
    result = ScheduleResult(
        (ALLOC,),
        (),
        Waits((Waiting("j2", ReasonCode.NO_CAPACITY, "needs 8 GPUs"),)),
        42,
        (Signal("j3", SignalKind.CHECKPOINT, ReasonCode.QUOTA_RECLAIM, "q", 99.0),),
    )
    got = through_json(result)
    assert got == result
    assert isinstance(got, ScheduleResult) and type(got.waiting[0]) is Waiting  # a named tuple stays one


def test_mappings_keep_their_keys_and_sets_their_members() -> None:
    codec = Codec([])
    assert codec.decode(codec.encode(MappingProxyType({1: "a", "b": 2}))) == {1: "a", "b": 2}
    assert codec.decode(codec.encode(frozenset({3, 1}))) == frozenset({1, 3})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"_t": "Popen", "args": ["sh"]}, "event: unknown type 'Popen'"),
        ({"_t": "JobStarted", "job_id": "j"}, "event: not a valid JobStarted"),
        ({"_e": "HealthGrade", "v": 7}, "event: 7 is not a HealthGrade"),
        ({"job_id": "j"}, "event: an object without a type tag"),
        ({"_t": "JobSubmitted", "job": {"_t": "JobSpec", "job_id": "j", "tasks": 0}, "at_s": 1}, "tasks must be >= 1"),
    ],
)
def test_what_is_not_one_of_its_types_is_refused_saying_where(data: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CODEC.decode(data, "event")


def test_a_type_it_was_not_given_is_not_encoded() -> None:
    with pytest.raises(TypeError, match="JobSpec is not a type of this codec"):
        Codec([]).encode(SPEC)
