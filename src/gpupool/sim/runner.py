"""The simulator's entry points that the CLI and benchmarks share: a trace and a cluster in, a run out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpupool.domain.calendar import Calendar
from gpupool.domain.errors import InputError
from gpupool.domain.jobs import Scope, TopologyMode, TopologyRequirement
from gpupool.fabric import jsonio
from gpupool.fabric.fabric import Fabric
from gpupool.fabric.merge import require_gpus
from gpupool.fabric.model import Domain
from gpupool.scheduler.settings import SchedulerSettings
from gpupool.sim.engine import Engine, Progress, SimResult
from gpupool.sim.fabrics import nodes_fabric, uniform_fabric
from gpupool.sim.failures import FailureEvent
from gpupool.sim.metrics import compute_metrics
from gpupool.sim.report import write_run
from gpupool.sim.traces.records import Trace
from gpupool.sim.traces.specs import to_job_spec
from gpupool.sim.world import SimJob, WorldConfig, world_settings


@dataclass(frozen=True, slots=True)
class RunOutcome:
    result: SimResult
    metrics: dict[str, Any]
    skipped_jobs: int  # jobs without GPUs, which a JobSpec cannot express yet


def cluster_fabric(trace: Trace, fabric_path: Path | None, gpus: int | None, gpus_per_host: int) -> Fabric:
    """``--fabric FILE``, or ``--gpus N --gpus-per-host G``, or the trace's own node list (openb)."""
    if fabric_path is not None and gpus is not None:
        raise InputError("give either --fabric or --gpus, not both", source="cluster options")
    if fabric_path is not None:
        fabric = jsonio.load(fabric_path)
        require_gpus(fabric, str(fabric_path), ["the simulator"])
        return fabric
    if gpus is not None:
        return uniform_fabric(gpus, gpus_per_host)
    if trace.nodes:
        return nodes_fabric(trace.nodes, trace.name)
    raise InputError("this trace lists no machines: give --fabric FILE or --gpus N", source=trace.name)


def sim_jobs(
    trace: Trace,
    fabric: Fabric,
    *,
    know_durations: bool = False,
    preemptible: bool = False,
    leaf_mode: TopologyMode | None = None,
    topology: TopologyMode | None = None,
) -> tuple[list[SimJob], int]:
    """The trace's jobs as SimJobs for this fabric, and how many were left out for having no GPUs.

    ``leaf_mode``: every multi-host job that fits under one leaf asks for one leaf, required or preferred
    (what a Slurm user says with ``--switches=1``); None leaves the topology to the placer. ``topology``:
    every job's topology mode (``gpupool sim run --topology``), its scope kept; None keeps the jobs' own."""
    per_host = max((h.gpu_count for h in fabric.hosts), default=1)
    leaf_gpus = _largest_leaf_gpus(fabric)
    out: list[SimJob] = []
    skipped = 0
    for tj in trace.jobs:
        spec = to_job_spec(tj, max_gpus_per_task=per_host, know_durations=know_durations)
        if spec is None:
            skipped += 1
            continue
        if preemptible and tj.kind != "inference":
            spec = replace(spec, preemptible=True)
        if leaf_mode is not None and spec.tasks > 1 and spec.total_gpus <= leaf_gpus:
            spec = replace(spec, topology=TopologyRequirement(Scope.LEAF, leaf_mode))
        if topology is not None and spec.topology.mode is not topology:
            spec = replace(spec, topology=replace(spec.topology, mode=topology))
        out.append(SimJob.of(spec, tj))
    return out, skipped


def _largest_leaf_gpus(fabric: Fabric) -> int:
    leaf_of = fabric.domain_ids(Domain.LEAF)
    per_leaf: dict[int, int] = {}
    for h, host in enumerate(fabric.hosts):
        per_leaf[int(leaf_of[h])] = per_leaf.get(int(leaf_of[h]), 0) + host.gpu_count
    return max(per_leaf.values(), default=0)


def simulate(
    trace: Trace,
    fabric: Fabric,
    settings: SchedulerSettings | None = None,
    *,
    seed: int = 0,
    world: WorldConfig | None = None,
    know_durations: bool = False,
    preemptible: bool = False,
    calendar: Calendar | None = None,
    demand_headroom_gpus: int | None = None,
    progress: Progress | None = None,
    leaf_mode: TopologyMode | None = None,
    failures: Sequence[FailureEvent] = (),
    topology: TopologyMode | None = None,
) -> RunOutcome:
    """One run of ``settings`` (the ``scheduler`` section; the defaults when None). ``preemptible``: every
    job but inference services is submitted ``preemptible`` (a trace does not say; the server's users do).
    ``seed``: the world's draws."""
    world = world or WorldConfig()
    jobs, skipped = sim_jobs(
        trace, fabric, know_durations=know_durations, preemptible=preemptible, leaf_mode=leaf_mode, topology=topology
    )
    result = Engine(
        fabric,
        jobs,
        settings,
        world,
        seed=seed,
        progress=progress,
        calendar=calendar,
        demand_headroom_gpus=demand_headroom_gpus,
        failure_trace=failures,
    ).run()
    metrics = compute_metrics(result, inference_slo_wait_s=world.inference_slo_wait_s)
    metrics["skipped_jobs_without_gpus"] = skipped
    metrics["bad_rows_skipped"] = len(trace.bad_rows)
    metrics["world"] = world_settings(world)  # what the run assumed of the world, beside what it measured
    return RunOutcome(result, metrics, skipped)


def write_outcome(outcome: RunOutcome, out: Path, settings: dict[str, Any]) -> None:
    """The run's folder; report.md's settings list the world's too (``world.launch_latency_s``, ...)."""
    world = {f"world.{k}": v for k, v in outcome.metrics.get("world", {}).items()}
    title = f"gpupool sim run: {settings.get('trace', '')}"
    write_run(outcome.result, outcome.metrics, out, title, {**settings, **world})


def compare_rows(outcomes: Sequence[tuple[str, str, RunOutcome]]) -> list[dict[str, Any]]:
    keys = (
        "avg_jct_s",
        "p99_jct_s",
        "avg_queue_s",
        "makespan_s",
        "gpu_utilization",
        "deadline_met_ratio",
        "preemptions",
    )
    return [
        {"policy": p, "placement": q, **{k: o.metrics.get(k) for k in keys}, "lb_avg_jct_s": o.metrics["lb_avg_jct_s"]}
        for p, q, o in outcomes
    ]
