"""JobSpec and Allocation <-> JSON-able dicts: pure functions, strict on the way in.

The store keeps a job's spec as one JSON document, so a row written by an older or broken writer must fail
with a ParseError that names the record, never with a KeyError deep in the server. Every field is
type-checked here; the value rules (tasks >= 1, shares <= 1000 milli) stay in ``JobSpec`` itself.
"""

from __future__ import annotations

import json
from typing import Any

from gpupool.domain.elastic import Elastic, ThroughputCurve
from gpupool.domain.errors import JobSpecError, ParseError
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

SPEC_VERSION = 1


def spec_to_dict(spec: JobSpec) -> dict[str, Any]:
    return {
        "v": SPEC_VERSION,
        "job_id": spec.job_id,
        "submit_time_s": spec.submit_time_s,
        "tasks": spec.tasks,
        "gpus_per_task": spec.gpus_per_task,
        "name": spec.name,
        "tenant": spec.tenant,
        "pool": spec.pool,
        "priority": spec.priority.name.lower(),
        "cpu_millicores": spec.cpu_millicores,
        "memory_mib": spec.memory_mib,
        "share": None
        if spec.share is None
        else {"milli_gpu": spec.share.milli_gpu, "memory_mib": spec.share.memory_mib},
        "gpu_models": list(spec.gpu_models),
        "node_selector": [[k, v] for k, v in spec.node_selector],
        "topology": {"scope": spec.topology.scope.value, "mode": spec.topology.mode.value},
        "rail_aligned": spec.rail_aligned,
        "preemptible": spec.preemptible,
        "estimated_runtime_s": spec.estimated_runtime_s,
        "deadline_s": spec.deadline_s,
        "min_tasks": spec.min_tasks,
        "scaling": spec.scaling.value,
        **_lifecycle_to_dict(spec),
    }


def _lifecycle_to_dict(spec: JobSpec) -> dict[str, Any]:
    """Time limit, retries, array and dependencies: written only when set, so a spec without them is stored
    exactly as before they existed (and an older reader, which ignores unknown fields, reads it alike)."""
    out: dict[str, Any] = {}
    if spec.time_limit_s is not None:
        out["time_limit_s"] = spec.time_limit_s
    if spec.signal_lead_s is not None:
        out["signal_lead_s"] = spec.signal_lead_s
    if spec.retry is not None:
        out["retry"] = {"count": spec.retry.count, "on": sorted(c.value for c in spec.retry.on)}
    if spec.array_id:
        out["array"] = {"id": spec.array_id, "index": spec.array_index, "cap": spec.array_cap}
    if spec.after:
        out["after"] = [{"kind": d.kind.value, "jobs": list(d.job_ids)} for d in spec.after]
    if spec.elastic is not None:
        # The points themselves, even for a named curve: the job keeps the curve it was submitted with.
        el = spec.elastic
        out["elastic"] = {
            "min": el.min_gpus,
            "max": el.max_gpus,
            "step": el.step,
            "curve": el.curve.name,
            "points": [[g, r] for g, r in el.curve.points],
        }
    return out


def spec_to_json(spec: JobSpec) -> str:
    # sort_keys: the same spec always gives the same text, so stored documents can be compared byte for byte.
    return json.dumps(spec_to_dict(spec), sort_keys=True, separators=(",", ":"))


