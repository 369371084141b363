"""``gpupool sim``: replay a trace through the production scheduler (run, compare) or pack pods the FGD way."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from gpupool.domain.calendar import parse_calendar
from gpupool.domain.errors import InputError
from gpupool.scheduler import PLACERS, POLICIES, BackfillMode
from gpupool.sim.failures import FailureEvent, parse_failures
from gpupool.sim.pack import pack as run_pack
from gpupool.sim.report import write_allocation_plot
from gpupool.sim.runner import RunOutcome, cluster_fabric, compare_rows, simulate, write_outcome
from gpupool.sim.sharing import SharingOptions
from gpupool.sim.traces import load_trace
from gpupool.sim.traces.openb import load_openb

FORMATS = ("itp", "elasticflow", "philly", "chronus", "openb", "dlrm", "synthetic", "tiresias")
LONG_RUN_JOBS = 5000  # show a progress bar from this many jobs on
GITTINS_MAX_LOST_S = 60.0  # gittins with --preemption: preempt a victim within a minute of its checkpoint

app = typer.Typer(help="Simulate the scheduler on real or synthetic GPU-cluster traces.", no_args_is_help=True)
_err = Console(stderr=True, highlight=False, soft_wrap=True)

TraceOpt = Annotated[Path, typer.Option("--trace", help="Trace file.")]
FormatOpt = Annotated[str, typer.Option("--format", help=f"Trace format: {'|'.join(FORMATS)}.")]
FabricOpt = Annotated[Path | None, typer.Option("--fabric", help="Fabric JSON (gpupool fabric generate/import).")]
GpusOpt = Annotated[int | None, typer.Option("--gpus", help="Build a leaf/spine cluster of N GPUs instead.")]
PerHostOpt = Annotated[int, typer.Option("--gpus-per-host", help="GPUs per host with --gpus.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of every random draw.")]
OutOpt = Annotated[Path, typer.Option("--out", help="Output folder.")]
SkipOpt = Annotated[bool, typer.Option("--skip-bad-rows", help="Count and report bad rows instead of stopping.")]
PreemptOpt = Annotated[
    bool,
    typer.Option(
        "--preemption",
        help="Let the scheduler preempt (preemptible jobs); with --policy gittins, by its index at checkpoints.",
    ),
]
KnowOpt = Annotated[bool, typer.Option("--know-durations", help="Give the scheduler the trace durations.")]
LimitOpt = Annotated[int | None, typer.Option("--limit", help="Read only the first N good rows.")]
BackfillOpt = Annotated[str, typer.Option("--backfill", help="Backfill: none|easy|conservative.")]
CalendarOpt = Annotated[Path | None, typer.Option("--calendar", help="Pool calendar TOML (pools lend idle hosts).")]
FailuresOpt = Annotated[
    Path | None, typer.Option("--failures", help="Failure trace: time_s,kind(gpu|host|leaf),host[,gpu] per line.")
]
ByServiceOpt = Annotated[
    bool,
    typer.Option(
        "--preemption-by-service",
        help="Tiresias: a job ranked before a running one (LAS queue; Gittins index with --policy gittins) "
        "preempts it (implies --preemption).",
    ),
]
MaxLostOpt = Annotated[
    float | None,
    typer.Option("--max-lost-s", help="With --preemption-by-service: spare jobs with more work since a checkpoint."),
]
ThresholdsOpt = Annotated[
    str | None,
    typer.Option(
        "--las-thresholds",
        help="LAS queue limits in GPU-seconds, comma-separated (e.g. 14000); the scheduler's default if unset.",
    ),
]
DeadlineOpt = Annotated[
    bool, typer.Option("--deadline-admission", help="Refuse deadline jobs that cannot finish in time.")
]


def _sharing(
    preemption: bool,
    backfill: str,
    calendar: Path | None,
    deadline_admission: bool,
    by_service: bool = False,
    max_lost_s: float | None = None,
    policy: str = "",
) -> SharingOptions:
    """The run's sharing options. ``gittins`` is a preemptive policy: with ``--preemption`` it preempts by its
    index (``--preemption-by-service`` implied) and, unless ``--max-lost-s`` says otherwise, only victims that
    checkpointed in the last 60 s, which the engine checks at every checkpoint."""
    if policy in POLICIES and POLICIES[policy].preempts_by_service and preemption and not by_service:
        by_service = True
        max_lost_s = GITTINS_MAX_LOST_S if max_lost_s is None else max_lost_s
    modes = {m.value: m for m in BackfillMode}
    if backfill not in modes:
        raise InputError(f"unknown backfill {backfill!r}; known: {', '.join(modes)}", source="--backfill")
    cal = None
    if calendar is not None:
        try:
            text = calendar.read_text()
        except OSError as e:
            raise InputError(f"cannot read the calendar: {e.strerror}", source=str(calendar)) from None
        cal = parse_calendar(text, str(calendar))
    if max_lost_s is not None and (max_lost_s < 0 or not by_service):
        raise InputError("--max-lost-s needs --preemption-by-service and a value >= 0", source="--max-lost-s")
    return SharingOptions(
        preemption=preemption or by_service,
        backfill=modes[backfill],
        calendar=cal,
        deadline_admission=deadline_admission,
        by_service=by_service,
        max_lost_s=max_lost_s,
    )


def _thresholds(text: str | None) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        got = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(
            f"--las-thresholds wants numbers separated by commas, got {text!r}", source="--las-thresholds"
        ) from None
    if any(not 0 < t < float("inf") for t in got) or list(got) != sorted(set(got)):
        raise InputError("--las-thresholds must be positive and increasing", source="--las-thresholds")
    return got


def _check_names(policies: list[str], placements: list[str]) -> None:
    for p in policies:
        if p not in POLICIES:
            raise InputError(f"unknown policy {p!r}; known: {', '.join(sorted(POLICIES))}", source="--policy")
    for q in placements:
        if q not in PLACERS:
            raise InputError(f"unknown placement {q!r}; known: {', '.join(sorted(PLACERS))}", source="--placement")


def _failures(path: Path | None, fabric: Any) -> tuple[FailureEvent, ...]:
    if path is None:
        return ()
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(f"cannot read the failure trace: {e.strerror}", source=str(path)) from None
    return parse_failures(text, str(path), fabric)


def _simulate(
    trace_obj: Any,
    fabric: Any,
    policy: str,
    placement: str,
    sharing: SharingOptions,
    seed: int,
    know: bool,
    failures: tuple[FailureEvent, ...] = (),
    thresholds: tuple[float, ...] | None = None,
) -> RunOutcome:
    def run(progress: Callable[[int, int], None] | None = None) -> RunOutcome:
        return simulate(
            trace_obj,
            fabric,
            policy=policy,
            placement=placement,
            sharing=sharing,
            seed=seed,
            know_durations=know,
            failures=failures,
            las_thresholds_gpu_s=thresholds,
            progress=progress,
        )

    n = len(trace_obj.jobs)
    if n < LONG_RUN_JOBS:
        return run()
    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=_err, transient=True) as bar:
        task = bar.add_task(f"{policy}/{placement}", total=n)
        return run(lambda done, total: bar.update(task, completed=done, total=total))


@app.command("run")
def run_cmd(
    trace: TraceOpt,
    format: FormatOpt,
    policy: Annotated[str, typer.Option("--policy", help="Queue policy.")],
    placement: Annotated[str, typer.Option("--placement", help="Placer.")],
    out: OutOpt,
    fabric: FabricOpt = None,
    gpus: GpusOpt = None,
    gpus_per_host: PerHostOpt = 8,
    preemption: PreemptOpt = False,
    seed: SeedOpt = 0,
    skip_bad_rows: SkipOpt = False,
    know_durations: KnowOpt = False,
    limit: LimitOpt = None,
    backfill: BackfillOpt = "none",
    calendar: CalendarOpt = None,
    deadline_admission: DeadlineOpt = False,
    failures: FailuresOpt = None,
    preemption_by_service: ByServiceOpt = False,
    max_lost_s: MaxLostOpt = None,
    las_thresholds: ThresholdsOpt = None,
) -> None:
    """Replay a trace: arrivals, runs, departures; writes metrics.json, jobs.csv, report.md and plots."""
    _check_names([policy], [placement])
    sharing = _sharing(preemption, backfill, calendar, deadline_admission, preemption_by_service, max_lost_s, policy)
    t = load_trace(trace, format, skip_bad_rows=skip_bad_rows, limit=limit)
    fab = cluster_fabric(t, fabric, gpus, gpus_per_host)
    limits = _thresholds(las_thresholds)
    outcome = _simulate(t, fab, policy, placement, sharing, seed, know_durations, _failures(failures, fab), limits)
    settings = {"trace": str(trace), "format": format, "fabric": fab.name, "gpus": fab.gpu_count, "policy": policy,
                "placement": placement, "preemption": preemption, "backfill": backfill, "calendar": str(calendar or ""),
                "deadline_admission": deadline_admission, "seed": seed, "know_durations": know_durations,
                "preemption_by_service": sharing.by_service, "max_lost_s": sharing.max_lost_s,
                "las_thresholds_gpu_s": list(limits) if limits is not None else None}  # fmt: skip
    write_outcome(outcome, out, settings)
    if t.bad_rows:
        _err.print(
            f"skipped {len(t.bad_rows)} bad rows (first: {t.bad_rows[0].source}:{t.bad_rows[0].line}: {t.bad_rows[0].reason})"
        )
    m = outcome.metrics
    _err.print(
        f"{m['finished']}/{m['jobs']} jobs finished; avg JCT {m['avg_jct_s']} s (bound {m['lb_avg_jct_s']} s); "
        f"utilisation {m['gpu_utilization']}; wall {m['wall_s']} s; wrote {out}"
    )


@app.command("compare")
def compare_cmd(
    trace: TraceOpt,
    format: FormatOpt,
    policies: Annotated[str, typer.Option("--policies", help="Comma-separated queue policies.")],
    placements: Annotated[str, typer.Option("--placements", help="Comma-separated placers.")],
    out: OutOpt,
    fabric: FabricOpt = None,
    gpus: GpusOpt = None,
    gpus_per_host: PerHostOpt = 8,
    preemption: PreemptOpt = False,
    seed: SeedOpt = 0,
    skip_bad_rows: SkipOpt = False,
    know_durations: KnowOpt = False,
    limit: LimitOpt = None,
    backfill: BackfillOpt = "none",
    calendar: CalendarOpt = None,
    deadline_admission: DeadlineOpt = False,
    failures: FailuresOpt = None,
    preemption_by_service: ByServiceOpt = False,
    max_lost_s: MaxLostOpt = None,
    las_thresholds: ThresholdsOpt = None,
) -> None:
    """Run every policy x placement on one trace and cluster; one sub-folder per pair and compare.json."""
    pols = [p.strip() for p in policies.split(",") if p.strip()]
    places = [q.strip() for q in placements.split(",") if q.strip()]
    if not pols or not places:
        raise InputError("--policies and --placements need at least one name each", source="compare")
    _check_names(pols, places)
    sharing = _sharing(preemption, backfill, calendar, deadline_admission, preemption_by_service, max_lost_s)
    t = load_trace(trace, format, skip_bad_rows=skip_bad_rows, limit=limit)
    fab = cluster_fabric(t, fabric, gpus, gpus_per_host)
    fails = _failures(failures, fab)
    limits = _thresholds(las_thresholds)
    outcomes = []
    for p in pols:
        for q in places:
            o = _simulate(t, fab, p, q, sharing, seed, know_durations, fails, limits)
            settings = {
                "trace": str(trace),
                "format": format,
                "fabric": fab.name,
                "policy": p,
                "placement": q,
                "seed": seed,
            }
            write_outcome(o, out / f"{p}-{q}", settings)
            outcomes.append((p, q, o))
    rows = compare_rows(outcomes)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps(rows, indent=2) + "\n")
    table = Table("policy", "placement", "avg JCT (s)", "p99 JCT (s)", "avg queue (s)", "util", "bound (s)")
    for r in rows:
        table.add_row(r["policy"], r["placement"], str(r["avg_jct_s"]), str(r["p99_jct_s"]), str(r["avg_queue_s"]),
                      str(r["gpu_utilization"]), str(r["lb_avg_jct_s"]))  # fmt: skip
    Console(highlight=False).print(table)


@app.command("pack")
def pack_cmd(
    nodes: Annotated[Path, typer.Option("--nodes", help="openb node list CSV.")],
    pods: Annotated[Path, typer.Option("--pods", help="openb pod list CSV.")],
    placement: Annotated[str, typer.Option("--placement", help="Placer.")],
    tune: Annotated[float, typer.Option("--tune", help="Arrived demand at the end, times capacity.")] = 1.3,
    seed: SeedOpt = 42,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    skip_bad_rows: SkipOpt = False,
    out: Annotated[Path | None, typer.Option("--out", help="Also write pack.json and allocation.png here.")] = None,
) -> None:
    """The FGD packing protocol: resample to tune x capacity, shuffle, place one by one, no departures."""
    _check_names([], [placement])
    if not 0 < tune <= 3:
        raise InputError(f"--tune must be in (0, 3], got {tune}", source="--tune")
    t = load_openb(pods, skip_bad_rows=skip_bad_rows, nodes=nodes)
    if not t.jobs:
        raise InputError("the pod list has no pods", source=str(pods))
    result = run_pack(t.nodes, t.jobs, placement=placement, tune=tune, seed=seed)
    doc = result.as_json()
    doc["bad_rows_skipped"] = len(t.bad_rows)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "pack.json").write_text(json.dumps(doc, indent=2) + "\n")
        write_allocation_plot(sorted(result.alloc_ratio_at.items()), out / "allocation.png")
    if as_json:
        typer.echo(json.dumps(doc))
    else:
        ratio = result.alloc_ratio_at
        top = max(ratio)
        typer.echo(f"{result.total_gpus} GPUs; allocation at 100%: {ratio.get(100)}%, at {top}%: {ratio[top]}%; "
                   f"unallocated GPUs: {result.unallocated_gpus:.1f}")  # fmt: skip
