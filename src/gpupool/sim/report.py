"""A run's output folder: metrics.json, jobs.csv, report.md and PNG plots (matplotlib, Agg backend)."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpupool.sim.engine import SimResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

JOBS_COLUMNS = ("id", "submit", "start", "end", "gpus", "hosts", "leaves", "preemptions", "duration", "runtime_factor")


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:.3f}"


def write_jobs_csv(result: SimResult, path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(JOBS_COLUMNS)
        for r in result.records:
            w.writerow(
                [r.job_id, _num(r.submit_s), _num(r.start_s), _num(r.end_s), f"{r.gpus:g}", r.hosts, r.leaves,
                 r.preemptions, _num(r.duration_s), f"{r.slowdown_factor:.4f}"]
            )  # fmt: skip


def _step(ax: Any, points: Sequence[tuple[float, float]], label: str) -> None:
    if points:
        t = np.array([p[0] for p in points]) / 3600.0
        v = np.array([p[1] for p in points])
        ax.step(t, v, where="post", label=label, linewidth=0.8)


def _axes(width: float, height: float) -> tuple[Figure, Axes]:
    """A figure of its own (no pyplot: no global state, no display). matplotlib is imported here, not at
    module load, because it costs ~0.4 s and every `gpupool` command imports this module."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(figsize=(width, height))
    return fig, fig.subplots()


def write_plots(result: SimResult, out: Path, arrived: Sequence[tuple[float, float]] = ()) -> list[str]:
    """utilisation.png, jct_cdf.png, queue.png and, when given the arrived demand, allocation.png."""
    names = []
    fig, ax = _axes(7, 3.5)
    _step(ax, [(t, u / max(result.total_gpus, 1)) for t, u in result.usage], "GPUs held / total")
    ax.set(xlabel="time (h)", ylabel="GPU utilisation", ylim=(0, 1.05), title="GPU utilisation over time")
    fig.tight_layout()
    fig.savefig(out / "utilisation.png", dpi=100)
    names.append("utilisation.png")
    jct = np.sort([r.end_s - r.submit_s for r in result.records if r.end_s is not None])
    fig, ax = _axes(5, 3.5)
    if jct.size:
        ax.plot(jct / 3600.0, np.arange(1, jct.size + 1) / jct.size)
        ax.set_xscale("symlog")
    ax.set(xlabel="JCT (h)", ylabel="share of jobs", title="JCT CDF")
    fig.tight_layout()
    fig.savefig(out / "jct_cdf.png", dpi=100)
    names.append("jct_cdf.png")
    fig, ax = _axes(7, 3.5)
    _step(ax, [(t, float(q)) for t, q in result.queue], "waiting jobs")
    ax.set(xlabel="time (h)", ylabel="jobs waiting", title="Queue length")
    fig.tight_layout()
    fig.savefig(out / "queue.png", dpi=100)
    names.append("queue.png")
    if arrived:
        names.append(write_allocation_plot(arrived, out / "allocation.png"))
    return names


def write_allocation_plot(points: Sequence[tuple[float, float]], path: Path) -> str:
    """Allocated vs arrived demand, both in % of capacity (the pack protocol's curve)."""
    fig, ax = _axes(5, 3.5)
    ax.plot([p[0] for p in points], [p[1] for p in points], label="allocated")
    ax.plot([0, 100], [0, 100], linestyle=":", color="grey", label="all arrived placed")
    ax.set(xlabel="arrived GPU demand (% of capacity)", ylabel="GPUs allocated (%)", title="Allocation vs demand")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path.name


def write_report(
    metrics: Mapping[str, Any], title: str, settings: Mapping[str, Any], plots: Sequence[str], path: Path
) -> None:
    lines = [f"# {title}", "", "## Settings", ""]
    lines += [f"- {k}: {v}" for k, v in settings.items()]
    lines += ["", "## Metrics", "", "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {json.dumps(v)} |" for k, v in metrics.items() if not isinstance(v, Mapping)]
    if metrics.get("avg_jct_s") is not None and metrics.get("lb_avg_jct_s"):
        lines += ["", f"Average JCT is {metrics['avg_jct_over_lb']}x the lower bound ({metrics['lb_avg_jct_s']} s)."]
    lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    path.write_text("\n".join(lines) + "\n")


def write_run(
    result: SimResult, metrics: Mapping[str, Any], out: Path, title: str, settings: Mapping[str, Any]
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    write_jobs_csv(result, out / "jobs.csv")
    plots = write_plots(result, out)
    write_report(metrics, title, settings, plots, out / "report.md")
