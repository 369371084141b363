"""``gpupool sim``: replay a trace through the production scheduler (run, compare), pack pods the FGD way, or
check a server's journal against the scheduler (replay)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from gpupool.cli.paths import output_folder
from gpupool.client.textfile import read_text
from gpupool.domain.calendar import Calendar, parse_calendar
from gpupool.domain.errors import InputError
from gpupool.domain.jobs import TopologyMode
from gpupool.fabric.generators import MAX_GPUS_PER_HOST
from gpupool.scheduler import PLACERS, POLICIES, BackfillMode
from gpupool.scheduler.settings import SchedulerSettings, problems, sharing_policy
from gpupool.server.settings import load_settings, plain
from gpupool.sim.failures import FailureEvent, parse_failures
from gpupool.sim.pack import pack as run_pack
from gpupool.sim.replay import replay_file, report_json
from gpupool.sim.report import write_allocation_plot
from gpupool.sim.runner import RunOutcome, cluster_fabric, compare_rows, simulate, write_outcome
from gpupool.sim.traces import load_trace
from gpupool.sim.traces.openb import load_openb
from gpupool.sim.world import EXIT_LATENCY_S, LAUNCH_LATENCY_S, WorldConfig

FORMATS = ("itp", "elasticflow", "philly", "chronus", "openb", "dlrm", "synthetic", "tiresias")
LONG_RUN_JOBS = 5000  # show a progress bar from this many jobs on

app = typer.Typer(help="Simulate the scheduler on real or synthetic GPU-cluster traces.", no_args_is_help=True)
_err = Console(stderr=True, highlight=False, soft_wrap=True)

TraceOpt = Annotated[Path, typer.Option("--trace", help="Trace file.")]
FormatOpt = Annotated[str, typer.Option("--format", help=f"Trace format: {'|'.join(FORMATS)}.")]
FabricOpt = Annotated[Path | None, typer.Option("--fabric", help="Fabric JSON (gpupool fabric generate/import).")]
GpusOpt = Annotated[int | None, typer.Option("--gpus", min=1, help="Build a leaf/spine cluster of N GPUs instead.")]
PerHostOpt = Annotated[
    int, typer.Option("--gpus-per-host", min=1, max=MAX_GPUS_PER_HOST, help="GPUs per host with --gpus.")
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of every random draw.")]
RunSeedOpt = Annotated[
    int | None, typer.Option("--seed", help="Seed of every random draw (default: the settings' seed).")
]
OutOpt = Annotated[Path, typer.Option("--out", help="Output folder.", callback=lambda p: output_folder(p, "--out"))]
SkipOpt = Annotated[bool, typer.Option("--skip-bad-rows", help="Count and report bad rows instead of stopping.")]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="Settings file (the server's): its scheduler section configures the run; the flags below override it.",
    ),
]
PolicyOpt = Annotated[str | None, typer.Option("--policy", help="Queue policy (default: the settings').")]
PlacementOpt = Annotated[str | None, typer.Option("--placement", help="Placer (default: the settings').")]
PreemptOpt = Annotated[
    bool | None,
    typer.Option(
        "--preemption/--no-preemption",
        help="Submit the trace's jobs (not inference services) preemptible and let the scheduler preempt; "
        "with a preemptive policy (gittins), by its rank at checkpoints. --no-preemption turns preemption off.",
        show_default=False,
    ),
]
KnowOpt = Annotated[bool, typer.Option("--know-durations", help="Give the scheduler the trace durations.")]
LimitOpt = Annotated[int | None, typer.Option("--limit", min=1, help="Read only the first N good rows.")]
BackfillOpt = Annotated[str | None, typer.Option("--backfill", help="Backfill: none|easy|conservative.")]
CalendarOpt = Annotated[Path | None, typer.Option("--calendar", help="Pool calendar TOML (pools lend idle hosts).")]
FailuresOpt = Annotated[
    Path | None, typer.Option("--failures", help="Failure trace: time_s,kind(gpu|host|leaf),host[,gpu] per line.")
]
ByServiceOpt = Annotated[
    bool | None,
    typer.Option(
        "--preemption-by-service/--no-preemption-by-service",
        help="Tiresias: a job ranked before a running one (LAS queue; Gittins index with --policy gittins) "
        "preempts it (implies --preemption).",
        show_default=False,
    ),
]
MaxLostOpt = Annotated[
    float | None,
    typer.Option(
        "--max-lost-s",
        min=0.0,
        max=1e9,
        help="With --preemption-by-service: spare jobs with more work since a checkpoint.",
    ),
]
ThresholdsOpt = Annotated[
    str | None,
    typer.Option(
        "--las-thresholds",
        help="LAS queue limits in GPU-seconds, comma-separated (e.g. 14000); the scheduler's default if unset.",
    ),
]
DeadlineOpt = Annotated[
    bool | None,
    typer.Option(
        "--deadline-admission/--no-deadline-admission",
        help="Refuse deadline jobs that cannot finish in time.",
        show_default=False,
    ),
]
LaunchLatencyOpt = Annotated[
    float | None,
    typer.Option(
        "--launch-latency",
        min=0.0,
        max=86400.0,
        help=f"Seconds from placement to the job's processes running (default {LAUNCH_LATENCY_S:g}: what the server "
        "measures, benchmarks/launch_latency.py); add a container's pull or a framework's start-up here.",
    ),
]
ExitLatencyOpt = Annotated[
    float | None,
    typer.Option(
        "--exit-latency",
        min=0.0,
        max=86400.0,
        help=f"Seconds a finished job holds its GPUs after its work is done (default {EXIT_LATENCY_S:g}: measured).",
    ),
]

TopologyOpt = Annotated[
    str | None,
    typer.Option(
        "--topology",
        help="Every job's topology mode: required (wait for the smallest domain that holds it), preferred (wait "
        "only while one is expected to have room within --topology-wait-s) or any (never wait); default: "
        "the trace's own, preferred.",
        show_default=False,
    ),
]
TopologyWaitOpt = Annotated[
    float | None,
    typer.Option(
        "--topology-wait-s",
        min=0.0,
        max=1e9,
        help="How soon a domain must be expected to have room for a preferred gang to wait for it (default: the "
        "settings' topology_wait_s).",
        show_default=False,
    ),
]


def _topology(mode: str | None) -> TopologyMode | None:
    if mode is None:
        return None
    modes = {m.value: m for m in TopologyMode}
    if mode not in modes:
        raise InputError(f"unknown topology mode {mode!r}; known: {', '.join(modes)}", source="--topology")
    return modes[mode]


def _world(launch_latency: float | None, exit_latency: float | None) -> WorldConfig:
    world = WorldConfig()
    for flag, value in (("--launch-latency", launch_latency), ("--exit-latency", exit_latency)):
        if value is not None and not math.isfinite(value):
            raise InputError(f"must be a number of seconds, not {value}", source=flag)
    if launch_latency is not None:
        world = dataclasses.replace(world, launch_latency_s=launch_latency)
    if exit_latency is not None:
        world = dataclasses.replace(world, exit_latency_s=exit_latency)
    return world


# Flags that override a setting of the scheduler section, and the setting each one sets.
_FLAGS = {
    "policy": "--policy",
    "placer": "--placement",
    "preemption": "--preemption",
    "preemption_by_service": "--preemption-by-service",
    "max_lost_s": "--max-lost-s",
    "las_thresholds_gpu_s": "--las-thresholds",
    "backfill": "--backfill",
    "deadline_admission": "--deadline-admission",
    "seed": "--seed",
    "topology_wait_s": "--topology-wait-s",
}


def _settings(config: Path | None, flags: dict[str, Any]) -> SchedulerSettings:
    """The ``scheduler`` section of ``config`` (the server's settings file; the defaults without one), with
    every flag that was given (not None) in its place. A bad value names its flag, or its setting and line."""
    base = load_settings(config, env={}).scheduler if config is not None else SchedulerSettings()
    given = {k: v for k, v in flags.items() if v is not None}
    if "backfill" in given:
        modes = {m.value: m for m in BackfillMode}
        if given["backfill"] not in modes:
            raise InputError(f"unknown backfill {given['backfill']!r}; known: {', '.join(modes)}", source="--backfill")
        given["backfill"] = modes[given["backfill"]]
    if "las_thresholds_gpu_s" in given:
        given["las_thresholds_gpu_s"] = _thresholds(given["las_thresholds_gpu_s"])
    if given.get("preemption_by_service"):
        given["preemption"] = True  # by service implies preemption
    settings = dataclasses.replace(base, **given)
    for name, problem in problems(settings):
        raise InputError(f"{name}: {problem}", source=_FLAGS.get(name, "") if name in given else str(config or ""))
    return settings


def _calendar(calendar: Path | None) -> Calendar | None:
    return None if calendar is None else parse_calendar(read_text(calendar, "calendar"), str(calendar))


def _thresholds(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(
            f"--las-thresholds wants numbers separated by commas, got {text!r}", source="--las-thresholds"
        ) from None


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
    return parse_failures(read_text(path, "failure trace"), str(path), fabric)


def _simulate(
    trace_obj: Any,
    fabric: Any,
    settings: SchedulerSettings,
    preemptible: bool,
    calendar: Calendar | None,
    know: bool,
    failures: tuple[FailureEvent, ...] = (),
    world: WorldConfig | None = None,
    topology: TopologyMode | None = None,
) -> RunOutcome:
    def run(progress: Callable[[int, int], None] | None = None) -> RunOutcome:
        return simulate(
            trace_obj,
            fabric,
            settings,
            seed=settings.seed,
            world=world,
            know_durations=know,
            preemptible=preemptible,
            calendar=calendar,
            failures=failures,
            progress=progress,
            topology=topology,
        )

    n = len(trace_obj.jobs)
    if n < LONG_RUN_JOBS:
        return run()
    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=_err, transient=True) as bar:
        task = bar.add_task(f"{settings.policy}/{settings.placer}", total=n)
        return run(lambda done, total: bar.update(task, completed=done, total=total))


def _described(settings: SchedulerSettings) -> dict[str, Any]:
    """Every scheduler setting of a run as the report lists it (``scheduler.gittins.cohort_window_s: ...``),
    and the preemption rules the settings come to (a preemptive policy implies preemption by service)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, doc: dict[str, Any]) -> None:
        for k, v in doc.items():
            if isinstance(v, dict):
                walk(f"{prefix}{k}.", v)
            else:
                out[f"{prefix}{k}"] = v

    walk("scheduler.", plain(dataclasses.asdict(settings)))
    pre = sharing_policy(settings).preemption
    out["effective preemption_by_service"] = pre.enabled and pre.by_service
    out["effective max_lost_s"] = pre.max_lost_s
    return out