class _Reader:
    """Typed field access on one JSON object; every failure names the source and the field."""

    __slots__ = ("data", "source")

    def __init__(self, data: object, source: str, what: str) -> None:
        if not isinstance(data, dict):
            raise ParseError(f"{what} must be a JSON object, got {type(data).__name__}", source=source)
        self.data: dict[str, Any] = data
        self.source = source

    def fail(self, message: str) -> ParseError:
        return ParseError(message, source=self.source)

    def int_(self, key: str, default: int | None = None) -> int:
        v = self.data.get(key, default)
        # bool is an int in Python; a JSON true where a count belongs is a writer's bug, not a 1.
        if not isinstance(v, int) or isinstance(v, bool):
            raise self.fail(f"field {key!r} must be an integer, got {v!r}")
        return v

    def float_(self, key: str, default: float | None = None) -> float:
        v = self.data.get(key, default)
        if not isinstance(v, int | float) or isinstance(v, bool):
            raise self.fail(f"field {key!r} must be a number, got {v!r}")
        return float(v)

    def opt_float(self, key: str) -> float | None:
        return None if self.data.get(key) is None else self.float_(key)

    def str_(self, key: str, default: str | None = None) -> str:
        v = self.data.get(key, default)
        if not isinstance(v, str):
            raise self.fail(f"field {key!r} must be a string, got {v!r}")
        return v

    def bool_(self, key: str, default: bool) -> bool:
        v = self.data.get(key, default)
        if not isinstance(v, bool):
            raise self.fail(f"field {key!r} must be true or false, got {v!r}")
        return v

    def list_(self, key: str) -> list[Any]:
        v = self.data.get(key, [])
        if not isinstance(v, list):
            raise self.fail(f"field {key!r} must be a list, got {v!r}")
        return v


def _priority(r: _Reader) -> PriorityClass:
    name = r.str_("priority", "normal")
    try:
        return PriorityClass[name.upper()]
    except KeyError:
        known = ", ".join(p.name.lower() for p in PriorityClass)
        raise r.fail(f"unknown priority {name!r} (known: {known})") from None


def _scaling(r: _Reader) -> Scaling:
    name = r.str_("scaling", "none")
    try:
        return Scaling(name)
    except ValueError:
        raise r.fail(f"unknown scaling {name!r} (known: {', '.join(x.value for x in Scaling)})") from None


def _topology(data: object, source: str) -> TopologyRequirement:
    if data is None:
        return TopologyRequirement()
    r = _Reader(data, source, "topology")
    try:
        return TopologyRequirement(Scope(r.str_("scope", "any")), TopologyMode(r.str_("mode", "preferred")))
    except ValueError as e:
        raise r.fail(f"bad topology: {e}") from None


def _retry(data: object, source: str) -> RetryPolicy | None:
    if data is None:
        return None
    r = _Reader(data, source, "retry")
    on = r.list_("on")
    try:
        return RetryPolicy(count=r.int_("count"), on=frozenset(RetryOn(c) for c in on))
    except (ValueError, TypeError):
        raise r.fail(f"retry 'on' must list {', '.join(c.value for c in RetryOn)}, got {on!r}") from None


def _after(data: object, source: str) -> tuple[Dependency, ...]:
    if data is None:
        return ()
    if not isinstance(data, list):
        raise ParseError(f"field 'after' must be a list, got {data!r}", source=source)
    out = []
    for raw in data:
        r = _Reader(raw, source, "dependency")
        jobs = r.list_("jobs")
        if not all(isinstance(j, str) for j in jobs):
            raise r.fail(f"a dependency's 'jobs' must be job ids, got {jobs!r}")
        try:
            kind = DependencyKind(r.str_("kind"))
        except ValueError:
            raise r.fail(f"unknown dependency kind {r.data.get('kind')!r}") from None
        out.append(Dependency(kind, tuple(jobs)))
    return tuple(out)


def _array(data: object, source: str) -> dict[str, Any]:
    if data is None:
        return {}
    r = _Reader(data, source, "array")
    index = r.data.get("index")
    return {
        "array_id": r.str_("id"),
        "array_index": None if index is None else r.int_("index"),
        "array_cap": r.int_("cap", 0),
    }


def _elastic(data: object, source: str) -> Elastic | None:
    if data is None:
        return None
    r = _Reader(data, source, "elastic")
    points: list[tuple[int, float]] = []
    for p in r.list_("points"):
        ok = isinstance(p, list) and len(p) == 2 and isinstance(p[0], int) and isinstance(p[1], int | float)
        if not ok or isinstance(p[0], bool):
            raise r.fail(f"elastic points must be [GPUs, throughput] pairs, got {p!r}")
        points.append((p[0], float(p[1])))
    curve = ThroughputCurve(tuple(points), r.str_("curve", ""))
    return Elastic(r.int_("min"), r.int_("max"), curve, r.int_("step", 1))


