"""An elastic job at the door and in the store: the wire section becomes the domain's, a named curve resolves
(or is one clear error listing the known ones), the stored spec keeps its curve, and the store's shape check
accepts every size of the job and only those."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpupool.domain.errors import InputError, JobSpecError
from gpupool.domain.jobs import Allocation, TaskAllocation
from gpupool.domain.model_curves import MODEL_CURVES
from gpupool.schemas.api import JobSubmit
from gpupool.server.convert import to_spec
from gpupool.store.codec import spec_from_json, spec_to_json
from gpupool.store.placements import _check_shape


def body(curve: object, **kw: object) -> JobSubmit:
    return JobSubmit.model_validate(
        {
            "command": ["python", "train.py"],
            "tasks": 2,
            "estimated_runtime": "1h",
            "deadline_s": 1e9,
            "elastic": {"gpus": {"min": 1, "max": 8}, "curve": curve},
            **kw,
        }
    )


def test_points_and_a_named_curve_reach_the_spec_and_survive_the_store() -> None:
    spec = to_spec(body([[1, 10], [2, 18], [4, 30], [8, 40]]), "j1", "alice", 0.0)
    assert spec.elastic is not None and spec.elastic.sizes() == (1, 2, 4, 8)
    assert spec_from_json(spec_to_json(spec)) == spec
    named = to_spec(body("resnet50@256"), "j2", "alice", 0.0)
    assert named.elastic is not None and named.elastic.curve == MODEL_CURVES["resnet50@256"]
    assert spec_from_json(spec_to_json(named)) == named


def test_an_unknown_curve_name_lists_the_known_ones() -> None:
    with pytest.raises(JobSpecError) as err:
        to_spec(body("resnet51@256"), "j", "alice", 0.0)
    assert "unknown throughput curve 'resnet51@256'" in str(err.value) and "vgg16@64" in str(err.value)


def test_a_curve_the_domain_refuses_is_one_error_naming_the_problem() -> None:
    with pytest.raises(JobSpecError, match="must rise"):
        to_spec(body([[2, 18], [1, 10]]), "j", "alice", 0.0)
    with pytest.raises(ValidationError, match=r"elastic\.gpus\.min"):
        body([[1, 10]], elastic={"gpus": {"min": 0, "max": 8}, "curve": [[1, 10]]})


def test_the_store_accepts_each_size_of_an_elastic_job_and_no_other() -> None:
    spec = to_spec(body([[1, 10], [2, 18], [4, 30], [8, 40]]), "j", "alice", 0.0)
    for ranks in (1, 2, 4, 8):
        _check_shape(spec, Allocation("j", tuple(TaskAllocation("h", (i,)) for i in range(ranks))))
    with pytest.raises(InputError, match="3 tasks is none of the elastic job's sizes"):
        _check_shape(spec, Allocation("j", tuple(TaskAllocation("h", (i,)) for i in range(3))))
