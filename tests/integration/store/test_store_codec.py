"""JobSpec <-> dict codec: lossless round trip for every valid spec, clear ParseErrors for malformed ones."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.domain.elastic import Elastic, ThroughputCurve
from gpupool.domain.errors import ParseError
from gpupool.domain.jobs import (
    Allocation,
    Dependency,
    DependencyKind,
    GpuShare,
    JobSpec,
    PriorityClass,
    RetryOn,
    RetryPolicy,
    Scaling,
    Scope,
    TaskAllocation,
    TopologyMode,
    TopologyRequirement,
)
from gpupool.store.codec import (
    allocation_from_dict,
    allocation_to_dict,
    spec_from_dict,
    spec_from_json,
    spec_to_dict,
    spec_to_json,
)

text = st.text(min_size=1, max_size=12)
finite = st.floats(min_value=0, max_value=1e9, allow_nan=False)


@st.composite
def specs(draw: st.DrawFn) -> JobSpec:
    tasks = draw(st.integers(1, 64))
    fractional = draw(st.booleans())
    share = None
    if fractional:
        share = GpuShare(draw(st.integers(1, 1000)), draw(st.integers(0, 80_000)))
    elastic = draw(st.booleans())
    return JobSpec(
        job_id=draw(text),
        submit_time_s=draw(finite),
        tasks=tasks,
        gpus_per_task=1 if fractional else draw(st.integers(1, 8)),
        name=draw(st.text(max_size=12)),
        tenant=draw(text),
        pool=draw(text),
        priority=draw(st.sampled_from(PriorityClass)),
        cpu_millicores=draw(st.integers(0, 10**6)),
        memory_mib=draw(st.integers(0, 10**7)),
        share=share,
        gpu_models=tuple(draw(st.lists(text, max_size=3))),
        node_selector=tuple(draw(st.lists(st.tuples(text, st.text(max_size=5)), max_size=3))),
        topology=TopologyRequirement(draw(st.sampled_from(Scope)), draw(st.sampled_from(TopologyMode))),
        rail_aligned=False if fractional else draw(st.booleans()),
        preemptible=draw(st.booleans()),
        estimated_runtime_s=draw(st.none() | st.floats(min_value=0.001, max_value=1e7, allow_nan=False)),
        deadline_s=draw(st.none() | finite),
        min_tasks=draw(st.integers(1, tasks)) if elastic else None,
        scaling=Scaling.LINEAR if elastic else Scaling.NONE,
        time_limit_s=draw(st.none() | st.floats(min_value=0.5, max_value=1e7, allow_nan=False)),
        signal_lead_s=draw(st.none() | finite),
        retry=draw(st.none() | st.builds(RetryPolicy, st.integers(0, 100), st.frozensets(st.sampled_from(RetryOn)))),
        after=tuple(
            draw(st.lists(st.builds(Dependency, st.sampled_from(DependencyKind), st.tuples(text)), max_size=2))
        ),
        **draw(
            st.none().map(lambda _: {})
            | st.builds(
                lambda a, i, c: {"array_id": a, "array_index": i, "array_cap": c},
                text,
                st.none() | st.integers(0, 10**6),
                st.integers(0, 100),
            )
        ),
    )


@settings(max_examples=100, deadline=None)
@given(specs())
def test_spec_round_trip_through_json(spec: JobSpec) -> None:
    assert spec_from_json(spec_to_json(spec)) == spec
    assert spec_from_dict(json.loads(json.dumps(spec_to_dict(spec)))) == spec


def test_codec_writes_every_field_of_jobspec() -> None:
    # A field added to JobSpec but not to the codec would be silently dropped by the store. The lifecycle
    # fields (time limit, retries, array, dependencies) are written only when set: a spec without them is
    # stored byte for byte as before they existed.
    full = JobSpec(
        "j",
        time_limit_s=60,
        signal_lead_s=5,
        retry=RetryPolicy(2),
        array_id="a",
        array_index=0,
        array_cap=2,
        after=(Dependency(DependencyKind.AFTEROK, ("x",)),),
        elastic=Elastic(1, 4, ThroughputCurve(((1, 1.0), (2, 1.8), (4, 3.0)), "toy")),
    )
    written = set(spec_to_dict(full)) - {"v"}
    array = {"array_id", "array_index", "array_cap"}
    assert written == {f.name for f in dataclasses.fields(JobSpec)} - array | {"array"}
    lifecycle = {"time_limit_s", "signal_lead_s", "retry", "array", "after", "elastic"}
    assert set(spec_to_dict(JobSpec("j"))) == written - lifecycle | {"v"}


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ([], "must be a JSON object"),
        ({"v": 1}, "'job_id' must be a string"),
        ({"job_id": "j", "tasks": "4"}, "'tasks' must be an integer"),
        ({"job_id": "j", "tasks": True}, "'tasks' must be an integer"),
        ({"job_id": "j", "priority": "urgent"}, "unknown priority 'urgent'"),
        ({"job_id": "j", "topology": {"scope": "rack"}}, "bad topology"),
        ({"job_id": "j", "node_selector": [["a"]]}, "node_selector entries"),
        ({"job_id": "j", "elastic": {"min": 1, "max": 2, "points": [[1, "x"]]}}, "elastic points must be"),
        ({"job_id": "j", "elastic": {"min": 1, "max": 2, "points": []}}, "at least one point"),
        ({"job_id": "j", "tasks": 0}, "tasks must be >= 1"),
        ({"job_id": "j", "v": 99}, "version 99 is not supported"),
        ({"job_id": "j", "scaling": "cubic"}, "unknown scaling 'cubic'"),
    ],
)
def test_malformed_spec_documents_name_the_problem_and_source(doc: object, needle: str) -> None:
    with pytest.raises(ParseError) as err:
        spec_from_dict(doc, source="job j (spec)")
    assert needle in str(err.value)
    assert err.value.source == "job j (spec)"


def test_invalid_json_reports_the_line() -> None:
    with pytest.raises(ParseError) as err:
        spec_from_json('{\n"job_id": "j",\n oops}', source="x")
    assert err.value.line == 3


def test_allocation_round_trip_and_bad_gpu_list() -> None:
    a = Allocation("j", (TaskAllocation("h1", (0, 1)), TaskAllocation("h2", (3,), milli_gpu=250, gpu_memory_mib=10)))
    assert allocation_from_dict(allocation_to_dict(a)) == a
    with pytest.raises(ParseError, match="list of GPU indices"):
        allocation_from_dict({"job_id": "j", "tasks": [{"host": "h", "gpus": ["0"]}]})