def _share(data: object, source: str) -> GpuShare | None:
    if data is None:
        return None
    r = _Reader(data, source, "share")
    return GpuShare(milli_gpu=r.int_("milli_gpu", 0), memory_mib=r.int_("memory_mib", 0))


def spec_from_dict(data: object, source: str = "<spec>") -> JobSpec:
    """Build a JobSpec from ``spec_to_dict``'s output; ParseError (with ``source``) for anything malformed."""
    r = _Reader(data, source, "job spec")
    version = r.int_("v", SPEC_VERSION)
    if version != SPEC_VERSION:
        raise r.fail(f"job spec version {version} is not supported (this build reads {SPEC_VERSION})")
    models = r.list_("gpu_models")
    if not all(isinstance(m, str) for m in models):
        raise r.fail("field 'gpu_models' must be a list of strings")
    selector: list[tuple[str, str]] = []
    for pair in r.list_("node_selector"):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise r.fail(f"node_selector entries must be [key, value] string pairs, got {pair!r}")
        selector.append((pair[0], pair[1]))
    try:
        return JobSpec(
            job_id=r.str_("job_id"),
            submit_time_s=r.float_("submit_time_s", 0.0),
            tasks=r.int_("tasks", 1),
            gpus_per_task=r.int_("gpus_per_task", 1),
            name=r.str_("name", ""),
            tenant=r.str_("tenant", "default"),
            pool=r.str_("pool", "default"),
            priority=_priority(r),
            cpu_millicores=r.int_("cpu_millicores", 0),
            memory_mib=r.int_("memory_mib", 0),
            share=_share(r.data.get("share"), source),
            gpu_models=tuple(models),
            node_selector=tuple(selector),
            topology=_topology(r.data.get("topology"), source),
            rail_aligned=r.bool_("rail_aligned", False),
            preemptible=r.bool_("preemptible", False),
            estimated_runtime_s=r.opt_float("estimated_runtime_s"),
            deadline_s=r.opt_float("deadline_s"),
            min_tasks=None if r.data.get("min_tasks") is None else r.int_("min_tasks"),
            scaling=_scaling(r),
            time_limit_s=r.opt_float("time_limit_s"),
            signal_lead_s=r.opt_float("signal_lead_s"),
            retry=_retry(r.data.get("retry"), source),
            after=_after(r.data.get("after"), source),
            elastic=_elastic(r.data.get("elastic"), source),
            **_array(r.data.get("array"), source),
        )
    except JobSpecError as e:
        # The spec's own rules, reported against the document it came from.
        raise ParseError(e.reason, source=source) from None


def spec_from_json(text: str, source: str = "<spec>") -> JobSpec:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(f"not valid JSON: {e.msg}", source=source, line=e.lineno) from None
    return spec_from_dict(data, source)


def allocation_to_dict(allocation: Allocation) -> dict[str, Any]:
    return {
        "job_id": allocation.job_id,
        "tasks": [
            {
                "host": t.host,
                "gpus": list(t.gpus),
                "milli_gpu": t.milli_gpu,
                "gpu_memory_mib": t.gpu_memory_mib,
                "cpu_millicores": t.cpu_millicores,
                "memory_mib": t.memory_mib,
            }
            for t in allocation.tasks
        ],
    }


def allocation_from_dict(data: object, source: str = "<allocation>") -> Allocation:
    r = _Reader(data, source, "allocation")
    tasks: list[TaskAllocation] = []
    for raw in r.list_("tasks"):
        t = _Reader(raw, source, "task allocation")
        gpus = t.list_("gpus")
        if not all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in gpus):
            raise t.fail(f"field 'gpus' must be a list of GPU indices, got {gpus!r}")
        tasks.append(
            TaskAllocation(
                host=t.str_("host"),
                gpus=tuple(gpus),
                milli_gpu=t.int_("milli_gpu", 1000),
                gpu_memory_mib=t.int_("gpu_memory_mib", 0),
                cpu_millicores=t.int_("cpu_millicores", 0),
                memory_mib=t.int_("memory_mib", 0),
            )
        )
    return Allocation(job_id=r.str_("job_id"), tasks=tuple(tasks))
