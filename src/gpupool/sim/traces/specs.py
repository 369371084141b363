"""Trace records to scheduler job specs: the one mapping from what a trace measured to what a user submits.

A trace job becomes a gang whose tasks each fit one host of the target cluster: a job that fits one host stays
one task (its trace duration was measured at its best placement, which is inside one host); a bigger one is
split into equal tasks of the largest size that divides its GPU count and fits a host. Fractional jobs become
one share of one GPU each. GPU-free jobs (CPU-only pods) have no JobSpec form yet: ``to_job_spec`` returns
None for them and the caller decides.
"""

from __future__ import annotations

from gpupool.domain.jobs import GpuShare, JobSpec, PriorityClass
from gpupool.sim.traces.records import MILLI_PER_GPU, TraceJob

# Inference services are latency-bound; batch work yields first. Training keeps the default class.
PRIORITY_BY_KIND = {"inference": PriorityClass.HIGH, "training": PriorityClass.NORMAL, "batch": PriorityClass.BATCH}


def task_split(gpus: int, max_per_task: int) -> tuple[int, int]:
    """(tasks, GPUs per task) for ``gpus`` whole GPUs on hosts of at most ``max_per_task`` GPUs."""
    if gpus <= max_per_task:
        return 1, gpus
    per = next(d for d in range(max_per_task, 0, -1) if gpus % d == 0)
    return gpus // per, per


def to_job_spec(
    job: TraceJob,
    *,
    max_gpus_per_task: int,
    know_durations: bool = False,
    submit_s: float | None = None,
) -> JobSpec | None:
    """The JobSpec for ``job`` on hosts of ``max_gpus_per_task`` GPUs, or None for a job without GPUs.

    ``know_durations`` hands the trace duration to the scheduler as the estimate (an oracle; off by default,
    because users' estimates are poor; an elastic job declares its work, so its duration is always its estimate).
    ``gpu_model`` alternatives ('|'-separated) become ``gpu_models``.
    """
    if job.gpus == 0 or job.gpu_milli == 0:
        return None
    models = tuple(m for m in (job.gpu_model or "").split("|") if m)
    estimate = job.duration_s if know_durations and job.duration_s > 0 else None
    share: GpuShare | None = None
    if job.gpu_milli < MILLI_PER_GPU:
        share = GpuShare(milli_gpu=job.gpu_milli, memory_mib=job.gpu_memory_mib or 0)
        tasks, per = job.tasks, 1
    elif job.elastic is not None and job.duration_s > 0:
        # Its size changes from run to run (the scheduler's plan decides it), one rank per GPU as elastic
        # data-parallel training runs; its work is declared: the estimate at the asked size is what the job
        # says, as ElasticFlow's users give their iterations.
        tasks, per = job.gpus, 1
        estimate = job.duration_s
    elif job.tasks > 1 and job.gpus_per_task <= max_gpus_per_task:
        tasks, per = job.tasks, job.gpus_per_task
    else:
        tasks, per = task_split(job.gpus, max_gpus_per_task)
    return JobSpec(
        job.job_id,
        submit_time_s=job.submit_s if submit_s is None else submit_s,
        tasks=tasks,
        gpus_per_task=per,
        name=job.model_name or "",
        tenant=job.tenant,
        priority=PRIORITY_BY_KIND.get(job.kind, PriorityClass.NORMAL),
        cpu_millicores=job.cpu_milli // tasks,
        memory_mib=job.memory_mib // tasks,
        share=share,
        gpu_models=models,
        estimated_runtime_s=estimate,
        deadline_s=job.deadline_s,
        elastic=job.elastic if job.duration_s > 0 else None,
    )
