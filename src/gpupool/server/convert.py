"""Wire models <-> domain values for the REST API (pure functions)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gpupool.domain import labels
from gpupool.domain.dependencies import parse_array
from gpupool.domain.elastic import Elastic, ThroughputCurve
from gpupool.domain.errors import JobSpecError
from gpupool.domain.jobs import (
    MILLI_PER_GPU,
    GpuShare,
    JobSpec,
    PriorityClass,
    RetryOn,
    RetryPolicy,
    Scaling,
    Scope,
    TopologyMode,
    TopologyRequirement,
)
from gpupool.domain.model_curves import MODEL_CURVES
from gpupool.domain.states import JobState
from gpupool.schemas.api import AttemptOut, ElasticIn, JobOut, JobSubmit
from gpupool.store import JobRecord
from gpupool.store.records import AttemptRecord


def node_selector(body: JobSubmit) -> dict[str, str]:
    """The job's selector, and for a job with an image a node with a container runtime (unless its selector
    already names one): an agent without one, or from before containers, would run ``command`` on the node."""
    if body.image is None or labels.CONTAINER_RUNTIME in body.node_selector:
        return dict(body.node_selector)
    return {**body.node_selector, labels.CONTAINERS: "yes"}


def to_spec(body: JobSubmit, job_id: str, tenant: str, now_s: float) -> JobSpec:
    """A JobSpec from a submission; the spec's own checks raise JobSpecError (a 422) for what pydantic cannot see."""
    return JobSpec(
        job_id=job_id,
        submit_time_s=now_s,
        tasks=body.tasks,
        gpus_per_task=body.gpus_per_task,
        name=body.name,
        tenant=tenant,
        pool=body.pool,
        priority=PriorityClass[body.priority.upper()],
        cpu_millicores=body.cpu_millicores,
        memory_mib=body.memory_mib,
        share=None if body.share is None else GpuShare(body.share.milli_gpu, body.share.memory_mib),
        gpu_models=tuple(body.gpu_models),
        node_selector=tuple(sorted(node_selector(body).items())),
        topology=TopologyRequirement(Scope(body.topology.scope), TopologyMode(body.topology.mode)),
        rail_aligned=body.rail_aligned,
        preemptible=body.preemptible,
        estimated_runtime_s=body.estimated_runtime_s,
        deadline_s=body.deadline_s,
        min_tasks=body.min_tasks,
        scaling=Scaling(body.scaling),
        time_limit_s=body.time_limit_s,
        signal_lead_s=body.signal_lead_s,
        retry=None
        if body.retry is None
        else RetryPolicy(body.retry.count, frozenset(RetryOn(c) for c in body.retry.on)),
        elastic=None if body.elastic is None else elastic(body.elastic),
    )


def elastic(body: ElasticIn) -> Elastic:
    """The elastic section: its curve's points, or the named curve (an unknown name is a 422 listing them)."""
    if isinstance(body.curve, str):
        curve = MODEL_CURVES.get(body.curve)
        if curve is None:
            known = ", ".join(sorted(MODEL_CURVES))
            raise JobSpecError(f"unknown throughput curve {body.curve!r} (known: {known})", source="elastic.curve")
    else:
        curve = ThroughputCurve(tuple((g, r) for g, r in body.curve))
    return Elastic(body.gpus.min, body.gpus.max, curve, body.gpus.step)


def array_elements(spec: JobSpec, text: str, max_size: int) -> tuple[JobSpec, ...]:
    """One job per index of Slurm's ``--array`` syntax, ids ``<array id>.<index>`` (a dot: agents take it in
    assignment ids and directory names). Each a microsecond after the one before, so policies that break
    ties by submit time run them in index order, as Slurm does."""
    a = parse_array(text, max_size, "body.array")
    return tuple(
        dataclasses.replace(
            spec,
            job_id=f"{spec.job_id}.{i}",
            submit_time_s=spec.submit_time_s + k * 1e-6,
            array_id=spec.job_id,
            array_index=i,
            array_cap=a.cap,
        )
        for k, i in enumerate(a.indices)
    )


@dataclass(frozen=True, slots=True)
class Run:
    """A job's current (or last) run as a listing shows it, and the time its runtime is counted to."""

    started_s: float | None
    ended_s: float | None
    exit_code: int | None
    now_s: float

    @property
    def runtime_s(self) -> float | None:
        if self.started_s is None:
            return None
        return max(0.0, (self.ended_s if self.ended_s is not None else self.now_s) - self.started_s)


def job_out(
    r: JobRecord, run: Run | None = None, position: int | None = None, expected_start_s: float | None = None
) -> JobOut:
    """The job on the wire; ``run``: its current run's times and exit; ``position``: its place in the queue;
    ``expected_start_s``: its projected start (pending jobs only)."""
    s = r.spec
    return JobOut(
        id=s.job_id,
        state=r.state.value,
        version=r.version,
        tenant=s.tenant,
        pool=s.pool,
        name=s.name,
        priority=s.priority.name.lower(),
        tasks=s.tasks,
        gpus_per_task=s.gpus_per_task,
        milli_gpu=None if s.share is None else s.share.milli_gpu,
        preemptible=s.preemptible,
        submit_time_s=s.submit_time_s,
        deadline_s=s.deadline_s,
        reason_code=r.reason_code,
        reason=r.reason,
        created_s=r.created_s,
        updated_s=r.updated_s,
        idempotency_key=r.idempotency_key,
        attempt=r.attempt,
        time_limit_s=s.time_limit_s,
        array_id=s.array_id or None,
        array_index=s.array_index,
        gpus=s.gpu_milli / MILLI_PER_GPU,
        started_s=None if run is None else run.started_s,
        ended_s=None if run is None else run.ended_s,
        runtime_s=None if run is None else run.runtime_s,
        exit_code=None if run is None else run.exit_code,
        queue_position=position if r.state is JobState.PENDING else None,
        expected_start_s=expected_start_s if r.state is JobState.PENDING else None,
    )


def attempt_out(a: AttemptRecord) -> AttemptOut:
    return AttemptOut(
        attempt=a.attempt,
        state=a.state,
        hosts=list(a.hosts),
        gpu_model=a.gpu_model,
        gpus=a.milli_gpu / MILLI_PER_GPU,
        placed_s=a.placed_s,
        started_s=a.started_s,
        ended_s=a.ended_s,
        exit_code=a.exit_code,
        reason=a.reason,
    )
