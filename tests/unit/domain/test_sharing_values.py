from __future__ import annotations

import pytest

from gpupool.domain.errors import InputError, JobSpecError
from gpupool.domain.jobs import JobSpec, Scaling
from gpupool.domain.sharing import PoolDemand, Quota, decayed


def test_usage_halves_every_half_life() -> None:
    assert decayed(1000.0, 3600.0, 0.0, 3600.0) == pytest.approx(500.0)
    assert decayed(1000.0, 7200.0, 10.0, 3600.0) == pytest.approx(260.0)
    with pytest.raises(InputError):
        decayed(1.0, 1.0, 0.0, 0.0)


def test_quota_lendable_and_validation() -> None:
    assert Quota("a", "training", 64).lendable_gpus == 64
    assert Quota("a", "training", 64, lending_limit_gpus=16).lendable_gpus == 16
    with pytest.raises(InputError, match="nominal"):
        Quota("a", "training", -1)
    assert PoolDemand("inference", 3, 2, 0.0, headroom_gpus=2).gpus == 8


def test_elastic_job_runtime_scales_linearly() -> None:
    job = JobSpec("j", tasks=8, estimated_runtime_s=100.0, min_tasks=4, scaling=Scaling.LINEAR)
    assert job.fewest_tasks == 4
    assert job.runtime_with(4, 50.0) == pytest.approx(200.0)
    assert job.runtime_with(8, 50.0) == pytest.approx(100.0)
    assert JobSpec("k", tasks=2).runtime_with(1, 50.0) == 50.0
    with pytest.raises(JobSpecError, match="scaling"):
        JobSpec("x", tasks=4, min_tasks=2)
    with pytest.raises(JobSpecError, match="min_tasks"):
        JobSpec("x", tasks=4, min_tasks=5, scaling=Scaling.LINEAR)