def _preemptible(preemption: bool | None, by_service: bool | None) -> bool:
    """Whether the trace's jobs are submitted preemptible: a trace does not say, so the flags do."""
    return bool(preemption or by_service)


@app.command("run")
def run_cmd(
    trace: TraceOpt,
    format: FormatOpt,
    out: OutOpt,
    config: ConfigOpt = None,
    policy: PolicyOpt = None,
    placement: PlacementOpt = None,
    fabric: FabricOpt = None,
    gpus: GpusOpt = None,
    gpus_per_host: PerHostOpt = 8,
    preemption: PreemptOpt = None,
    seed: RunSeedOpt = None,
    skip_bad_rows: SkipOpt = False,
    know_durations: KnowOpt = False,
    limit: LimitOpt = None,
    backfill: BackfillOpt = None,
    calendar: CalendarOpt = None,
    deadline_admission: DeadlineOpt = None,
    failures: FailuresOpt = None,
    preemption_by_service: ByServiceOpt = None,
    max_lost_s: MaxLostOpt = None,
    las_thresholds: ThresholdsOpt = None,
    launch_latency: LaunchLatencyOpt = None,
    exit_latency: ExitLatencyOpt = None,
    topology: TopologyOpt = None,
    topology_wait_s: TopologyWaitOpt = None,
) -> None:
    """Replay a trace: arrivals, runs, departures; writes metrics.json, jobs.csv, report.md and plots."""
    flags = {"policy": policy, "placer": placement, "preemption": preemption, "seed": seed, "backfill": backfill,
             "deadline_admission": deadline_admission, "preemption_by_service": preemption_by_service,
             "max_lost_s": max_lost_s, "las_thresholds_gpu_s": las_thresholds,
             "topology_wait_s": topology_wait_s}  # fmt: skip
    settings = _settings(config, flags)
    mode = _topology(topology)
    world = _world(launch_latency, exit_latency)
    cal = _calendar(calendar)
    preemptible = _preemptible(preemption, preemption_by_service)
    t = load_trace(trace, format, skip_bad_rows=skip_bad_rows, limit=limit)
    fab = cluster_fabric(t, fabric, gpus, gpus_per_host)
    outcome = _simulate(t, fab, settings, preemptible, cal, know_durations, _failures(failures, fab), world, mode)
    described = {"trace": str(trace), "format": format, "fabric": fab.name, "gpus": fab.gpu_count,
                 "config": str(config or ""), "calendar": str(calendar or ""), "know_durations": know_durations,
                 "topology": topology or "the trace's",
                 "preemptible_jobs": preemptible, **_described(settings)}  # fmt: skip
    write_outcome(outcome, out, described)
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
    config: ConfigOpt = None,
    fabric: FabricOpt = None,
    gpus: GpusOpt = None,
    gpus_per_host: PerHostOpt = 8,
    preemption: PreemptOpt = None,
    seed: RunSeedOpt = None,
    skip_bad_rows: SkipOpt = False,
    know_durations: KnowOpt = False,
    limit: LimitOpt = None,
    backfill: BackfillOpt = None,
    calendar: CalendarOpt = None,
    deadline_admission: DeadlineOpt = None,
    failures: FailuresOpt = None,
    preemption_by_service: ByServiceOpt = None,
    max_lost_s: MaxLostOpt = None,
    las_thresholds: ThresholdsOpt = None,
    launch_latency: LaunchLatencyOpt = None,
    exit_latency: ExitLatencyOpt = None,
) -> None:
    """Run every policy x placement on one trace and cluster; one sub-folder per pair and compare.json."""
    pols = [p.strip() for p in policies.split(",") if p.strip()]
    places = [q.strip() for q in placements.split(",") if q.strip()]
    if not pols or not places:
        raise InputError("--policies and --placements need at least one name each", source="compare")
    _check_names(pols, places)
    flags = {"preemption": preemption, "seed": seed, "backfill": backfill, "deadline_admission": deadline_admission,
             "preemption_by_service": preemption_by_service, "max_lost_s": max_lost_s,
             "las_thresholds_gpu_s": las_thresholds}  # fmt: skip
    runs = [_settings(config, {**flags, "policy": p, "placer": q}) for p in pols for q in places]
    world = _world(launch_latency, exit_latency)
    cal = _calendar(calendar)
    preemptible = _preemptible(preemption, preemption_by_service)
    t = load_trace(trace, format, skip_bad_rows=skip_bad_rows, limit=limit)
    fab = cluster_fabric(t, fabric, gpus, gpus_per_host)
    fails = _failures(failures, fab)
    outcomes = []
    for settings in runs:
        p, q = settings.policy, settings.placer
        o = _simulate(t, fab, settings, preemptible, cal, know_durations, fails, world)
        described = {"trace": str(trace), "format": format, "fabric": fab.name, "config": str(config or ""),
                     "preemptible_jobs": preemptible, **_described(settings)}  # fmt: skip
        write_outcome(o, out / f"{p}-{q}", described)
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
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Also write pack.json and allocation.png here.",
            callback=lambda p: None if p is None else output_folder(p, "--out"),
        ),
    ] = None,
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


@app.command("replay")
def replay_cmd(
    journal: Annotated[Path, typer.Argument(help="A server's journal (its journal_path setting).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Feed a server's journal to the same state, driver and scheduler: exit 0 when every decision is the
    same, 1 (listing what differs) when one is not."""
    report = replay_file(journal)
    if as_json:
        typer.echo(json.dumps(report_json(report)))
    elif report.same:
        typer.echo(f"same decisions: {report.cycles} cycles, {len(report.placements)} placements, "
                   f"{len(report.preemptions)} preemptions")  # fmt: skip
    else:
        for d in report.differences:
            typer.echo(f"cycle {d.cycle} (line {d.line}, t={d.now_s:.3f}): {d.what}")
        typer.echo(f"{len(report.differences)} differences in {report.cycles} cycles")
    if not report.same:
        raise typer.Exit(1)
